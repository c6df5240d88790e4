// Package owner is the owner token: the secret that proves who holds a
// concurrency permit, a lease or an idempotency claim. Whoever has the
// token can renew and release what it names; nobody else can. The host
// mints tokens from crypto/rand before the first send, so a retry after a
// lost reply repeats the same attempt instead of contending with itself.
//
// Redaction is by type: every formatting path (fmt verbs, slog,
// encoding/json) prints a Token as "***"; only Reveal returns it, for
// handing it to its holder on purpose. A token never reaches a log, a
// metric, an error or a key.
//
// What may change here: nothing about the wire form (32 lower-case hex
// digits, 128 random bits) without a new parser that still accepts it —
// tokens outlive a deploy in the hands of clients.
package owner

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
)

// Bytes is the token's entropy in bytes (its text form is twice as long).
const Bytes = 16

// ErrMalformed: Parse was given something that is not a token the host
// mints.
var ErrMalformed = errors.New("owner: malformed owner token")

// Token is an owner token. The zero Token is "no owner". Tokens compare
// by Equal, not ==.
//
// The secret sits behind a pointer so that reflection-based printing of
// a struct that holds a Token in an unexported field (fmt cannot call the
// redacting methods there) prints an address, never the token.
type Token struct{ p *secret }

type secret struct{ v string }

// New mints 128 random bits, lower-case hex.
func New() Token {
	var b [Bytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return Token{p: &secret{v: hex.EncodeToString(b[:])}}
}

// Parse accepts exactly the form New mints (32 lower-case hex digits), so a
// client cannot choose a weak or oversized token.
func Parse(s string) (Token, error) {
	if len(s) != 2*Bytes {
		return Token{}, ErrMalformed
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return Token{}, ErrMalformed
		}
	}
	return Token{p: &secret{v: s}}, nil
}

// Reveal returns the token itself: give it to its holder, never to a log.
func (t Token) Reveal() string {
	if t.p == nil {
		return ""
	}
	return t.p.v
}

// IsZero reports whether t is the zero token.
func (t Token) IsZero() bool { return t.p == nil || t.p.v == "" }

// Equal reports whether t and u are the same token (in constant time).
func (t Token) Equal(u Token) bool {
	return subtle.ConstantTimeCompare([]byte(t.Reveal()), []byte(u.Reveal())) == 1
}

// String redacts the token.
func (Token) String() string { return "owner.Token(***)" }

// GoString redacts the token (%#v).
func (t Token) GoString() string { return t.String() }

// Format redacts the token for every fmt verb.
func (t Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }

// LogValue redacts the token in slog.
func (Token) LogValue() slog.Value { return slog.StringValue("***") }

// MarshalJSON redacts the token: a struct that embeds it by accident
// cannot leak it. Use Reveal to send it on purpose.
func (Token) MarshalJSON() ([]byte, error) { return []byte(`"***"`), nil }
