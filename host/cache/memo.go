package cache

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math/rand/v2"
	"sync/atomic"

	"github.com/caphost/caphost/runtime/keys"
)

// memoSlots is the number of keys a region remembers the location of, and
// the number of (location, generation) pairs it remembers the entry keys
// of (a power of two): a hot key then costs two seeded hashes instead of
// its canonicaliser call, an HMAC and a SHA-256.
const memoSlots = 1024

// keyMemo remembers recent resolutions of one region: a key to its
// location (the canonicaliser is deterministic and the region's runtime is
// rebuilt on every guest swap, so an answer holds for the memo's life), and
// a location and generation to the entry keys. Like keys.Prepared's memo
// it holds no key material: a key is remembered by two independent seeded
// 64-bit hashes of its canonical encoding (a hit needs all 128 bits to
// match; the seeds are random per memo, so inputs cannot be chosen to
// collide) and a location by its digest. Each item has two candidate slots
// ("two choices"); a miss fills an empty one or replaces one at random. It
// takes no lock and never grows.
type keyMemo struct {
	seed1, seed2 maphash.Seed
	locs         [memoSlots]atomic.Pointer[locEntry]
	refs         [memoSlots]atomic.Pointer[entryRef]
}

type locEntry struct {
	h1, h2 uint64
	loc    keys.Location
}

func newKeyMemo() *keyMemo { return &keyMemo{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed()} }

// memoMaxInput bounds the keys remembered: longer ones are resolved every
// time (their hashing would cost what it saves).
const memoMaxInput = 512

// hash returns the memo hashes of key and whether it may be remembered.
// The encoding (kind, count, then every part or attribute name and value
// length-prefixed: injective) lives only in a stack buffer, cleared after.
func (m *keyMemo) hash(k Key) (h1, h2 uint64, ok bool) {
	var buf [memoMaxInput]byte
	b := buf[:0]
	add := func(s string) bool {
		if len(b)+4+len(s) > len(buf) {
			return false
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
		return true
	}
	if k.attr {
		b = append(b, 'a', byte(len(k.attrs)))
		for _, a := range k.attrs {
			if !add(a.Name) || !add(a.Value) {
				return 0, 0, false
			}
		}
	} else {
		b = append(b, 'p', byte(len(k.parts)))
		for _, p := range k.parts {
			if !add(p) {
				return 0, 0, false
			}
		}
	}
	h1, h2 = maphash.Bytes(m.seed1, b), maphash.Bytes(m.seed2, b)
	clear(b)
	return h1, h2, true
}

func (m *keyMemo) loc(h1, h2 uint64) (keys.Location, bool) {
	for _, s := range [2]*atomic.Pointer[locEntry]{&m.locs[h1&(memoSlots-1)], &m.locs[h2&(memoSlots-1)]} {
		if e := s.Load(); e != nil && e.h1 == h1 && e.h2 == h2 {
			return e.loc, true
		}
	}
	return keys.Location{}, false
}

func (m *keyMemo) storeLoc(h1, h2 uint64, loc keys.Location) {
	store(&m.locs[h1&(memoSlots-1)], &m.locs[h2&(memoSlots-1)], &locEntry{h1: h1, h2: h2, loc: loc})
}

// ref returns the remembered entry keys of loc in generation gen.
func (m *keyMemo) ref(loc keys.Location, gen []byte) (entryRef, bool) {
	d := loc.Digest()
	a, b := binary.LittleEndian.Uint64(d[:8]), binary.LittleEndian.Uint64(d[8:16])
	for _, s := range [2]*atomic.Pointer[entryRef]{&m.refs[a&(memoSlots-1)], &m.refs[b&(memoSlots-1)]} {
		if e := s.Load(); e != nil && e.loc.Digest() == d && bytes.Equal(e.gen, gen) {
			return *e, true
		}
	}
	return entryRef{}, false
}

func (m *keyMemo) storeRef(ref entryRef) {
	d := ref.loc.Digest()
	a, b := binary.LittleEndian.Uint64(d[:8]), binary.LittleEndian.Uint64(d[8:16])
	store(&m.refs[a&(memoSlots-1)], &m.refs[b&(memoSlots-1)], &ref)
}

// store puts e in an empty candidate slot, else in one chosen at random (a
// fixed choice would let two items evict each other forever).
func store[T any](a, b *atomic.Pointer[T], e *T) {
	switch {
	case a.Load() == nil:
		a.Store(e)
	case b.Load() == nil:
		b.Store(e)
	case rand.Uint32()&1 == 0:
		a.Store(e)
	default:
		b.Store(e)
	}
}
