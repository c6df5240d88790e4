package hint

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"log/slog"
	"math"
	"sync"
	"time"
)

// Wire constants (see the package documentation for the layout).
const (
	// Version is the layout this package writes and reads.
	Version = 1
	// MinSecretBytes and MaxSecretBytes bound NewCodec's secret.
	MinSecretBytes = 32
	MaxSecretBytes = 1024
	// MinWindow and MaxWindow bound NewCodec's freshness window.
	MinWindow = time.Second
	MaxWindow = 10 * time.Minute
	// MaxRegionBytes bounds Message.Region.
	MaxRegionBytes = 64
	// LocationBytes is the size of Message.Location.
	LocationBytes = 32
	// MaxScopeBytes bounds Message.Scope (at least one byte).
	MaxScopeBytes = 128
	// TagBytes is the size of the tag: the full HMAC-SHA-256.
	TagBytes = sha256.Size

	headerBytes = len(magic) + 1 + 1 + 16 + 8 + 1 // magic, version, kind, sender, issued-at, region length
	// MinBytes is the size of the smallest hint: a RegionInvalidated hint
	// with a one-byte region.
	MinBytes = headerBytes + 1 + TagBytes
	// MaxBytes is the size of the largest hint: a KeyInvalidated hint with
	// the longest region and scope. Seal never writes more; Open refuses
	// more before it reads anything else. A subscriber can use it as its
	// message size limit.
	MaxBytes = headerBytes + MaxRegionBytes + LocationBytes + 1 + MaxScopeBytes + TagBytes
)

// magic opens every hint. 0xC5 followed by 'H' is never valid UTF-8, so no
// text message on the channel is mistaken for a hint.
const magic = "\xc5HNT"

// keyLabel derives the hint MAC key from the configured secret.
const keyLabel = "caphost/cache/hint/v1 mac key"

// Kind is what a hint invalidates. The set is closed; the zero value is
// invalid.
type Kind uint8

const (
	_ Kind = iota
	// KeyInvalidated: one entry changed or was invalidated; receivers drop
	// that entry from their L1. Location and Scope name it.
	KeyInvalidated
	// RegionInvalidated: the whole region was invalidated (its generation
	// bumped); receivers flush the region's L1. It carries no Location and
	// no Scope.
	RegionInvalidated
)

// Valid reports whether k is one of the closed set.
func (k Kind) Valid() bool { return k == KeyInvalidated || k == RegionInvalidated }

// String returns the canonical upper-case name.
func (k Kind) String() string {
	switch k {
	case KeyInvalidated:
		return "KEY_INVALIDATED"
	case RegionInvalidated:
		return "REGION_INVALIDATED"
	}
	return "INVALID_KIND"
}

// Message is one invalidation hint.
type Message struct {
	Kind Kind
	// Region is the region id: [a-z0-9][a-z0-9._-]*, at most
	// MaxRegionBytes bytes.
	Region string
	// Sender identifies the host instance that sent the hint (random per
	// instance, never zero), so an instance can ignore its own hints.
	Sender [16]byte
	// IssuedAt is when the hint was sent, by the sender's clock; the wire
	// carries whole milliseconds since 1970 (Seal truncates; Open returns
	// UTC).
	IssuedAt time.Time

	// Location is the invalidated entry's location digest, opaque bytes
	// from the key builder; KeyInvalidated only (never all zero).
	Location [LocationBytes]byte
	// Scope is the region generation the key was invalidated in, 1 to
	// MaxScopeBytes bytes; KeyInvalidated only.
	Scope []byte
}

// Codec seals and opens hints under one secret. It keeps only a key
// derived from the secret, never the secret itself, and prints as
// hint.Codec(...) with the key redacted in every fmt verb and in slog. A
// Codec is safe for concurrent use.
type Codec struct {
	key    [sha256.Size]byte
	window time.Duration
	clock  func() time.Time
	macs   sync.Pool // of *macState: saves the HMAC set-up per hint
}

// macState is an HMAC keyed with the Codec's key and room for one tag, so
// that computing a tag does not allocate.
type macState struct {
	h   hash.Hash
	sum [TagBytes]byte
}

