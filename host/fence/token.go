package fence

import (
	"encoding/binary"
	"errors"
	"strconv"
)

// MaxCounter is the largest fencing counter a Token may carry: 2^53−1, the
// largest integer that survives a JSON number, a Lua double and a signed
// 64-bit SQL column unchanged. The Redis side fails a fenced acquire closed
// (FENCE_EXHAUSTED) before its counter passes this bound.
const MaxCounter int64 = 1<<53 - 1

// Token is a fencing token: the resource epoch of the registration that
// issued it and the counter value the fenced acquire incremented to. Within
// one epoch a later holder always gets a strictly larger counter; tokens of
// different epochs are ordered by epoch first.
//
// A valid token has Epoch ≥ 1 and 1 ≤ Counter ≤ MaxCounter. The zero Token
// is invalid and means "no token".
type Token struct {
	// Epoch identifies the durable registration (see Registration). It is
	// never 0: every fenced resource has an epoch.
	Epoch uint64
	// Counter is the value of the resource's no-TTL fencing counter.
	Counter int64
}

// binaryLen is the length of Token's binary form: epoch then counter, each
// 8 bytes big-endian.
const binaryLen = 16

// ErrSyntax reports text or binary input that is not a token's canonical
// form. Parse errors wrap it or ErrRange.
var ErrSyntax = errors.New("fence: malformed token")

// ErrRange reports a well-formed token whose epoch is 0 or whose counter is
// outside 1..MaxCounter.
var ErrRange = errors.New("fence: token out of range")

// ParseError is returned by ParseToken and the Unmarshal methods. Err is
// ErrSyntax or ErrRange, so errors.Is works on the result.
type ParseError struct {
	// Input is the rejected input, cut to at most 48 bytes.
	Input string
	// Err is ErrSyntax or ErrRange.
	Err error
}

// Error implements error.
func (e *ParseError) Error() string {
	return e.Err.Error() + ": " + strconv.Quote(e.Input)
}

// Unwrap returns ErrSyntax or ErrRange.
func (e *ParseError) Unwrap() error { return e.Err }

func parseErr(input []byte, err error) error {
	const maxShown = 48
	if len(input) > maxShown {
		input = input[:maxShown]
	}
	return &ParseError{Input: string(input), Err: err}
}

// NewToken returns Token{epoch, counter} after checking its range; the error
// wraps ErrRange.
func NewToken(epoch uint64, counter int64) (Token, error) {
	t := Token{Epoch: epoch, Counter: counter}
	if err := t.Validate(); err != nil {
		return Token{}, err
	}
	return t, nil
}

// Validate reports whether t is in range: Epoch ≥ 1 and
// 1 ≤ Counter ≤ MaxCounter. The error wraps ErrRange.
func (t Token) Validate() error {
	if t.Epoch == 0 || t.Counter < 1 || t.Counter > MaxCounter {
		return parseErr(t.appendDigits(nil), ErrRange)
	}
	return nil
}

// IsZero reports whether t is the zero Token ("no token").
func (t Token) IsZero() bool { return t == Token{} }

// Compare orders tokens by epoch, then counter: -1 if t < u, 0 if equal,
// +1 if t > u.
func (t Token) Compare(u Token) int {
	switch {
	case t.Epoch < u.Epoch:
		return -1
	case t.Epoch > u.Epoch:
		return 1
	case t.Counter < u.Counter:
		return -1
	case t.Counter > u.Counter:
		return 1
	}
	return 0
}

// String returns the canonical text form "epoch.counter" in decimal, for
// example "7.42". An out-of-range token prints the same way but does not
// parse back.
func (t Token) String() string { return string(t.appendDigits(nil)) }

func (t Token) appendDigits(b []byte) []byte {
	b = strconv.AppendUint(b, t.Epoch, 10)
	b = append(b, '.')
	return strconv.AppendInt(b, t.Counter, 10)
}

