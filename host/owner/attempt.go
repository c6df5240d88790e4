package owner

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxOperationIDBytes bounds an operation id.
const MaxOperationIDBytes = 128

// ErrInvalidAttempt: an operation id out of bounds, or a zero token.
var ErrInvalidAttempt = errors.New("owner: invalid attempt")

// Attempt is one attempt at something an owner token guards — acquiring a
// lease, claiming an idempotency record: a fresh token and the caller's
// operation id, minted before the first send and kept until the work is
// done, because repeating or inspecting after a lost reply needs the same
// attempt (a new token would contend with itself).
type Attempt struct {
	token Token
	op    string
}

// NewAttempt mints a fresh token for operationID (1..128 bytes of UTF-8).
// It touches no network.
func NewAttempt(operationID string) (Attempt, error) {
	if len(operationID) == 0 || len(operationID) > MaxOperationIDBytes || !utf8.ValidString(operationID) {
		return Attempt{}, fmt.Errorf("%w: operation id must be 1..%d bytes of UTF-8", ErrInvalidAttempt, MaxOperationIDBytes)
	}
	return Attempt{token: New(), op: operationID}, nil
}

// ResumeAttempt rebuilds an attempt from its parts (a holder in another
// process, or one restarted with the token it stored).
func ResumeAttempt(token Token, operationID string) (Attempt, error) {
	a, err := NewAttempt(operationID)
	if err != nil {
		return Attempt{}, err
	}
	if token.IsZero() {
		return Attempt{}, fmt.Errorf("%w: zero owner token", ErrInvalidAttempt)
	}
	a.token = token
	return a, nil
}

// Owner returns the attempt's token (redacted when printed).
func (a Attempt) Owner() Token { return a.token }

// OperationID returns the attempt's operation id.
func (a Attempt) OperationID() string { return a.op }

// IsZero reports whether a is the zero Attempt.
func (a Attempt) IsZero() bool { return a.token.IsZero() }