// NewCodec returns a Codec for secret (MinSecretBytes..MaxSecretBytes
// bytes, copied into a derived key), accepting hints issued at most window
// (MinWindow..MaxWindow) before or after clock's now. Every host of a
// deployment needs the same secret; the window must cover their clock skew
// plus the Pub/Sub delivery delay.
func NewCodec(secret []byte, window time.Duration, clock func() time.Time) (*Codec, error) {
	switch {
	case len(secret) < MinSecretBytes || len(secret) > MaxSecretBytes:
		return nil, fail(ErrInvalid, "the secret must be 32..1024 bytes")
	case window < MinWindow || window > MaxWindow:
		return nil, fail(ErrInvalid, "the window must be within 1s..10m")
	case clock == nil:
		return nil, fail(ErrInvalid, "no clock")
	}
	c := &Codec{window: window, clock: clock}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(keyLabel))
	m.Sum(c.key[:0])
	c.macs.New = func() any { return &macState{h: hmac.New(sha256.New, c.key[:])} }
	return c, nil
}

// Window returns the freshness window.
func (c *Codec) Window() time.Duration { return c.window }

// appendTag appends the tag of b to b.
func (c *Codec) appendTag(b []byte) []byte {
	m := c.macs.Get().(*macState)
	m.h.Reset()
	m.h.Write(b)
	b = m.h.Sum(b)
	c.macs.Put(m)
	return b
}

// verify reports, in constant time, whether tag is the tag of frame.
func (c *Codec) verify(frame, tag []byte) bool {
	m := c.macs.Get().(*macState)
	m.h.Reset()
	m.h.Write(frame)
	ok := hmac.Equal(m.h.Sum(m.sum[:0]), tag)
	c.macs.Put(m)
	return ok
}

// Seal validates m and returns its authenticated bytes, at most MaxBytes.
// IssuedAt is truncated to the millisecond. A Message that cannot be sent
// is an *Error of category ErrInvalid.
func (c *Codec) Seal(m Message) ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	n := headerBytes + len(m.Region) + TagBytes
	if m.Kind == KeyInvalidated {
		n += LocationBytes + 1 + len(m.Scope)
	}
	b := make([]byte, 0, n)
	b = append(b, magic...)
	b = append(b, Version, byte(m.Kind))
	b = append(b, m.Sender[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(m.IssuedAt.UnixMilli()))
	b = append(b, byte(len(m.Region)))
	b = append(b, m.Region...)
	if m.Kind == KeyInvalidated {
		b = append(b, m.Location[:]...)
		b = append(b, byte(len(m.Scope)))
		b = append(b, m.Scope...)
	}
	return c.appendTag(b), nil
}

// validate reports why m cannot be sealed.
func (m Message) validate() error {
	switch {
	case !m.Kind.Valid():
		return fail(ErrInvalid, "unknown kind")
	case !slug(m.Region):
		return fail(ErrInvalid, "region is not a slug of at most 64 bytes")
	case m.Sender == [16]byte{}:
		return fail(ErrInvalid, "zero sender")
	case m.IssuedAt.Before(time.Unix(0, 0)):
		return fail(ErrInvalid, "issued before 1970")
	}
	if m.Kind == RegionInvalidated {
		if m.Location != [LocationBytes]byte{} || len(m.Scope) != 0 {
			return fail(ErrInvalid, "a region hint carries no location or scope")
		}
		return nil
	}
	switch {
	case m.Location == [LocationBytes]byte{}:
		return fail(ErrInvalid, "zero location")
	case len(m.Scope) < 1 || len(m.Scope) > MaxScopeBytes:
		return fail(ErrInvalid, "scope must be 1..128 bytes")
	}
	return nil
}

