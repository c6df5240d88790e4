// Package transport owns caphost's notification transports: the
// submission-certainty vocabulary (Outcome, Receipt), the Transport
// interface the dispatcher calls, the host side of the out-of-process
// transports that run as hashicorp go-plugin processes over gRPC (each
// in user and mount namespaces of its own, on Linux), the sandbox those
// processes apply to themselves (Sandbox), and the connect
// broker through which the host dials a plugin's declared targets for it
// (Sandbox.Dial, and the Env a transport's Factory gets).
//
// A transport never returns an error from Deliver: every failure is a
// Receipt whose Outcome states what is known about the send. Only
// RejectedDefinite may be retried or sent to a fallback; Indeterminate means
// the message may have left and must not be sent again blindly.
package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode"
	"unicode/utf8"
)

// Outcome is the submission certainty of one transport call; a closed set.
type Outcome uint8

const (
	Accepted         Outcome = 1 + iota // the provider took the message
	RejectedDefinite                    // provably not sent, or refused: safe to retry or to send to a fallback
	Indeterminate                       // the send may have happened: never retried blindly, never sent to a fallback
)

// String returns the wire name of o: "ACCEPTED", "REJECTED_DEFINITE" or
// "INDETERMINATE"; an out-of-set value prints as "OUTCOME(n)".
func (o Outcome) String() string {
	switch o {
	case Accepted:
		return "ACCEPTED"
	case RejectedDefinite:
		return "REJECTED_DEFINITE"
	case Indeterminate:
		return "INDETERMINATE"
	}
	return fmt.Sprintf("OUTCOME(%d)", uint8(o))
}

// Valid reports whether o is one of the three defined outcomes.
func (o Outcome) Valid() bool { return o >= Accepted && o <= Indeterminate }

// MaxRecipientBytes bounds a recipient address.
const MaxRecipientBytes = 512

// ErrInvalidRecipient is returned (wrapped) by NewRecipient; the error text
// never contains the address.
var ErrInvalidRecipient = errors.New("transport: invalid recipient")

// Recipient is an address; it prints and logs as "***" (redaction by type)
// so an address cannot reach a log line, metric label or error by accident.
type Recipient struct{ v string }

// NewRecipient validates s: non-empty, at most MaxRecipientBytes bytes, valid
// UTF-8 and free of control characters.
func NewRecipient(s string) (Recipient, error) {
	switch {
	case s == "":
		return Recipient{}, fmt.Errorf("%w: empty", ErrInvalidRecipient)
	case len(s) > MaxRecipientBytes:
		return Recipient{}, fmt.Errorf("%w: %d bytes exceeds %d", ErrInvalidRecipient, len(s), MaxRecipientBytes)
	case !utf8.ValidString(s):
		return Recipient{}, fmt.Errorf("%w: not valid UTF-8", ErrInvalidRecipient)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return Recipient{}, fmt.Errorf("%w: control character", ErrInvalidRecipient)
		}
	}
	return Recipient{v: s}, nil
}

// Value returns the address itself; callers hand it only to a transport.
func (r Recipient) Value() string { return r.v }

// String never returns the address.
func (r Recipient) String() string { return "***" }

// GoString keeps %#v from printing the address.
func (r Recipient) GoString() string { return "transport.Recipient{***}" }

// LogValue never returns the address.
func (r Recipient) LogValue() slog.Value { return slog.StringValue("***") }

// IsZero reports whether r was never set by NewRecipient.
func (r Recipient) IsZero() bool { return r.v == "" }

// Part is one rendered part of a message (for example a subject, a text
// body or an HTML body).
type Part struct {
	Name, ContentType string
	Body              []byte
}

// Message is one delivery attempt of one intent.
type Message struct {
	IntentID  string // stable across attempts: transports pass it to the receiver as its dedup key
	Attempt   uint32 // 1-based
	Channel   string // "email", "text", "slack", "csv"
	Recipient Recipient
	Parts     []Part
}

// Receipt is what one Deliver call knows about the send.
type Receipt struct {
	Outcome     Outcome
	Code        string        // bounded machine code ([a-z0-9.-], ≤ 64 bytes), e.g. "http-503", "smtp-550", "timeout-after-send"; never content or addresses
	ProviderRef string        // provider's id of an accepted message, ≤ 256 bytes
	RetryAfter  time.Duration // provider's hint with RejectedDefinite; 0 if none
}

// Transport delivers one message attempt. Deliver never returns an error:
// every failure is a Receipt whose Outcome states what is known.
type Transport interface {
	Name() string
	Deliver(ctx context.Context, m Message) Receipt
	Close() error
}
