// Package memo is the table that remembers key resolutions on hot paths: a
// fixed-size, lock-free table of values found by two independent 64-bit
// hashes. It owns only the slot discipline: each value has two candidate
// slots ("two choices"); a store fills an empty one or replaces one at
// random, and a lookup matches both hashes. Choosing the hashes (seeded,
// over an injective encoding, so that 128 matching bits mean the same input,
// and never keeping the input itself) is the caller's, and so is what the
// values hold.
//
// runtime/keys remembers key builds with it and host/cache key locations
// and entry keys; what they share may move here, never their hashing.
package memo

import (
	"math/rand/v2"
	"sync/atomic"
)

// Table remembers at most its size values. It never grows and takes no
// lock; it is safe for concurrent use.
type Table[V any] struct {
	slots []atomic.Pointer[entry[V]]
	mask  uint64
}

type entry[V any] struct {
	h1, h2 uint64
	v      V
}

// MaxBits bounds a table's size, 1<<MaxBits slots.
const MaxBits = 24

// New returns a table of 1<<bits slots (bits is clamped to 0..MaxBits).
func New[V any](bits uint) *Table[V] {
	size := 1 << min(bits, MaxBits)
	return &Table[V]{slots: make([]atomic.Pointer[entry[V]], size), mask: uint64(size - 1)}
}

// Lookup returns the value stored under (h1, h2).
func (t *Table[V]) Lookup(h1, h2 uint64) (V, bool) {
	for _, i := range [2]uint64{h1 & t.mask, h2 & t.mask} {
		if e := t.slots[i].Load(); e != nil && e.h1 == h1 && e.h2 == h2 {
			return e.v, true
		}
	}
	var zero V
	return zero, false
}

// Store remembers v under (h1, h2) in an empty candidate slot, else in one
// chosen at random (a fixed choice would let two values evict each other
// forever).
func (t *Table[V]) Store(h1, h2 uint64, v V) {
	e := &entry[V]{h1: h1, h2: h2, v: v}
	a, b := &t.slots[h1&t.mask], &t.slots[h2&t.mask]
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

// Size is the table's number of slots.
func (t *Table[V]) Size() int { return len(t.slots) }

// Range calls f with every value held, until f returns false. It sees each
// slot once, as it is at that moment.
func (t *Table[V]) Range(f func(V) bool) {
	for i := range t.slots {
		if e := t.slots[i].Load(); e != nil && !f(e.v) {
			return
		}
	}
}
