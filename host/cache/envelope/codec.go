package envelope

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"sync"
	"time"
)

var magic = [4]byte{0xC5, 'C', 'A', 'P'}

const (
	flagNegative   = 1 << 0
	flagCompressed = 1 << 1
	flagRevision   = 1 << 2
	flagSoft       = 1 << 3
	flagsV1        = flagNegative | flagCompressed
	flagsV2        = flagsV1 | flagRevision | flagSoft

	digestSize = 16
	// maxMillis keeps every time exact as a Lua (double) number.
	maxMillis = 1<<53 - 1
	// minHeaderV2 is the smallest v2 envelope: a one-byte codec id, no
	// optional field, an empty payload.
	minHeaderV2 = 4 + 1 + 1 + 1 + 4 + 1 + 8 + 8 + 4 + digestSize

	compressionLevel = 6
)

// headerSize is the size of everything before the payload.
func headerSize(version uint8, idLen int, flags byte) int {
	n := 4 + 1 + 1 + idLen + 4 + 1 + 8 + 8 + 4 + digestSize
	if version >= 2 && flags&flagRevision != 0 {
		n += 8
	}
	if version >= 2 && flags&flagSoft != 0 {
		n += 8
	}
	if flags&flagCompressed != 0 {
		n += 4
	}
	return n
}

func validCodecIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '/' || c == '@' || c == '+' || c == '-'
}

func validCodecID[T string | []byte](id T) bool {
	for i := 0; i < len(id); i++ {
		if !validCodecIDByte(id[i]) {
			return false
		}
	}
	return true
}

// millis converts an envelope time for the wire, reporting whether it is in
// range [0, 2^53).
func millis(t time.Time) (uint64, bool) {
	ms := t.UnixMilli()
	return uint64(ms), ms >= 0 && ms <= maxMillis
}

// withinRatio reports decoded ≤ stored × ratio without overflow.
func withinRatio(decoded, stored, ratio int) bool {
	return uint64(decoded) <= uint64(stored)*uint64(ratio)
}

// Encode writes e as a v2 envelope within lim. An oversized payload or
// envelope is a TooLarge *Error (REJECTED_TOO_LARGE); an envelope that
// cannot be written is Invalid.
func Encode(e Envelope, lim Limits) ([]byte, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	switch {
	case e.CodecID == "":
		return nil, fail(Invalid, "codec id empty")
	case len(e.CodecID) > lim.MaxCodecIDBytes:
		return nil, fail(TooLarge, "codec id exceeds max codec id bytes")
	case !validCodecID(e.CodecID):
		return nil, fail(Invalid, "codec id has a byte outside [A-Za-z0-9._:/@+-]")
	case e.Negative && (len(e.Payload) > 0 || e.Compressed):
		return nil, fail(Invalid, "negative entry with a payload or compression")
	case e.WrittenAt.IsZero() || e.HardExpiresAt.IsZero():
		return nil, fail(Invalid, "written-at or hard-expires-at missing")
	}
	written, ok1 := millis(e.WrittenAt)
	hard, ok2 := millis(e.HardExpiresAt)
	soft, ok3 := millis(e.SoftExpiresAt)
	hasSoft := !e.SoftExpiresAt.IsZero()
	switch {
	case !ok1 || !ok2 || hasSoft && !ok3:
		return nil, fail(Invalid, "time outside [1970, 2^53 ms)")
	case hard < written:
		return nil, fail(Invalid, "hard expiry before written-at")
	case hasSoft && (soft < written || soft > hard):
		return nil, fail(Invalid, "soft expiry outside [written-at, hard expiry]")
	case len(e.Payload) > lim.MaxPayloadBytes:
		return nil, fail(TooLarge, "payload exceeds max payload bytes")
	}

	var flags byte
	if e.Negative {
		flags |= flagNegative
	}
	if e.HasSourceRevision {
		flags |= flagRevision
	}
	if hasSoft {
		flags |= flagSoft
	}
	stored := e.Payload
	if e.Compressed && len(e.Payload) > 0 {
		c := compressorPool.Get().(*compressor)
		defer compressorPool.Put(c)
		z := c.deflate(e.Payload)
		if len(z) < len(e.Payload) && withinRatio(len(e.Payload), len(z), lim.MaxCompressionRatio) {
			stored = z
			flags |= flagCompressed
		}
	}
	size := headerSize(Version, len(e.CodecID), flags) + len(stored)
	if size > lim.MaxEncodedBytes {
		return nil, fail(TooLarge, "envelope exceeds max encoded bytes")
	}

	out := make([]byte, 0, size)
	out = append(out, magic[:]...)
	out = append(out, Version, byte(len(e.CodecID)))
	out = append(out, e.CodecID...)
	out = binary.BigEndian.AppendUint32(out, e.PayloadVersion)
	out = append(out, flags)
	if e.HasSourceRevision {
		out = binary.BigEndian.AppendUint64(out, e.SourceRevision)
	}
	out = binary.BigEndian.AppendUint64(out, written)
	if hasSoft {
		out = binary.BigEndian.AppendUint64(out, soft)
	}
	out = binary.BigEndian.AppendUint64(out, hard)
	out = binary.BigEndian.AppendUint32(out, uint32(len(stored)))
	if flags&flagCompressed != 0 {
		out = binary.BigEndian.AppendUint32(out, uint32(len(e.Payload)))
	}
	sum := digest(out, stored)
	out = append(out, sum[:digestSize]...)
	out = append(out, stored...)
	return out, nil
}

