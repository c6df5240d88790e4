// Synthetic module for the archtest self-check: every package here breaks
// (or deliberately respects) one import rule. It is never built.
module github.com/caphost/caphost

go 1.26
