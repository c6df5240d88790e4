package envelope

// Category is why an envelope could not be encoded or decoded. The set is
// closed; the zero value is invalid so that a forgotten assignment shows.
// A Category is itself an error, so errors.Is(err, envelope.FutureVersion)
// works.
type Category uint8

const (
	_ Category = iota
	// Corrupt: the bytes are an envelope of a known version but are not
	// self-consistent: truncated, trailing bytes, a length that does not
	// match, a digest mismatch, reserved flag bits, a forbidden flag
	// combination, times out of order or a DEFLATE stream that does not
	// inflate to the declared size. Code CORRUPT.
	Corrupt
	// FutureVersion: a newer writer's envelope version this reader does not
	// know. The entry must be neither deleted nor overwritten by this
	// reader. Code SCHEMA_MISMATCH.
	FutureVersion
	// RetiredVersion: an envelope version older than N-1. Code
	// SCHEMA_MISMATCH.
	RetiredVersion
	// UnknownEnvelope: the value does not start with the envelope magic: it
	// was not written by caphost's cache. Code SCHEMA_MISMATCH.
	UnknownEnvelope
	// TooLarge: on encode the payload or the envelope exceeds the limits
	// (REJECTED_TOO_LARGE: the value is not recorded, the source result still
	// succeeds); on decode the stored value, its codec id, its declared
	// decoded size or its compression ratio exceeds the limits, and nothing
	// past the bound was read or allocated. Code REJECTED_TOO_LARGE.
	TooLarge
	// Invalid: Encode was given an envelope that cannot be written (empty or
	// malformed codec id, a negative entry with a payload, expiries out of
	// order, times before 1970 or past 2^53 ms), or the Limits themselves are
	// invalid. A programming error of the caller. Code INVALID.
	Invalid
)

var categoryNames = [...]string{
	Corrupt:         "CORRUPT",
	FutureVersion:   "FUTURE_VERSION",
	RetiredVersion:  "RETIRED_VERSION",
	UnknownEnvelope: "UNKNOWN_ENVELOPE",
	TooLarge:        "TOO_LARGE",
	Invalid:         "INVALID",
}

// Categories lists every valid category in declaration order.
func Categories() []Category {
	return []Category{Corrupt, FutureVersion, RetiredVersion, UnknownEnvelope, TooLarge, Invalid}
}

// Valid reports whether c is one of the closed set.
func (c Category) Valid() bool { return c >= Corrupt && c <= Invalid }

// String returns the canonical upper-case name (e.g. "FUTURE_VERSION").
func (c Category) String() string {
	if c.Valid() {
		return categoryNames[c]
	}
	return "INVALID_CATEGORY"
}

// Code is the stable outcome code the category reports as: CORRUPT,
// SCHEMA_MISMATCH, REJECTED_TOO_LARGE or INVALID.
func (c Category) Code() string {
	switch c {
	case Corrupt:
		return "CORRUPT"
	case FutureVersion, RetiredVersion, UnknownEnvelope:
		return "SCHEMA_MISMATCH"
	case TooLarge:
		return "REJECTED_TOO_LARGE"
	case Invalid:
		return "INVALID"
	}
	return "INVALID_CATEGORY"
}

// Error makes a Category usable as an errors.Is target.
func (c Category) Error() string { return "cache envelope: " + c.String() }

// code is the type of the code-level sentinels.
type code string

func (c code) Error() string { return "cache envelope: " + string(c) }

// Code-level sentinels: each matches every *Error whose Category has that
// code (ErrSchemaMismatch matches FutureVersion, RetiredVersion and
// UnknownEnvelope).
var (
	ErrCorrupt        error = code("CORRUPT")
	ErrSchemaMismatch error = code("SCHEMA_MISMATCH")
	ErrTooLarge       error = code("REJECTED_TOO_LARGE")
	ErrInvalid        error = code("INVALID")
)

// Error is the typed failure of Encode, Decode or Limits.Validate. Reason is
// a fixed, low-cardinality phrase (which field, which rule); it never
// contains bytes of the value, the codec id or the payload.
type Error struct {
	Category Category
	Reason   string
}

func (e *Error) Error() string {
	return "cache envelope: " + e.Category.String() + ": " + e.Reason
}

// Is matches the Category itself and its code sentinel.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Category:
		return t == e.Category
	case code:
		return string(t) == e.Category.Code()
	}
	return false
}

func fail(c Category, reason string) error { return &Error{Category: c, Reason: reason} }
