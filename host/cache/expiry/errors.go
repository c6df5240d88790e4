package expiry

// Reason is why a Policy or a TTL was refused. The set is closed; the zero
// value is invalid. A Reason is an error, so errors.Is(err,
// expiry.TTLBelowMinimum) works; every *Error also matches ErrInvalid.
type Reason uint8

const (
	_ Reason = iota
	EmptyRevision
	RevisionTooLong
	SpreadOutOfRange
	MinimumNotPositive
	NotWholeMillis
	TTLBelowMinimum
	TTLTooLong
	SoftAfterHard
	WrittenAtOutOfRange
)

var reasonNames = [...]string{
	EmptyRevision:       "EMPTY_REVISION",
	RevisionTooLong:     "REVISION_TOO_LONG",
	SpreadOutOfRange:    "SPREAD_OUT_OF_RANGE",
	MinimumNotPositive:  "MINIMUM_NOT_POSITIVE",
	NotWholeMillis:      "NOT_WHOLE_MILLISECONDS",
	TTLBelowMinimum:     "TTL_BELOW_MINIMUM",
	TTLTooLong:          "TTL_TOO_LONG",
	SoftAfterHard:       "SOFT_AFTER_HARD",
	WrittenAtOutOfRange: "WRITTEN_AT_OUT_OF_RANGE",
}

// Reasons lists every valid reason in declaration order.
func Reasons() []Reason {
	return []Reason{EmptyRevision, RevisionTooLong, SpreadOutOfRange, MinimumNotPositive, NotWholeMillis,
		TTLBelowMinimum, TTLTooLong, SoftAfterHard, WrittenAtOutOfRange}
}

// Valid reports whether r is one of the closed set.
func (r Reason) Valid() bool { return r >= EmptyRevision && r <= WrittenAtOutOfRange }

// String returns the canonical upper-case name.
func (r Reason) String() string {
	if r.Valid() {
		return reasonNames[r]
	}
	return "INVALID_REASON"
}

func (r Reason) Error() string { return "cache expiry: " + r.String() }

type invalid struct{}

func (invalid) Error() string { return "cache expiry: invalid policy or TTL" }

// ErrInvalid matches every *Error.
var ErrInvalid error = invalid{}

// Error is the typed refusal of a policy or TTL. It carries no input value.
type Error struct{ Reason Reason }

func (e *Error) Error() string { return "cache expiry: invalid: " + e.Reason.String() }

// Is matches ErrInvalid and the Reason.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case invalid:
		return true
	case Reason:
		return t == e.Reason
	}
	return false
}

func fail(r Reason) error { return &Error{Reason: r} }
