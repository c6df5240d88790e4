package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"

	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/keys/memo"
)

// memoBits sizes a region's memos, 1<<memoBits = 1024 keys and as many
// (location, generation) pairs: a hot key then costs two seeded hashes
// instead of its canonicaliser call, an HMAC and a SHA-256.
const memoBits = 10

// keyMemo remembers recent resolutions of one region: a key to its
// location (the canonicaliser is deterministic and the region's runtime is
// rebuilt on every guest swap, so an answer holds for the memo's life), and
// a location and generation to the entry keys. Like keys.Prepared's memo it
// holds no key material: an input is remembered by two independent seeded
// 64-bit hashes of an injective encoding (a hit needs all 128 bits to match;
// the seeds are random per memo, so inputs cannot be chosen to collide).
type keyMemo struct {
	seed1, seed2 maphash.Seed
	locs         *memo.Table[keys.Location]
	refs         *memo.Table[entryRef]
}

func newKeyMemo() *keyMemo {
	return &keyMemo{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(),
		locs: memo.New[keys.Location](memoBits), refs: memo.New[entryRef](memoBits)}
}

// memoMaxInput bounds the keys remembered: longer ones are resolved every
// time (their hashing would cost what it saves).
const memoMaxInput = 512

// memoSmallInput is the stack buffer of a typical key's encoding: zeroing
// the whole memoMaxInput buffer on every call showed on an L1 hit.
const memoSmallInput = 128

// hash returns the memo hashes of key and whether it may be remembered.
// The encoding (kind, count, then every part or attribute name and value
// length-prefixed: injective) lives only in a stack buffer, cleared after.
func (m *keyMemo) hash(k Key) (h1, h2 uint64, ok bool) {
	n := 2
	if k.attr {
		for _, a := range k.attrs {
			n += 8 + len(a.Name) + len(a.Value)
		}
	} else {
		for _, p := range k.parts {
			n += 4 + len(p)
		}
	}
	switch {
	case n > memoMaxInput || len(k.attrs) > 255 || len(k.parts) > 255:
		return 0, 0, false
	case n <= memoSmallInput:
		var buf [memoSmallInput]byte
		h1, h2 = m.sum(k.encode(buf[:0]))
		clear(buf[:n])
	default:
		var buf [memoMaxInput]byte
		h1, h2 = m.sum(k.encode(buf[:0]))
		clear(buf[:n])
	}
	return h1, h2, true
}

func (m *keyMemo) sum(b []byte) (h1, h2 uint64) {
	return maphash.Bytes(m.seed1, b), maphash.Bytes(m.seed2, b)
}

// encode appends k's memo encoding to b.
func (k Key) encode(b []byte) []byte {
	add := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	if k.attr {
		b = append(b, 'a', byte(len(k.attrs)))
		for _, a := range k.attrs {
			add(a.Name)
			add(a.Value)
		}
		return b
	}
	b = append(b, 'p', byte(len(k.parts)))
	for _, p := range k.parts {
		add(p)
	}
	return b
}

// maxMemoGen bounds the generations whose entry keys are remembered: every
// generation this package creates is 16 bytes, and cache-put-v2 accepts at
// most 128.
const maxMemoGen = 128

// refHash returns the memo hashes of a location in a generation (the
// location's digest is fixed-size, so digest then generation is injective)
// and whether the pair may be remembered.
func (m *keyMemo) refHash(loc keys.Location, gen []byte) (h1, h2 uint64, ok bool) {
	if len(gen) > maxMemoGen {
		return 0, 0, false
	}
	var buf [sha256.Size + maxMemoGen]byte
	d := loc.Digest()
	n := copy(buf[:], d[:])
	n += copy(buf[n:], gen)
	return maphash.Bytes(m.seed1, buf[:n]), maphash.Bytes(m.seed2, buf[:n]), true
}
