package l1

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// ek is the Key of the logical parts as the host derives one: a digest of
// the parts (length-prefixed) and a fixed region generation.
func ek(parts ...string) Key {
	h := sha256.New()
	for _, p := range parts {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(p))))
		h.Write([]byte(p))
	}
	k := Key{Generation: [16]byte{0x9e, 0x37, 0x79, 0xb9}}
	h.Sum(k.Location[:0])
	return k
}

func ekPool(n int) []Key {
	ks := make([]Key, n)
	for i := range ks {
		ks[i] = ek(fmt.Sprint("item:", i))
	}
	return ks
}

// EK and EKPool let the external tests share the helpers.
var EK, EKPool = ek, ekPool