// AppendText appends the canonical text form to b (encoding.TextAppender).
// It fails with ErrRange for an invalid token.
func (t Token) AppendText(b []byte) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return b, err
	}
	return t.appendDigits(b), nil
}

// MarshalText returns the canonical text form. Through it a Token encodes
// as a JSON string, "7.42", never as a number: counters up to MaxCounter are
// exact either way, but epochs need all 64 bits.
func (t Token) MarshalText() ([]byte, error) { return t.AppendText(nil) }

// UnmarshalText parses the canonical text form strictly (see ParseToken).
// On error t is left unchanged.
func (t *Token) UnmarshalText(text []byte) error {
	v, err := parseToken(text)
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// AppendBinary appends the 16-byte binary form to b
// (encoding.BinaryAppender): the epoch then the counter, each as an
// unsigned 64-bit big-endian integer, so bytewise order is token order.
func (t Token) AppendBinary(b []byte) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return b, err
	}
	b = binary.BigEndian.AppendUint64(b, t.Epoch)
	return binary.BigEndian.AppendUint64(b, uint64(t.Counter)), nil
}

// MarshalBinary returns the 16-byte binary form (see AppendBinary).
func (t Token) MarshalBinary() ([]byte, error) { return t.AppendBinary(make([]byte, 0, binaryLen)) }

// UnmarshalBinary decodes exactly 16 bytes (ErrSyntax otherwise) and checks
// the range (ErrRange). On error t is left unchanged.
func (t *Token) UnmarshalBinary(data []byte) error {
	if len(data) != binaryLen {
		return parseErr(data, ErrSyntax)
	}
	c := binary.BigEndian.Uint64(data[8:])
	v := Token{Epoch: binary.BigEndian.Uint64(data[:8])}
	if c > uint64(MaxCounter) {
		return parseErr(data, ErrRange)
	}
	v.Counter = int64(c)
	if err := v.Validate(); err != nil {
		return err
	}
	*t = v
	return nil
}

// ParseToken parses the canonical text form "epoch.counter": two runs of
// ASCII decimal digits joined by one dot, with no sign, no leading zero, no
// space and nothing else. Input that is not of that shape fails with
// ErrSyntax; a well-formed token with epoch 0, counter 0 or a value past
// its bound (epoch > 2^64−1, counter > MaxCounter) fails with ErrRange.
// Every valid token has exactly one text form: ParseToken(t.String()) == t.
func ParseToken(s string) (Token, error) { return parseToken([]byte(s)) }

func parseToken(s []byte) (Token, error) {
	dot := -1
	for i, c := range s {
		switch {
		case c == '.' && dot < 0:
			dot = i
		case c < '0' || c > '9':
			return Token{}, parseErr(s, ErrSyntax)
		}
	}
	if dot <= 0 || dot == len(s)-1 {
		return Token{}, parseErr(s, ErrSyntax)
	}
	ep, cp := s[:dot], s[dot+1:]
	// A leading zero is allowed only as the whole number "0", which is
	// well-formed but out of range.
	if (len(ep) > 1 && ep[0] == '0') || (len(cp) > 1 && cp[0] == '0') {
		return Token{}, parseErr(s, ErrSyntax)
	}
	epoch, ok := digits(ep, ^uint64(0))
	if !ok {
		return Token{}, parseErr(s, ErrRange)
	}
	counter, ok := digits(cp, uint64(MaxCounter))
	if !ok {
		return Token{}, parseErr(s, ErrRange)
	}
	t := Token{Epoch: epoch, Counter: int64(counter)}
	if t.Epoch == 0 || t.Counter == 0 {
		return Token{}, parseErr(s, ErrRange)
	}
	return t, nil
}

// digits converts a run of ASCII digits, reporting false past limit.
func digits(d []byte, limit uint64) (uint64, bool) {
	var v uint64
	for _, c := range d {
		n := uint64(c - '0')
		if v > (limit-n)/10 {
			return 0, false
		}
		v = v*10 + n
	}
	return v, true
}
