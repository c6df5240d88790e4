package memo

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLookupMatchesBothHashes(t *testing.T) {
	tb := New[string](3)
	tb.Store(1, 2, "a")
	v, ok := tb.Lookup(1, 2)
	require.True(t, ok)
	assert.Equal(t, "a", v)
	_, ok = tb.Lookup(1, 3) // same first slot, other second hash
	assert.False(t, ok)
	_, ok = tb.Lookup(9, 2) // 9&7 == 1: same slot, other first hash
	assert.False(t, ok)
}

// TestBoundedAndEveryValueReachable: a table never holds more than its
// size, and every stored value stays findable until it is replaced.
func TestBoundedAndEveryValueReachable(t *testing.T) {
	tb := New[int](2)
	for i := range uint64(4) {
		tb.Store(i, i+100, int(i)) // empty first choices: no replacement
	}
	for i := range uint64(4) {
		v, ok := tb.Lookup(i, i+100)
		require.True(t, ok)
		assert.Equal(t, int(i), v)
	}
	for i := range uint64(1000) {
		tb.Store(i, i*7+3, int(i))
	}
	held := 0
	for i := range uint64(1000) {
		if _, ok := tb.Lookup(i, i*7+3); ok {
			held++
		}
	}
	assert.LessOrEqual(t, held, 4)
	assert.Positive(t, held)
	ranged := 0
	tb.Range(func(int) bool { ranged++; return true })
	assert.Equal(t, 4, ranged, "every slot is full")
	assert.Equal(t, 4, tb.Size())
}

func TestNewClampsTheSize(t *testing.T) {
	assert.Len(t, New[int](0).slots, 1)
	assert.Len(t, New[int](10).slots, 1024)
	assert.Len(t, New[int](64).slots, 1<<MaxBits)
}

func TestConcurrentUse(t *testing.T) {
	tb := New[uint64](6)
	var wg sync.WaitGroup
	for g := range uint64(8) {
		wg.Go(func() {
			for i := range uint64(10_000) {
				h := g<<32 | i
				tb.Store(h, ^h, h)
				if v, ok := tb.Lookup(h, ^h); ok && v != h {
					t.Errorf("lookup(%d) = %d", h, v)
					return
				}
			}
		})
	}
	wg.Wait()
}
