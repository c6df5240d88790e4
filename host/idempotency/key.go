package idempotency

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/dunglas/httpsfv"
)

// HeaderKey is the request header carrying the idempotency key.
const HeaderKey = "Idempotency-Key"

// MaxKeyBytes bounds an idempotency key (the draft recommends UUIDs; any
// sf-string up to this length is accepted).
const MaxKeyBytes = 255

// Key errors: ErrMissingKey when no Idempotency-Key field is present,
// ErrMalformedKey for anything that is not exactly one Structured Field
// Item whose bare value is a string of 1..MaxKeyBytes.
var (
	ErrMissingKey   = errors.New("idempotency: Idempotency-Key missing")
	ErrMalformedKey = errors.New("idempotency: Idempotency-Key malformed")
)

// ParseKey reads the Idempotency-Key of h: exactly one field line holding
// a Structured Field Item (RFC 9651) whose bare value is a String. Item
// parameters are ignored, as RFC 9651 requires of unknown parameters; a
// token, an integer, a list or a second field line is malformed.
func ParseKey(h http.Header) (string, error) {
	vals := h.Values(HeaderKey)
	switch len(vals) {
	case 0:
		return "", ErrMissingKey
	case 1:
	default:
		return "", fmt.Errorf("%w: more than one field line", ErrMalformedKey)
	}
	if len(vals[0]) > 2*MaxKeyBytes+64 {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrMalformedKey, MaxKeyBytes)
	}
	item, err := httpsfv.UnmarshalItem(vals)
	if err != nil {
		return "", fmt.Errorf("%w: not a Structured Field Item", ErrMalformedKey)
	}
	s, ok := item.Value.(string)
	switch {
	case !ok:
		return "", fmt.Errorf("%w: the value must be a quoted string", ErrMalformedKey)
	case len(s) == 0 || len(s) > MaxKeyBytes:
		return "", fmt.Errorf("%w: the key must be 1..%d bytes", ErrMalformedKey, MaxKeyBytes)
	}
	return s, nil
}
