package l1

// Reason is why a Config was refused. The set is closed; the zero value is
// invalid. A Reason is an error, so errors.Is(err, l1.StrictRegion) works;
// every *Error also matches ErrInvalid.
type Reason uint8

const (
	_ Reason = iota
	// StrictRegion: the region is declared strict; it gets no L1.
	StrictRegion
	// EntriesOutOfRange: MaxEntries is not in [1, MaxEntriesLimit].
	EntriesOutOfRange
	// BytesOutOfRange: MaxBytes is not in [EntryOverhead+1, MaxBytesLimit].
	BytesOutOfRange
	// EntryBytesOutOfRange: MaxEntryBytes is set and not in
	// [EntryOverhead+1, min(MaxBytes, MaxUint32)].
	EntryBytesOutOfRange
	// MaxAgeOutOfRange: MaxAge is not in [1ms, MaxAgeLimit].
	MaxAgeOutOfRange
	// NoClock: Clock is nil.
	NoClock
)

var reasonNames = [...]string{
	StrictRegion:         "STRICT_REGION",
	EntriesOutOfRange:    "ENTRIES_OUT_OF_RANGE",
	BytesOutOfRange:      "BYTES_OUT_OF_RANGE",
	EntryBytesOutOfRange: "ENTRY_BYTES_OUT_OF_RANGE",
	MaxAgeOutOfRange:     "MAX_AGE_OUT_OF_RANGE",
	NoClock:              "NO_CLOCK",
}

// Reasons lists every valid reason in declaration order.
func Reasons() []Reason {
	return []Reason{StrictRegion, EntriesOutOfRange, BytesOutOfRange, EntryBytesOutOfRange, MaxAgeOutOfRange, NoClock}
}

// Valid reports whether r is one of the closed set.
func (r Reason) Valid() bool { return r >= StrictRegion && r <= NoClock }

// String returns the canonical upper-case name.
func (r Reason) String() string {
	if r.Valid() {
		return reasonNames[r]
	}
	return "INVALID_REASON"
}

func (r Reason) Error() string { return "cache l1: " + r.String() }

type invalid struct{}

func (invalid) Error() string { return "cache l1: invalid config" }

// ErrInvalid matches every *Error.
var ErrInvalid error = invalid{}

// Error is the typed refusal of a Config. It carries no input value.
type Error struct{ Reason Reason }

func (e *Error) Error() string { return "cache l1: invalid config: " + e.Reason.String() }

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
