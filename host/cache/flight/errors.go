package flight

import "context"

// Reason is why a call was refused, why a load's context ended, or why a
// configuration was refused. The set is closed; the zero value is invalid.
// Every Reason is an error, and every error this package returns (except a
// *PanicError, a caller's own ctx.Err() and what fn returns) is a Reason or
// wraps one, so errors.Is(err, flight.ErrTooManyKeys) and
// errors.As(err, new(flight.Reason)) both work. No Reason carries a key.
type Reason uint8

const (
	_ Reason = iota
	// ErrTooManyKeys: MaxKeys loads are running, so a load for a new key
	// was not started. Matches ErrOverloaded.
	ErrTooManyKeys
	// ErrTooManyWaiters: MaxWaiters callers are attached to the key's load
	// already. Matches ErrOverloaded.
	ErrTooManyWaiters
	// ErrBulkheadFull: every permit is taken and the queue is full.
	// Matches ErrOverloaded.
	ErrBulkheadFull
	// ErrBulkheadTimeout: the caller's deadline passed while it was queued
	// for a permit; the error also matches context.DeadlineExceeded.
	// Matches ErrOverloaded.
	ErrBulkheadTimeout
	// ErrLoadTimeout: the load ran for LoadTimeout without returning. It is
	// the cause (context.Cause) of fn's context, and what every attached
	// caller gets, wrapped with context.DeadlineExceeded.
	ErrLoadTimeout
	// ErrClosed: the Group was closed: Do refuses new calls, and callers
	// attached to a load that Close cancelled get it. It is also the cause
	// of a cancelled load's context.
	ErrClosed
	// ErrAbandoned: every caller attached to the load went away before it
	// returned. It is only ever the cause (context.Cause) of fn's context;
	// no caller receives it.
	ErrAbandoned
	// ErrKeysOutOfRange: Config.MaxKeys is not in [1, MaxKeysLimit].
	// Matches ErrInvalid.
	ErrKeysOutOfRange
	// ErrWaitersOutOfRange: Config.MaxWaiters is not in
	// [1, MaxWaitersLimit]. Matches ErrInvalid.
	ErrWaitersOutOfRange
	// ErrLoadTimeoutOutOfRange: Config.LoadTimeout is not in
	// [MinLoadTimeout, MaxLoadTimeout]. Matches ErrInvalid.
	ErrLoadTimeoutOutOfRange
	// ErrConcurrencyOutOfRange: NewBulkhead's maxConcurrent is not in
	// [1, MaxConcurrencyLimit]. Matches ErrInvalid.
	ErrConcurrencyOutOfRange
	// ErrQueueOutOfRange: NewBulkhead's maxQueued is not in
	// [0, MaxQueuedLimit]. Matches ErrInvalid.
	ErrQueueOutOfRange
	// ErrRunning: Lead found a load for the key already running and, as
	// asked, did not join it. The caller has something to serve meanwhile
	// (a stale value). Neither an overload nor a failure.
	ErrRunning
)

var reasonNames = [...]string{
	ErrTooManyKeys:           "TOO_MANY_KEYS",
	ErrTooManyWaiters:        "TOO_MANY_WAITERS",
	ErrBulkheadFull:          "BULKHEAD_FULL",
	ErrBulkheadTimeout:       "BULKHEAD_TIMEOUT",
	ErrLoadTimeout:           "LOAD_TIMEOUT",
	ErrClosed:                "CLOSED",
	ErrAbandoned:             "ABANDONED",
	ErrKeysOutOfRange:        "KEYS_OUT_OF_RANGE",
	ErrWaitersOutOfRange:     "WAITERS_OUT_OF_RANGE",
	ErrLoadTimeoutOutOfRange: "LOAD_TIMEOUT_OUT_OF_RANGE",
	ErrConcurrencyOutOfRange: "CONCURRENCY_OUT_OF_RANGE",
	ErrQueueOutOfRange:       "QUEUE_OUT_OF_RANGE",
	ErrRunning:               "RUNNING",
}

// Reasons lists every valid reason in declaration order.
func Reasons() []Reason {
	return []Reason{ErrTooManyKeys, ErrTooManyWaiters, ErrBulkheadFull, ErrBulkheadTimeout, ErrLoadTimeout,
		ErrClosed, ErrAbandoned, ErrKeysOutOfRange, ErrWaitersOutOfRange, ErrLoadTimeoutOutOfRange,
		ErrConcurrencyOutOfRange, ErrQueueOutOfRange, ErrRunning}
}

// Valid reports whether r is one of the closed set.
func (r Reason) Valid() bool { return r >= ErrTooManyKeys && r <= ErrRunning }

// String returns the canonical upper-case name (e.g. "TOO_MANY_KEYS").
func (r Reason) String() string {
	if r.Valid() {
		return reasonNames[r]
	}
	return "INVALID_REASON"
}

// Error returns "cache flight: " and the name; it never carries a key.
func (r Reason) Error() string { return "cache flight: " + r.String() }

// Is matches the class sentinels: ErrOverloaded for the four refusals a
// bound made, ErrInvalid for the configuration reasons.
func (r Reason) Is(target error) bool {
	switch target {
	case ErrOverloaded:
		return r >= ErrTooManyKeys && r <= ErrBulkheadTimeout
	case ErrInvalid:
		return r >= ErrKeysOutOfRange && r <= ErrQueueOutOfRange
	}
	return false
}

// class is the type of the class sentinels.
type class uint8

// Error names the class.
func (c class) Error() string {
	if c == ErrOverloaded {
		return "cache flight: overloaded"
	}
	return "cache flight: invalid configuration"
}

// Class sentinels. They are constants, so nobody can reassign them.
const (
	// ErrOverloaded matches ErrTooManyKeys, ErrTooManyWaiters,
	// ErrBulkheadFull and ErrBulkheadTimeout: a bound refused the work.
	// The cache reports it as OVERLOADED.
	ErrOverloaded class = iota + 1
	// ErrInvalid matches every configuration reason.
	ErrInvalid
)

// reasonError is a Reason together with the context error behind it, so
// that both errors.Is(err, ErrLoadTimeout) and
// errors.Is(err, context.DeadlineExceeded) hold.
type reasonError struct {
	reason Reason
	err    error
}

func (e *reasonError) Error() string   { return e.reason.Error() + ": " + e.err.Error() }
func (e *reasonError) Unwrap() []error { return []error{e.reason, e.err} }

// loadTimeout is what callers of a load that ran out of time get.
func loadTimeout() error { return &reasonError{reason: ErrLoadTimeout, err: context.DeadlineExceeded} }
