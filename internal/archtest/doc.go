// Package archtest holds architecture tests only. They enforce DESIGN §2:
// the package import table (checked on `go list -deps -json` output, never
// by scanning source text) and the rule that no exported API accepts a raw
// command, a pre-rendered key or a script.
//
// What may change here: the rule tables in the tests, when DESIGN §2 changes,
// and the reviewed allowlist of API exceptions (each entry needs a reason).
// Nothing in this package is imported by production code.
package archtest
