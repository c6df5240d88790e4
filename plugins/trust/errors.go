package trust

import "errors"

// Sentinels for errors.Is. Every error returned by this package wraps
// exactly one of them (errors from the operating system are wrapped as well
// when a file cannot be read).
var (
	// ErrDigestMismatch: the module's sha256 differs from the pin, or the
	// signature file names a different digest than the module has.
	ErrDigestMismatch = errors.New("module digest mismatch")
	// ErrUnsigned: a signature is required but none was given.
	ErrUnsigned = errors.New("module is not signed")
	// ErrUnknownKey: the signature names a key that is not trusted.
	ErrUnknownKey = errors.New("signature key is not trusted")
	// ErrBadSignature: the signature does not verify under the named key.
	ErrBadSignature = errors.New("signature does not verify")
	// ErrMalformedSignature: the signature file is not a valid v1 document.
	ErrMalformedSignature = errors.New("malformed signature file")
	// ErrMalformedKey: a key file is not a single PEM ed25519 key of the
	// expected kind, or two trusted keys have the same id.
	ErrMalformedKey = errors.New("malformed key")
	// ErrKeyPermissions: a private key file is readable by group or others.
	ErrKeyPermissions = errors.New("private key file permissions too open")
	// ErrMalformedPin: a sha256 pin is not 64 lower-case hex digits.
	ErrMalformedPin = errors.New("malformed sha256 pin")
	// ErrTooLarge: a file exceeds its size bound.
	ErrTooLarge = errors.New("file too large")
)

// Error is the typed error of this package. Kind is one of the sentinels
// above; errors.Is(err, Kind) holds. Detail never contains key material.
type Error struct {
	Kind   error
	Detail string
	// Err is an underlying cause (for example an *fs.PathError), or nil.
	Err error
}

// Error renders "trust: <kind>: <detail>[: <cause>]".
func (e *Error) Error() string {
	s := "trust: " + e.Kind.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap exposes both the sentinel and the cause to errors.Is/As.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

func newErr(kind error, detail string) error { return &Error{Kind: kind, Detail: detail} }
