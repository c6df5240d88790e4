package envelope_test

import (
	"crypto/sha256"
	"encoding/binary"
	"time"

	"github.com/caphost/caphost/host/cache/envelope"
)

// lim is the Limits most tests use.
var lim = envelope.Limits{
	MaxEncodedBytes:     64 << 10,
	MaxCodecIDBytes:     64,
	MaxPayloadBytes:     32 << 10,
	MaxCompressionRatio: 64,
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// encodeV1 writes the N-1 layout (no source revision, no soft expiry) the
// way the previous writer did; Encode writes only v2, so the v1 golden comes
// from here.
func encodeV1(codecID string, payloadVersion uint32, negative bool, written, hard time.Time, payload []byte) []byte {
	var flags byte
	if negative {
		flags |= 1
	}
	out := []byte{0xC5, 'C', 'A', 'P', 1, byte(len(codecID))}
	out = append(out, codecID...)
	out = binary.BigEndian.AppendUint32(out, payloadVersion)
	out = append(out, flags)
	out = binary.BigEndian.AppendUint64(out, uint64(written.UnixMilli()))
	out = binary.BigEndian.AppendUint64(out, uint64(hard.UnixMilli()))
	out = binary.BigEndian.AppendUint32(out, uint32(len(payload)))
	return seal(out, payload)
}

// seal appends the digest of header‖payload and the payload.
func seal(header, payload []byte) []byte {
	h := sha256.New()
	h.Write(header)
	h.Write(payload)
	out := h.Sum(header)[:len(header)+16]
	return append(out, payload...)
}

// rawV2 builds a v2 envelope field by field, sealed with a valid digest, so
// tests can state what a hostile or broken writer would store.
type rawV2 struct {
	version    byte
	codecID    string
	flags      byte
	revision   uint64
	written    uint64
	soft       uint64
	hard       uint64
	storedLen  *uint32 // nil: len(stored)
	decodedLen uint32
	stored     []byte
}

func (r rawV2) bytes() []byte {
	if r.version == 0 {
		r.version = 2
	}
	if r.codecID == "" {
		r.codecID = "example.item"
	}
	out := []byte{0xC5, 'C', 'A', 'P', r.version, byte(len(r.codecID))}
	out = append(out, r.codecID...)
	out = binary.BigEndian.AppendUint32(out, 1)
	out = append(out, r.flags)
	if r.flags&4 != 0 {
		out = binary.BigEndian.AppendUint64(out, r.revision)
	}
	out = binary.BigEndian.AppendUint64(out, r.written)
	if r.flags&8 != 0 {
		out = binary.BigEndian.AppendUint64(out, r.soft)
	}
	out = binary.BigEndian.AppendUint64(out, r.hard)
	n := uint32(len(r.stored))
	if r.storedLen != nil {
		n = *r.storedLen
	}
	out = binary.BigEndian.AppendUint32(out, n)
	if r.flags&2 != 0 {
		out = binary.BigEndian.AppendUint32(out, r.decodedLen)
	}
	return seal(out, r.stored)
}
