package certainty

import (
	"errors"
	"strings"
)

// Outcomer is implemented by errors that already know their certainty: guard
// rejections, admission refusals, dial failures wrapped by the runtime and
// *Error itself. Classify trusts it before looking at anything else.
type Outcomer interface {
	CertaintyOutcome() Outcome
}

// Error is the typed error of one Redis call. Its text carries only
// low-cardinality facts (operation, outcome, reason code): never a key, an
// argument, a credential or the raw server message, because errors end up in
// logs and metrics. The original error stays reachable through Unwrap for
// programmatic inspection (errors.As on redis.Error, for example).
type Error struct {
	// Outcome is the certainty of the call. Never Applied.
	Outcome Outcome
	// Op is a bounded operation name (a command name such as "set", or a
	// runtime operation such as "ping").
	Op string
	// Code is a bounded reason: a known server error code ("WRONGTYPE"),
	// or a transport reason ("timeout", "dial", "pool-timeout", ...).
	Code string
	// Cause is the underlying error. It may contain server text and must not
	// be logged verbatim.
	Cause error
}

// Error implements error without echoing the cause's text.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("redis call")
	if e.Op != "" {
		b.WriteString(" ")
		b.WriteString(e.Op)
	}
	b.WriteString(": ")
	b.WriteString(e.Outcome.String())
	if e.Code != "" {
		b.WriteString(" (")
		b.WriteString(e.Code)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// CertaintyOutcome implements Outcomer.
func (e *Error) CertaintyOutcome() Outcome { return e.Outcome }

// Retryable reports whether the call provably never left the process.
func (e *Error) Retryable() bool { return e.Outcome.Retryable() }

// Ambiguous reports whether the effect on the server is unknown.
func (e *Error) Ambiguous() bool { return e.Outcome.Ambiguous() }

// Is matches the outcome sentinels (ErrIndeterminate, ...), so callers can
// write errors.Is(err, certainty.ErrIndeterminate).
func (e *Error) Is(target error) bool {
	var s sentinel
	if errors.As(target, &s) {
		return Outcome(s) == e.Outcome
	}
	return false
}

// sentinel is the type of the outcome sentinels. It is comparable and
// matches any *Error (or Outcomer error through OutcomeOf) with the same outcome.
type sentinel Outcome

func (s sentinel) Error() string { return "redis call: " + Outcome(s).String() }

// Sentinels for errors.Is, one per non-success outcome.
var (
	ErrNotApplied            error = sentinel(NotApplied)
	ErrConflict              error = sentinel(Conflict)
	ErrRejected              error = sentinel(Rejected)
	ErrUnavailableBeforeSend error = sentinel(UnavailableBeforeSend)
	ErrOverloadedBeforeSend  error = sentinel(OverloadedBeforeSend)
	ErrIndeterminate         error = sentinel(Indeterminate)
)

// Sentinel returns the errors.Is sentinel of o (nil for Applied or invalid).
func Sentinel(o Outcome) error {
	switch o {
	case NotApplied, Conflict, Rejected, UnavailableBeforeSend, OverloadedBeforeSend, Indeterminate:
		return sentinel(o)
	}
	return nil
}

// Wrap classifies err and returns it as an *Error (nil when the call was
// Applied). An err that already is an *Error is returned unchanged.
func Wrap(op string, err error, mutation bool) error {
	if err == nil {
		return nil
	}
	var ce *Error
	if errors.As(err, &ce) {
		return err
	}
	o, code := classify(err, mutation)
	if o == Applied {
		return err // redis.Nil and friends: a reply, not a failure
	}
	return &Error{Outcome: o, Op: boundedOp(op), Code: code, Cause: err}
}

// boundedOp keeps operation names low-cardinality and free of arguments.
func boundedOp(op string) string {
	const max = 32
	if len(op) > max {
		op = op[:max]
	}
	for i := 0; i < len(op); i++ {
		c := op[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ' ') {
			return "invalid-op"
		}
	}
	return op
}
