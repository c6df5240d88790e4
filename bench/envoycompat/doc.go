// Package envoycompat checks caphost's Envoy rate-limit service against
// envoyproxy/ratelimit itself: the same descriptor files, loaded by both,
// must select the same limit for every request descriptor. It lives in the
// bench module so that envoyproxy/ratelimit never becomes a dependency of
// caphost.
package envoycompat
