package hint

// Category is why a hint was refused. The set is closed; the zero value is
// invalid. A Category is itself an error, so errors.Is(err, hint.ErrForged)
// works on every error this package returns.
type Category uint8

const (
	_ Category = iota
	// ErrMalformed: Open got bytes that are not a hint (no magic, a length
	// outside MinBytes..MaxBytes), or a correctly authenticated hint that
	// breaks the layout (unknown kind, bad region, scope out of bounds,
	// fields of the other kind, trailing bytes). The second kind can only
	// come from a holder of the secret with a broken encoder.
	ErrMalformed
	// ErrUnknownVersion: the hint has the magic but a version this reader
	// does not know (a newer or retired writer during a rolling deploy).
	ErrUnknownVersion
	// ErrForged: the tag does not authenticate the hint under this Codec's
	// secret: forged, corrupted, truncated, extended, or sealed with
	// another secret.
	ErrForged
	// ErrStale: the hint was issued more than the window before now.
	// errors.Is(err, ErrStale) also holds for ErrFuture: both are outside
	// the freshness window and a receiver drops them alike.
	ErrStale
	// ErrFuture: the hint was issued more than the window after now (the
	// sender's clock runs ahead, or someone hopes a recorded hint will
	// stay replayable for longer). Matches ErrStale too.
	ErrFuture
	// ErrInvalid: Seal was given a Message that cannot be sent, or
	// NewCodec a secret, window or clock out of bounds. A programming or
	// configuration error of the caller.
	ErrInvalid
)

var categoryNames = [...]string{
	ErrMalformed:      "MALFORMED",
	ErrUnknownVersion: "UNKNOWN_VERSION",
	ErrForged:         "FORGED",
	ErrStale:          "STALE",
	ErrFuture:         "FUTURE",
	ErrInvalid:        "INVALID",
}

// Categories lists every valid category in declaration order.
func Categories() []Category {
	return []Category{ErrMalformed, ErrUnknownVersion, ErrForged, ErrStale, ErrFuture, ErrInvalid}
}

// Valid reports whether c is one of the closed set.
func (c Category) Valid() bool { return c >= ErrMalformed && c <= ErrInvalid }

// String returns the canonical upper-case name (e.g. "FORGED").
func (c Category) String() string {
	if c.Valid() {
		return categoryNames[c]
	}
	return "INVALID_CATEGORY"
}

// Error returns "cache hint: " and the name.
func (c Category) Error() string { return "cache hint: " + c.String() }

// Is makes ErrFuture match ErrStale.
func (c Category) Is(target error) bool { return c == ErrFuture && target == ErrStale }

// Error is the typed failure of NewCodec, Seal and Open. Reason is a fixed,
// low-cardinality phrase; it never contains a byte of the hint, the region
// or the secret.
type Error struct {
	Category Category
	Reason   string
}

// Error returns the category and the fixed reason.
func (e *Error) Error() string { return "cache hint: " + e.Category.String() + ": " + e.Reason }

// Is matches the Category (and, through it, ErrStale for ErrFuture).
func (e *Error) Is(target error) bool { return target == e.Category || e.Category.Is(target) }

func fail(c Category, reason string) error { return &Error{Category: c, Reason: reason} }
