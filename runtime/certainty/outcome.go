// Package certainty owns caphost's execution-certainty model: what the host
// knows about a Redis mutation after it returns. Every mutation reports
// exactly one Outcome. A timeout after the write may have left the process is
// never "failed" — it is INDETERMINATE, and nothing retries it blindly.
//
// This package is a leaf: the guard, the program catalog and the runtime all
// report through it, so it imports nothing of caphost's.
package certainty

// Outcome is the certainty of one Redis call.
type Outcome uint8

// The closed set of outcomes. The zero value is deliberately invalid so that
// a forgotten assignment is caught.
const (
	_ Outcome = iota
	// Applied: the server executed the call and reported the effect.
	Applied
	// NotApplied: the server answered and definitely did not apply the effect
	// (a program status such as ABSENT, or an error reply like READONLY/OOM).
	NotApplied
	// Conflict: the server answered that a precondition (owner, revision) failed.
	Conflict
	// Rejected: the call is invalid and will stay invalid (guard rejection,
	// WRONGTYPE, NOPERM, bad arguments). It was either never sent or refused.
	Rejected
	// UnavailableBeforeSend: the call never reached the wire (dial refused,
	// lane closed, no connection).
	UnavailableBeforeSend
	// OverloadedBeforeSend: the call never reached the wire because a bound
	// was full (pool or in-flight queue exhausted).
	OverloadedBeforeSend
	// Indeterminate: the request may have been executed; only inspection or
	// reconciliation with the operation token can tell.
	Indeterminate
)

var outcomeNames = [...]string{
	Applied:               "APPLIED",
	NotApplied:            "NOT_APPLIED",
	Conflict:              "CONFLICT",
	Rejected:              "REJECTED",
	UnavailableBeforeSend: "UNAVAILABLE_BEFORE_SEND",
	OverloadedBeforeSend:  "OVERLOADED_BEFORE_SEND",
	Indeterminate:         "INDETERMINATE",
}

// Outcomes lists every valid outcome in declaration order.
func Outcomes() []Outcome {
	return []Outcome{Applied, NotApplied, Conflict, Rejected, UnavailableBeforeSend, OverloadedBeforeSend, Indeterminate}
}

// String returns the canonical upper-case name (e.g. "INDETERMINATE").
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "INVALID_OUTCOME"
}

// Valid reports whether o is one of the closed set.
func (o Outcome) Valid() bool { return o >= Applied && o <= Indeterminate }

// Sent reports whether the request may have reached the server.
func (o Outcome) Sent() bool {
	return o != UnavailableBeforeSend && o != OverloadedBeforeSend && o.Valid()
}

// Retryable reports whether repeating the same call is safe without first
// inspecting server state: only calls that provably never left the process.
// A Rejected call is not retryable (it would be rejected again).
func (o Outcome) Retryable() bool {
	return o == UnavailableBeforeSend || o == OverloadedBeforeSend
}

// Ambiguous reports whether the effect on the server is unknown. Retryable and
// Ambiguous are never both true.
func (o Outcome) Ambiguous() bool { return o == Indeterminate }
