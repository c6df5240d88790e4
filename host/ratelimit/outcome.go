package ratelimit

import (
	"slices"
	"time"
)

// Kind is the variant of an Outcome.
type Kind uint8

// The outcome kinds. The zero value is invalid so a forgotten assignment is
// never read as a decision.
const (
	_ Kind = iota
	// Evaluated: the global limiter decided; Decision is authoritative.
	Evaluated
	// Degraded: a fallback decided (local emergency, fail-open policy or a
	// shadow policy whose evaluation failed); Decision says which.
	Degraded
	// Unavailable: no decision; the request must be refused (503).
	Unavailable
	// Indeterminate: the evaluation may have been applied but its result is
	// unknown; no decision, never an allow.
	Indeterminate
	// NotLimited: the selector chose no policy for the request (Decide
	// only). There is no decision and nothing was counted; the request may
	// proceed.
	NotLimited
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Evaluated:
		return "evaluated"
	case Degraded:
		return "degraded"
	case Unavailable:
		return "unavailable"
	case Indeterminate:
		return "indeterminate"
	case NotLimited:
		return "not-limited"
	}
	return "invalid"
}

// Source says who made a decision.
type Source string

// Decision sources.
const (
	SourceGlobalRedis    Source = "GLOBAL_REDIS"
	SourceLocalEmergency Source = "LOCAL_EMERGENCY"
	SourceFailOpen       Source = "FAIL_OPEN_POLICY"
	SourceShadow         Source = "SHADOW"
)

// Certainty is how exact a decision is. There is no third value: without
// mutation certainty there is no decision, only Indeterminate.
type Certainty string

// Decision certainties.
const (
	Certain              Certainty = "CERTAIN"
	ApproximateAlgorithm Certainty = "APPROXIMATE_ALGORITHM"
)

// FailureCategory says why an outcome carries no global decision. Values are
// a closed, low-cardinality set (they are metric label values).
type FailureCategory string

// Failure categories.
const (
	// CategoryNone: the global limiter answered.
	CategoryNone FailureCategory = ""
	// CategoryRedisUnavailable: the call provably never reached Redis (dial
	// refused, lane closed) or Redis refused before executing (LOADING,
	// READONLY, ...). Failure modes apply.
	CategoryRedisUnavailable FailureCategory = "redis-unavailable"
	// CategoryOverloaded: a bound was full before send. Failure modes apply.
	CategoryOverloaded FailureCategory = "overloaded"
	// CategoryClockUnsafe: the program refused (CLOCK_UNSAFE). Failure modes apply.
	CategoryClockUnsafe FailureCategory = "clock-unsafe"
	// CategoryTimeout: the call may have been applied (INDETERMINATE).
	CategoryTimeout FailureCategory = "timeout"
	// CategoryMisconfigured: program, compatibility, key or configuration
	// error. Never a fallback.
	CategoryMisconfigured FailureCategory = "misconfigured"
	// CategoryInvalidRequest: the request itself is invalid (unknown policy,
	// bad cost, wrong subject dimensions). Never a fallback.
	CategoryInvalidRequest FailureCategory = "invalid-request"
	// CategoryDeadline: the caller's deadline had passed before anything was sent.
	CategoryDeadline FailureCategory = "deadline"
	// CategoryLocalExhausted: local emergency limiter could not answer
	// (per-pod limit 0 or in-flight bound full): fail closed.
	CategoryLocalExhausted FailureCategory = "local-unavailable"
)

// Reason says why a Degraded outcome was degraded (bounded label values).
type Reason string

// Degradation reasons.
const (
	ReasonNone             Reason = ""
	ReasonRedisUnavailable Reason = "redis-unavailable"
	ReasonOverloaded       Reason = "overloaded"
	ReasonClockUnsafe      Reason = "clock-unsafe"
	ReasonTimeout          Reason = "timeout"
)

