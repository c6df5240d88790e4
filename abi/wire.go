package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Bounds of the binary encoding. They are part of the ABI: a decoder rejects
// anything larger, whoever produced it.
const (
	// MaxMessageBytes bounds one request or response frame.
	MaxMessageBytes = 1 << 20
	// MaxListItems bounds any repeated field.
	MaxListItems = 64
	// MaxNameBytes bounds identifiers, attribute names and short strings.
	MaxNameBytes = 128
	// MaxValueBytes bounds attribute values and key parts.
	MaxValueBytes = 1024
)

// ErrMalformed is matched (errors.Is) by every decoding error.
var ErrMalformed = errors.New("abi: malformed message")

// DecodeError describes where a message violates the encoding.
type DecodeError struct {
	Field  string
	Offset int
	Reason string
}

// Error implements error.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("abi: malformed message: field %s at byte %d: %s", e.Field, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrMalformed) true.
func (e *DecodeError) Is(target error) bool { return target == ErrMalformed }

func malformed(field string, off int, reason string) error {
	return &DecodeError{Field: field, Offset: off, Reason: reason}
}

// AppendUvarint appends v as an unsigned LEB128 varint.
func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// AppendVarint appends v zig-zag encoded.
func AppendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

// AppendBool appends 0 or 1.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// AppendBytes appends a varint length followed by p.
func AppendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// AppendString appends a varint length followed by s.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decoder reads the binary encoding with a sticky error: after the first
// violation every read returns a zero value and Finish reports the violation.
// It never allocates except for the strings and byte slices it returns.
type Decoder struct {
	b   []byte
	off int
	err error
}

// NewDecoder decodes b. Inputs longer than MaxMessageBytes fail at Finish.
func NewDecoder(b []byte) *Decoder {
	d := &Decoder{b: b}
	if len(b) > MaxMessageBytes {
		d.err = malformed("message", 0, "message exceeds MaxMessageBytes")
	}
	return d
}

// Reset reuses d for b.
func (d *Decoder) Reset(b []byte) {
	*d = Decoder{b: b}
	if len(b) > MaxMessageBytes {
		d.err = malformed("message", 0, "message exceeds MaxMessageBytes")
	}
}

func (d *Decoder) fail(field, reason string) {
	if d.err == nil {
		d.err = malformed(field, d.off, reason)
	}
}

// Err returns the first violation, if any.
func (d *Decoder) Err() error { return d.err }

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(field, "bad varint")
		return 0
	}
	// Reject non-minimal encodings so every value has exactly one encoding.
	if n > 1 && d.b[d.off+n-1] == 0 {
		d.fail(field, "non-minimal varint")
		return 0
	}
	d.off += n
	return v
}

// Uint32 reads a varint that must fit in 32 bits.
func (d *Decoder) Uint32(field string) uint32 {
	v := d.Uvarint(field)
	if v > 1<<32-1 {
		d.fail(field, "value exceeds uint32")
		return 0
	}
	return uint32(v)
}

// Varint reads a zig-zag varint.
func (d *Decoder) Varint(field string) int64 {
	u := d.Uvarint(field)
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

// Bool reads a byte that must be 0 or 1.
func (d *Decoder) Bool(field string) bool {
	if d.err != nil {
		return false
	}
	if d.off >= len(d.b) {
		d.fail(field, "truncated")
		return false
	}
	c := d.b[d.off]
	if c > 1 {
		d.fail(field, "bool is not 0 or 1")
		return false
	}
	d.off++
	return c == 1
}

func (d *Decoder) view(field string, max int) []byte {
	n := d.Uvarint(field)
	if d.err != nil {
		return nil
	}
	if n > uint64(max) {
		d.fail(field, fmt.Sprintf("length %d exceeds bound %d", n, max))
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail(field, "truncated")
		return nil
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return p
}

// Bytes reads a length-prefixed byte string of at most max bytes into a fresh slice.
func (d *Decoder) Bytes(field string, max int) []byte {
	p := d.view(field, max)
	if p == nil {
		return nil
	}
	return append([]byte(nil), p...)
}

// String reads a length-prefixed UTF-8 string of at most max bytes.
func (d *Decoder) String(field string, max int) string {
	p := d.view(field, max)
	if len(p) == 0 {
		return ""
	}
	if !utf8.Valid(p) {
		d.fail(field, "not UTF-8")
		return ""
	}
	return string(p)
}

// Count reads a list length of at most max items.
func (d *Decoder) Count(field string, max int) int {
	n := d.Uvarint(field)
	if d.err != nil {
		return 0
	}
	if n > uint64(max) {
		d.fail(field, fmt.Sprintf("%d items exceed bound %d", n, max))
		return 0
	}
	// Every item takes at least one byte, so a count beyond the remaining
	// input is a lie; refusing it early bounds the allocation it would cause.
	if n > uint64(len(d.b)-d.off) {
		d.fail(field, "count exceeds remaining input")
		return 0
	}
	return int(n)
}

// Tag reads the leading message tag and checks it.
func (d *Decoder) Tag(want MsgTag) {
	if d.err != nil {
		return
	}
	if d.off >= len(d.b) {
		d.fail("tag", "truncated")
		return
	}
	if MsgTag(d.b[d.off]) != want {
		d.fail("tag", fmt.Sprintf("message tag %d, want %d", d.b[d.off], want))
		return
	}
	d.off++
}

// Finish returns the first violation, or an error if bytes remain unread.
func (d *Decoder) Finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("message", "trailing bytes")
	}
	return d.err
}
