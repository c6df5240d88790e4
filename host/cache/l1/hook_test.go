package l1

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests place a Flush or a Delete exactly between a Set's store and
// its second check, the interleaving a stress test only hits by chance.

func hooked(t *testing.T, during func(l *Cache[int])) (*Cache[int], SetOutcome, bool) {
	t.Helper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := New[int](Config{MaxEntries: 10, MaxBytes: 1 << 16, MaxAge: time.Minute, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	servedInside := false
	testHookAfterStore = func() {
		during(l)
		_, servedInside = l.Get(ek("k")) // right after Flush/Delete returned
	}
	t.Cleanup(func() { testHookAfterStore = nil })
	o := l.Set(l.Ticket(), ek("k"), 1, 8, now.Add(time.Hour))
	testHookAfterStore = nil
	return l, o, servedInside
}

func TestFlushBetweenStoreAndCheck(t *testing.T) {
	l, o, served := hooked(t, func(l *Cache[int]) { l.Flush() })
	assert.Equal(t, NotStoredRaced, o)
	assert.False(t, served, "Get right after Flush returned must miss")
	_, ok := l.Get(ek("k"))
	assert.False(t, ok)
	assert.Equal(t, int64(0), l.Stats().Entries)
}

func TestDeleteBetweenStoreAndCheck(t *testing.T) {
	l, o, served := hooked(t, func(l *Cache[int]) { l.Delete(ek("k")) })
	assert.Equal(t, NotStoredRaced, o)
	assert.False(t, served)
	_, ok := l.Get(ek("k"))
	assert.False(t, ok)
	assert.Equal(t, int64(0), l.Stats().Entries)
}

// A Delete that runs after the Set's first check but before its store
// removes nothing; the stored entry must still never be served.
func TestDeleteBeforeStore(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := New[int](Config{MaxEntries: 10, MaxBytes: 1 << 16, MaxAge: time.Minute, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	defer l.Close()
	tk := l.Ticket()
	// The hint's effect as if it had landed between the first check and the
	// store: the sequence moved, the key was absent.
	served := true
	testHookAfterStore = func() {
		l.deletes.Add(1)
		_, served = l.Get(ek("k"))
	}
	defer func() { testHookAfterStore = nil }()
	assert.Equal(t, NotStoredRaced, l.Set(tk, ek("k"), 1, 8, now.Add(time.Hour)))
	assert.False(t, served, "an entry is not served before its Set validated it")
	_, ok := l.Get(ek("k"))
	assert.False(t, ok)
}

// TestHashCollisionIsAMiss: the map is keyed by a 64-bit hash of the Key.
// An entry another Key's Set left in a's slot (a collision) is never served
// as a's value, and a's own Set then replaces it.
func TestHashCollisionIsAMiss(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := New[int](Config{MaxEntries: 10, MaxBytes: 1 << 16, MaxAge: time.Minute, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	a, b := ek("a"), ek("b")
	require.Equal(t, Stored, l.Set(l.Ticket(), b, 2, 8, now.Add(time.Hour)))
	// b's entry, moved into a's slot: what a collision of the two hashes does.
	it, ok := l.c.GetIfPresent(l.hash(b))
	require.True(t, ok)
	l.c.Set(l.hash(a), it)
	_, ok = l.Get(a)
	assert.False(t, ok, "a colliding entry is a miss")
	v, ok := l.Get(b)
	require.True(t, ok)
	assert.Equal(t, 2, v)

	require.Equal(t, Stored, l.Set(l.Ticket(), a, 1, 8, now.Add(time.Hour)))
	v, ok = l.Get(a)
	require.True(t, ok)
	assert.Equal(t, 1, v)
}
