package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Fingerprint identifies a request for replay: the same key sent with
// another method, target or body is another request (422), not a retry.
type Fingerprint [sha256.Size]byte

// String is the lower-case hex form (what the programs store).
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// FingerprintOf digests the method, the request target as the client sent
// it (escaped path and raw query) and the body. Each part is
// length-prefixed, so no two different requests share an encoding.
func FingerprintOf(method, escapedPath, rawQuery string, body []byte) Fingerprint {
	h := sha256.New()
	var n [8]byte
	for _, p := range [][]byte{[]byte("caphost-idempotency-fingerprint-v1"), []byte(method), []byte(escapedPath),
		[]byte(rawQuery), body} {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var f Fingerprint
	h.Sum(f[:0])
	return f
}