// Decision is a rate decision. It exists only where "allowed" is meaningful.
type Decision struct {
	Allowed bool
	// Limit is the policy's limit (tokens for a token bucket, scaled down
	// by the per-pod share for a local emergency decision).
	Limit int64
	// Remaining is what is left after this decision (an approximation for
	// the sliding counter).
	Remaining int64
	// RetryAfter is 0 when allowed, else the wait until the same request
	// could pass with no other traffic.
	RetryAfter time.Duration
	// ResetAt is when the limit resets (server time for GLOBAL_REDIS).
	ResetAt time.Time
	// Window is the policy's quota window: the window of the windowed
	// algorithms and GCRA, the time a token bucket takes to refill from
	// empty (capacity / refill rate); 0 when unknown.
	Window    time.Duration
	Policy    string
	Revision  string
	Source    Source
	Certainty Certainty
	// ShadowDenied reports, for a shadow policy's decision by the global
	// limiter (Source SHADOW, Allowed), that the policy would have
	// denied. It is false for every other decision, and for a shadow
	// decision made without the global limiter (nothing was evaluated).
	ShadowDenied bool
}

// Outcome is the sealed result of an evaluation: only this package builds
// one, and each kind exposes only what is meaningful for it.
type Outcome struct {
	kind         Kind
	decision     Decision
	policy       string
	revision     string
	evaluationID string
	retryAfter   time.Duration
	category     FailureCategory
	reason       Reason
	replayed     bool
	// chain is, for a hierarchy with a decision, every level's decision
	// in evaluation order (nil for one policy).
	chain []Decision
}

// Kind returns the outcome's variant.
func (o Outcome) Kind() Kind { return o.kind }

// Decision returns the decision of an Evaluated or Degraded outcome; ok is
// false for Unavailable and Indeterminate.
func (o Outcome) Decision() (Decision, bool) {
	if o.kind == Evaluated || o.kind == Degraded {
		return o.decision, true
	}
	return Decision{}, false
}

// Decisions returns the decision of every policy the outcome evaluated,
// in evaluation order: for a hierarchy, each level up to and including
// the one that denied (or all of them when every level allowed); for one
// policy, its decision alone. It is nil for outcomes without a decision
// (a hierarchy that ended Unavailable or Indeterminate has none). The
// slice is the caller's.
func (o Outcome) Decisions() []Decision {
	d, ok := o.Decision()
	switch {
	case !ok:
		return nil
	case o.chain != nil:
		return slices.Clone(o.chain)
	}
	return []Decision{d}
}

// Allowed reports whether the request may proceed: an Evaluated or
// Degraded decision that allows, or NotLimited (no policy applies).
func (o Outcome) Allowed() bool {
	if o.kind == NotLimited {
		return true
	}
	d, ok := o.Decision()
	return ok && d.Allowed
}

// Policy is the policy id the outcome is about (the denying or failing one
// for a hierarchy).
func (o Outcome) Policy() string { return o.policy }

// Revision is the policy revision ("" when the policy was unknown).
func (o Outcome) Revision() string { return o.revision }

// EvaluationID is the evaluation id used (Indeterminate outcomes carry it so
// the caller can reconcile).
func (o Outcome) EvaluationID() string { return o.evaluationID }

// RetryAfter is the suggested wait: the decision's for a denial, the
// outcome's own for Unavailable and Indeterminate.
func (o Outcome) RetryAfter() time.Duration {
	if d, ok := o.Decision(); ok {
		return d.RetryAfter
	}
	return o.retryAfter
}

// Category is the failure category of Unavailable and Indeterminate outcomes
// (and of the global failure behind a Degraded one).
func (o Outcome) Category() FailureCategory { return o.category }

// Reason is the degradation reason of a Degraded outcome.
func (o Outcome) Reason() Reason { return o.reason }

// Replayed reports that the decision was a DEDUP_REPLAY of an earlier
// evaluation with the same id.
func (o Outcome) Replayed() bool { return o.replayed }