// Open authenticates and decodes one hint and checks its freshness against
// the Codec's clock. In order: the magic (ErrMalformed), the version
// (ErrUnknownVersion), the length bounds (ErrMalformed), the tag, compared
// in constant time before any other byte is interpreted (ErrForged), the
// strict layout (ErrMalformed), the window (ErrStale, ErrFuture). Open
// never panics, keeps no reference to b and allocates only the Region
// string and the Scope copy.
func (c *Codec) Open(b []byte) (Message, error) {
	switch {
	case len(b) < len(magic)+1 || string(b[:len(magic)]) != magic:
		return Message{}, fail(ErrMalformed, "no hint magic")
	case b[len(magic)] != Version:
		return Message{}, fail(ErrUnknownVersion, "unknown hint version")
	case len(b) < MinBytes || len(b) > MaxBytes:
		return Message{}, fail(ErrMalformed, "length out of bounds")
	}
	frame := b[:len(b)-TagBytes]
	if !c.verify(frame, b[len(frame):]) {
		return Message{}, fail(ErrForged, "tag mismatch")
	}
	m, err := decode(frame)
	if err != nil {
		return Message{}, err
	}
	now := c.clock()
	switch age := now.Sub(m.IssuedAt); {
	case age > c.window:
		return Message{}, fail(ErrStale, "issued before the window")
	case age < -c.window:
		return Message{}, fail(ErrFuture, "issued after the window")
	}
	return m, nil
}

// decode parses an authenticated frame (the hint without its tag).
func decode(f []byte) (Message, error) {
	var m Message
	p := len(magic) + 1
	m.Kind = Kind(f[p])
	p++
	if !m.Kind.Valid() {
		return Message{}, fail(ErrMalformed, "unknown kind")
	}
	copy(m.Sender[:], f[p:p+16])
	p += 16
	if m.Sender == [16]byte{} {
		return Message{}, fail(ErrMalformed, "zero sender")
	}
	ms := binary.BigEndian.Uint64(f[p:])
	p += 8
	if ms > math.MaxInt64 {
		return Message{}, fail(ErrMalformed, "issued-at out of range")
	}
	m.IssuedAt = time.UnixMilli(int64(ms)).UTC()
	n := int(f[p])
	p++
	if n > len(f)-p || !slug(string(f[p:p+n])) {
		return Message{}, fail(ErrMalformed, "region is not a slug of at most 64 bytes")
	}
	m.Region = string(f[p : p+n])
	p += n
	rest := f[p:]
	if m.Kind == RegionInvalidated {
		if len(rest) != 0 {
			return Message{}, fail(ErrMalformed, "bytes after a region hint's region")
		}
		return m, nil
	}
	if len(rest) < LocationBytes+1 {
		return Message{}, fail(ErrMalformed, "truncated location or scope")
	}
	copy(m.Location[:], rest)
	if m.Location == [LocationBytes]byte{} {
		return Message{}, fail(ErrMalformed, "zero location")
	}
	n, rest = int(rest[LocationBytes]), rest[LocationBytes+1:]
	switch {
	case n < 1 || n > MaxScopeBytes:
		return Message{}, fail(ErrMalformed, "scope length out of bounds")
	case n != len(rest):
		return Message{}, fail(ErrMalformed, "scope length does not match")
	}
	m.Scope = append([]byte(nil), rest...)
	return m, nil
}

// slug reports whether s is [a-z0-9][a-z0-9._-]* of at most
// MaxRegionBytes bytes.
func slug(s string) bool {
	if s == "" || len(s) > MaxRegionBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// String describes the Codec without its key.
func (c *Codec) String() string {
	if c == nil {
		return "hint.Codec(nil)"
	}
	return fmt.Sprintf("hint.Codec(v%d hmac-sha256 window=%s key=***)", Version, c.window)
}

// GoString implements fmt.GoStringer (%#v) without the key.
func (c *Codec) GoString() string { return c.String() }

// Format implements fmt.Formatter so every verb (%v %+v %x %q ...) prints
// only String: the default struct printer would otherwise walk the key.
func (c *Codec) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(c.String())) }

// LogValue implements slog.LogValuer without the key.
func (c *Codec) LogValue() slog.Value {
	if c == nil {
		return slog.StringValue("hint.Codec(nil)")
	}
	return slog.GroupValue(slog.Int("version", Version), slog.Duration("window", c.window), slog.String("key", "***"))
}
