package keys

import "errors"

// ErrInvalidSpec is matched (errors.Is) by every error Build, BuildWith,
// Group and GroupWith return: the request for a key was malformed. Invalid
// key input is a caller error, never an outage and never a reason to fail
// open.
var ErrInvalidSpec = errors.New("keys: invalid key spec")

// ErrInvalidConfig is matched (errors.Is) by every problem NewBuilder
// reports.
var ErrInvalidConfig = errors.New("keys: invalid builder config")

// Error describes one validation problem. Field names the offending input
// (for example "Region" or "Parts[3]") and Reason says what is wrong. Neither
// ever contains secret material or the bytes of an identifying part: parts
// come from guests and callers and may be personal data.
type Error struct {
	Field  string
	Reason string

	// sentinel is ErrInvalidConfig for NewBuilder problems; nil means
	// ErrInvalidSpec so that a literal Error{Field, Reason} still behaves.
	sentinel error
}

// Error implements error.
func (e *Error) Error() string {
	return "keys: " + e.Field + ": " + e.Reason
}

// Unwrap exposes the sentinel (ErrInvalidSpec or ErrInvalidConfig).
func (e *Error) Unwrap() error {
	if e.sentinel == nil {
		return ErrInvalidSpec
	}
	return e.sentinel
}

func specErr(field, reason string) *Error {
	return &Error{Field: field, Reason: reason, sentinel: ErrInvalidSpec}
}

func configErr(field, reason string) *Error {
	return &Error{Field: field, Reason: reason, sentinel: ErrInvalidConfig}
}