func digest(header, payload []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(header)
	h.Write(payload)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// reader reads big-endian fields, reporting truncation once.
type reader struct {
	b   []byte
	off int
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n > len(r.b)-r.off {
		r.bad = true
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8() byte {
	if s := r.take(1); s != nil {
		return s[0]
	}
	return 0
}

func (r *reader) u32() uint32 {
	if s := r.take(4); s != nil {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}

var errTruncated = fail(Corrupt, "truncated")

// Decode reads a v2 or v1 envelope within lim. It never reads or allocates
// past the limits: lengths are checked before anything is allocated, a
// compressed payload's declared size and ratio before anything is inflated.
// Failures are *Error values of category Corrupt, FutureVersion,
// RetiredVersion, UnknownEnvelope, TooLarge (an oversized stored value) or
// Invalid (bad lim).
func Decode(b []byte, lim Limits) (Envelope, error) {
	return decode(b, lim, nil)
}

// decode is Decode; with m, the digest of bytes m holds as verified is
// not recomputed, and bytes whose digest verifies are remembered in m.
func decode(b []byte, lim Limits, m *Memo) (Envelope, error) {
	if err := lim.Validate(); err != nil {
		return Envelope{}, err
	}
	if len(b) > lim.MaxEncodedBytes {
		return Envelope{}, fail(TooLarge, "stored value exceeds max encoded bytes")
	}
	if len(b) < len(magic) {
		if bytes.HasPrefix(magic[:], b) && len(b) > 0 {
			return Envelope{}, errTruncated
		}
		return Envelope{}, fail(UnknownEnvelope, "no envelope magic")
	}
	if [4]byte(b[:4]) != magic {
		return Envelope{}, fail(UnknownEnvelope, "no envelope magic")
	}
	r := reader{b: b, off: len(magic)}
	version := r.u8()
	switch {
	case r.bad:
		return Envelope{}, errTruncated
	case version > Version:
		return Envelope{}, fail(FutureVersion, "envelope version newer than this reader")
	case version < PreviousVersion:
		return Envelope{}, fail(RetiredVersion, "envelope version older than N-1")
	}
	idLen := int(r.u8())
	switch {
	case r.bad:
		return Envelope{}, errTruncated
	case idLen == 0:
		return Envelope{}, fail(Corrupt, "codec id empty")
	case idLen > lim.MaxCodecIDBytes:
		return Envelope{}, fail(TooLarge, "codec id exceeds max codec id bytes")
	}
	id := r.take(idLen)
	if !r.bad && !validCodecID(id) {
		return Envelope{}, fail(Corrupt, "codec id has a byte outside [A-Za-z0-9._:/@+-]")
	}
	payloadVersion := r.u32()
	flags := r.u8()
	if r.bad {
		return Envelope{}, errTruncated
	}
	allowed := byte(flagsV2)
	if version == PreviousVersion {
		allowed = flagsV1
	}
	switch {
	case flags&^allowed != 0:
		return Envelope{}, fail(Corrupt, "reserved flag bits set")
	case flags&flagNegative != 0 && flags&flagCompressed != 0:
		return Envelope{}, fail(Corrupt, "negative entry marked compressed")
	}
	var revision uint64
	if flags&flagRevision != 0 {
		revision = r.u64()
	}
	written := r.u64()
	var soft uint64
	if flags&flagSoft != 0 {
		soft = r.u64()
	}
	hard := r.u64()
	storedLen := uint64(r.u32())
	var decodedLen uint64
	if flags&flagCompressed != 0 {
		decodedLen = uint64(r.u32())
	}
	sum := r.take(digestSize)
	if r.bad {
		return Envelope{}, errTruncated
	}
	headerEnd := r.off - digestSize
	switch rest := uint64(len(b) - r.off); {
	case storedLen > rest:
		return Envelope{}, errTruncated
	case storedLen < rest:
		return Envelope{}, fail(Corrupt, "trailing bytes after the payload")
	}
	stored := b[r.off:len(b):len(b)]
	switch {
	case written > maxMillis || hard > maxMillis || soft > maxMillis:
		return Envelope{}, fail(Corrupt, "time past 2^53 ms")
	case hard < written:
		return Envelope{}, fail(Corrupt, "hard expiry before written-at")
	case flags&flagSoft != 0 && (soft < written || soft > hard):
		return Envelope{}, fail(Corrupt, "soft expiry outside [written-at, hard expiry]")
	case flags&flagNegative != 0 && storedLen != 0:
		return Envelope{}, fail(Corrupt, "negative entry with a payload")
	case flags&flagCompressed != 0 && (storedLen == 0 || decodedLen == 0):
		return Envelope{}, fail(Corrupt, "compressed entry with an empty payload")
	case flags&flagCompressed == 0 && storedLen > uint64(lim.MaxPayloadBytes):
		return Envelope{}, fail(TooLarge, "payload exceeds max payload bytes")
	case flags&flagCompressed != 0 && decodedLen > uint64(lim.MaxPayloadBytes):
		return Envelope{}, fail(TooLarge, "declared decoded size exceeds max payload bytes")
	case flags&flagCompressed != 0 && !withinRatio(int(decodedLen), int(storedLen), lim.MaxCompressionRatio):
		return Envelope{}, fail(TooLarge, "compression ratio exceeds the limit")
	}
	if h1, h2, known := m.lookup(b); !known {
		if want := digest(b[:headerEnd], stored); !bytes.Equal(want[:digestSize], sum) {
			return Envelope{}, fail(Corrupt, "digest mismatch")
		}
		m.remember(h1, h2)
	}
	e := Envelope{
		EnvelopeVersion:   version,
		CodecID:           m.codecID(id),
		PayloadVersion:    payloadVersion,
		Negative:          flags&flagNegative != 0,
		Compressed:        flags&flagCompressed != 0,
		HasSourceRevision: flags&flagRevision != 0,
		SourceRevision:    revision,
		WrittenAt:         time.UnixMilli(int64(written)).UTC(),
		HardExpiresAt:     time.UnixMilli(int64(hard)).UTC(),
	}
	if flags&flagSoft != 0 {
		e.SoftExpiresAt = time.UnixMilli(int64(soft)).UTC()
	}
	if e.Compressed {
		p, err := inflate(stored, int(decodedLen))
		if err != nil {
			return Envelope{}, err
		}
		e.Payload = p
	} else if storedLen > 0 {
		e.Payload = stored
	}
	return e, nil
}

// compressor is a pooled DEFLATE writer: a flate.Writer holds about 1 MiB of
// state, far too much to allocate per write.
type compressor struct {
	buf bytes.Buffer
	w   *flate.Writer
}

var compressorPool = sync.Pool{New: func() any {
	c := &compressor{}
	w, err := flate.NewWriter(&c.buf, compressionLevel)
	if err != nil {
		panic(err) // the level is a valid constant
	}
	c.w = w
	return c
}}

// deflate returns the raw DEFLATE stream of p, valid until the next call.
func (c *compressor) deflate(p []byte) []byte {
	c.buf.Reset()
	c.w.Reset(&c.buf)
	c.w.Write(p) // writes to a bytes.Buffer do not fail
	c.w.Close()
	return c.buf.Bytes()
}

// decompressor is a pooled DEFLATE reader over an in-memory stream.
type decompressor struct {
	src bytes.Reader
	r   io.ReadCloser
}

var decompressorPool = sync.Pool{New: func() any {
	d := &decompressor{}
	d.r = flate.NewReader(&d.src)
	return d
}}

// inflate inflates src into exactly n bytes. It allocates n bytes once, and
// stops as soon as the stream would produce byte n+1: a stream that is
// shorter, longer, broken or followed by trailing bytes is Corrupt.
func inflate(src []byte, n int) ([]byte, error) {
	d := decompressorPool.Get().(*decompressor)
	defer decompressorPool.Put(d)
	d.src.Reset(src)
	if err := d.r.(flate.Resetter).Reset(&d.src, nil); err != nil {
		return nil, fail(Corrupt, "deflate reset")
	}
	dst := make([]byte, n)
	if _, err := io.ReadFull(d.r, dst); err != nil {
		return nil, fail(Corrupt, "deflate stream shorter than declared or broken")
	}
	var one [1]byte
	for {
		k, err := d.r.Read(one[:])
		if k > 0 {
			return nil, fail(Corrupt, "deflate stream longer than declared")
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fail(Corrupt, "deflate stream broken after the declared size")
		}
	}
	if d.src.Len() != 0 {
		return nil, fail(Corrupt, "trailing bytes after the deflate stream")
	}
	return dst, nil
}
