package l1_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/l1"
)

var (
	t0         = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ek, ekPool = l1.EK, l1.EKPool
)

// fakeClock is the injected clock; tests move it explicitly.
type fakeClock struct{ ns atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t0.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func cfg(clk *fakeClock) l1.Config {
	return l1.Config{MaxEntries: 1000, MaxBytes: 1 << 20, MaxAge: time.Minute, Clock: clk.Now}
}

func newCache[V any](t testing.TB, c l1.Config) *l1.Cache[V] {
	t.Helper()
	l, err := l1.New[V](c)
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return l
}

func TestConfigValidation(t *testing.T) {
	clk := newClock()
	ok := cfg(clk)
	require.NoError(t, ok.Validate())
	cases := map[string]struct {
		mut  func(*l1.Config)
		want l1.Reason
	}{
		"strict":              {func(c *l1.Config) { c.Strict = true }, l1.StrictRegion},
		"no entries":          {func(c *l1.Config) { c.MaxEntries = 0 }, l1.EntriesOutOfRange},
		"negative entries":    {func(c *l1.Config) { c.MaxEntries = -1 }, l1.EntriesOutOfRange},
		"too many entries":    {func(c *l1.Config) { c.MaxEntries = l1.MaxEntriesLimit + 1 }, l1.EntriesOutOfRange},
		"slot over uint32":    {func(c *l1.Config) { c.MaxEntries, c.MaxBytes = 1, l1.MaxBytesLimit }, l1.EntriesOutOfRange},
		"no bytes":            {func(c *l1.Config) { c.MaxBytes = 0 }, l1.BytesOutOfRange},
		"bytes ≤ overhead":    {func(c *l1.Config) { c.MaxBytes = l1.EntryOverhead }, l1.BytesOutOfRange},
		"too many bytes":      {func(c *l1.Config) { c.MaxBytes = l1.MaxBytesLimit + 1 }, l1.BytesOutOfRange},
		"entry ≤ overhead":    {func(c *l1.Config) { c.MaxEntryBytes = l1.EntryOverhead }, l1.EntryBytesOutOfRange},
		"entry over MaxBytes": {func(c *l1.Config) { c.MaxEntryBytes = c.MaxBytes + 1 }, l1.EntryBytesOutOfRange},
		"negative entry":      {func(c *l1.Config) { c.MaxEntryBytes = -5 }, l1.EntryBytesOutOfRange},
		"no max age":          {func(c *l1.Config) { c.MaxAge = 0 }, l1.MaxAgeOutOfRange},
		"sub-ms max age":      {func(c *l1.Config) { c.MaxAge = time.Microsecond }, l1.MaxAgeOutOfRange},
		"max age too long":    {func(c *l1.Config) { c.MaxAge = l1.MaxAgeLimit + 1 }, l1.MaxAgeOutOfRange},
		"no clock":            {func(c *l1.Config) { c.Clock = nil }, l1.NoClock},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := ok
			tc.mut(&c)
			err := c.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, err, l1.ErrInvalid)
			var e *l1.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tc.want, e.Reason)
			l, nerr := l1.New[int](c)
			assert.Nil(t, l)
			assert.ErrorIs(t, nerr, tc.want)
		})
	}
}

func TestReasonsAndOutcomesNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range l1.Reasons() {
		require.True(t, r.Valid())
		assert.False(t, seen[r.String()])
		seen[r.String()] = true
		assert.Equal(t, "cache l1: "+r.String(), r.Error())
	}
	assert.Equal(t, "INVALID_REASON", l1.Reason(0).String())
	for o := l1.Stored; o <= l1.NotStoredDisabled; o++ {
		assert.NotEqual(t, "INVALID_SET_OUTCOME", o.String())
	}
	assert.Equal(t, "INVALID_SET_OUTCOME", l1.SetOutcome(0).String())
}

func TestNilCacheIsDisabled(t *testing.T) {
	var l *l1.Cache[int]
	assert.Equal(t, l1.NotStoredDisabled, l.Set(l.Ticket(), ek("k"), 1, 8, t0.Add(time.Hour)))
	_, ok := l.Get(ek("k"))
	assert.False(t, ok)
	l.Delete(ek("k"))
	l.Flush()
	l.CleanUp()
	l.Close()
	assert.Equal(t, l1.Stats{}, l.Stats())
}

func TestGetSetAndWeights(t *testing.T) {
	clk := newClock()
	l := newCache[string](t, cfg(clk))
	key := ek("item:7", "generation-1")
	require.Equal(t, l1.Stored, l.Set(l.Ticket(), key, "value", 5, clk.Now().Add(time.Hour)))
	v, ok := l.Get(key)
	require.True(t, ok)
	assert.Equal(t, "value", v)
	st := l.Stats()
	assert.Equal(t, int64(1), st.Entries)
	assert.Equal(t, int64(l1.KeySize+5+l1.EntryOverhead), st.Bytes, "weight is the key + value + overhead")

	// A replacement charges the new size only.
	require.Equal(t, l1.Stored, l.Set(l.Ticket(), key, "longer value", 500, clk.Now().Add(time.Hour)))
	st = l.Stats()
	assert.Equal(t, int64(1), st.Entries)
	assert.Equal(t, int64(l1.KeySize+500+l1.EntryOverhead), st.Bytes)

	_, ok = l.Get(ek("other"))
	assert.False(t, ok)
	st = l.Stats()
	assert.Equal(t, uint64(1), st.Hits)
	assert.Equal(t, uint64(1), st.Misses)
	assert.Equal(t, uint64(2), st.Stored)
}

func TestTooLargeAndNegativeSize(t *testing.T) {
	clk := newClock()
	c := cfg(clk)
	c.MaxEntryBytes = 1000
	l := newCache[int](t, c)
	key := ek("k")
	n := l1.KeySize
	assert.Equal(t, l1.Stored, l.Set(l.Ticket(), key, 1, 1000-l1.EntryOverhead-n, clk.Now().Add(time.Hour)))
	assert.Equal(t, l1.NotStoredTooLarge, l.Set(l.Ticket(), key, 1, 1001-l1.EntryOverhead-n, clk.Now().Add(time.Hour)))
	assert.Equal(t, l1.NotStoredTooLarge, l.Set(l.Ticket(), key, 1, -1, clk.Now().Add(time.Hour)))
	assert.Equal(t, l1.NotStoredInvalidKey, l.Set(l.Ticket(), l1.Key{}, 1, 8, clk.Now().Add(time.Hour)))
	_, ok := l.Get(l1.Key{})
	assert.False(t, ok)
	l.Delete(l1.Key{})
	assert.Equal(t, uint64(3), l.Stats().Refused)

	// Default MaxEntryBytes: MaxBytes/8.
	d := newCache[int](t, cfg(clk))
	assert.Equal(t, l1.NotStoredTooLarge, d.Set(d.Ticket(), key, 1, (1<<20)/8, clk.Now().Add(time.Hour)))
}

func TestNeverServedPastHardExpiry(t *testing.T) {
	clk := newClock()
	l := newCache[int](t, cfg(clk))
	hard := clk.Now().Add(10 * time.Second)
	require.Equal(t, l1.Stored, l.Set(l.Ticket(), ek("k"), 1, 8, hard))
	clk.Advance(10*time.Second - time.Nanosecond)
	_, ok := l.Get(ek("k"))
	assert.True(t, ok, "one nanosecond before hard expiry")
	clk.Advance(time.Nanosecond)
	_, ok = l.Get(ek("k"))
	assert.False(t, ok, "at hard expiry")
	st := l.Stats()
	assert.Equal(t, uint64(1), st.Expired)
	assert.Equal(t, uint64(1), st.EvictedExpiry, "a Get's judgement removes the entry")
	assert.Equal(t, int64(0), st.Entries)

	// Already expired: not stored.
	assert.Equal(t, l1.NotStoredExpired, l.Set(l.Ticket(), ek("k"), 1, 8, clk.Now()))
	assert.Equal(t, l1.NotStoredExpired, l.Set(l.Ticket(), ek("k"), 1, 8, clk.Now().Add(-time.Hour)))
}

func TestMaxAgeOnlyShortens(t *testing.T) {
	clk := newClock()
	l := newCache[int](t, cfg(clk)) // MaxAge one minute
	require.Equal(t, l1.Stored, l.Set(l.Ticket(), ek("long"), 1, 8, clk.Now().Add(time.Hour)))
	require.Equal(t, l1.Stored, l.Set(l.Ticket(), ek("short"), 1, 8, clk.Now().Add(30*time.Second)))
	clk.Advance(30 * time.Second)
	_, ok := l.Get(ek("short"))
	assert.False(t, ok, "hard expiry before MaxAge wins")
	_, ok = l.Get(ek("long"))
	assert.True(t, ok)
	clk.Advance(30 * time.Second)
	_, ok = l.Get(ek("long"))
	assert.False(t, ok, "MaxAge caps an entry whose hard expiry is later")
}

// TestBounded: whichever bound binds, both hold once maintenance ran, and
// the binding one is used, not wasted.
func TestBounded(t *testing.T) {
	cases := map[string]struct {
		maxEntries int
		maxBytes   int64
		valueBytes int
		byEntries  bool
	}{
		"entries bind": {maxEntries: 10, maxBytes: 1 << 20, valueBytes: 1, byEntries: true},
		"bytes bind":   {maxEntries: 100_000, maxBytes: 64 << 10, valueBytes: 1000},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := newClock()
			l := newCache[int](t, l1.Config{MaxEntries: tc.maxEntries, MaxBytes: tc.maxBytes, MaxAge: time.Minute, Clock: clk.Now})
			const n = 500
			for i, k := range ekPool(n) {
				require.Equal(t, l1.Stored, l.Set(l.Ticket(), k, i, tc.valueBytes, clk.Now().Add(time.Hour)))
			}
			l.CleanUp()
			st := l.Stats()
			assert.LessOrEqual(t, st.Entries, int64(tc.maxEntries))
			assert.LessOrEqual(t, st.Bytes, tc.maxBytes)
			assert.Equal(t, uint64(n-st.Entries), st.EvictedSize)
			if tc.byEntries {
				assert.GreaterOrEqual(t, st.Entries, int64(tc.maxEntries/2))
			} else {
				assert.Greater(t, st.Bytes, tc.maxBytes/2)
			}
		})
	}
}

func TestFlush(t *testing.T) {
	clk := newClock()
	l := newCache[int](t, cfg(clk))
	for i := range 50 {
		require.Equal(t, l1.Stored, l.Set(l.Ticket(), ek(fmt.Sprint("k", i)), i, 8, clk.Now().Add(time.Hour)))
	}
	before := l.Ticket() // an L2 read that started before the flush
	l.Flush()
	for i := range 50 {
		_, ok := l.Get(ek(fmt.Sprint("k", i)))
		assert.False(t, ok)
	}
	assert.Equal(t, l1.NotStoredRaced, l.Set(before, ek("k1"), 1, 8, clk.Now().Add(time.Hour)))
	_, ok := l.Get(ek("k1"))
	assert.False(t, ok)
	assert.Equal(t, l1.Stored, l.Set(l.Ticket(), ek("k1"), 1, 8, clk.Now().Add(time.Hour)))
	_, ok = l.Get(ek("k1"))
	assert.True(t, ok)
	st := l.Stats()
	assert.Equal(t, uint64(1), st.Flushes)
	assert.Equal(t, uint64(1), st.Raced)
	assert.Equal(t, int64(1), st.Entries)
	assert.Zero(t, st.EvictedSize+st.EvictedExpiry, "a flush is not an eviction")
}

func TestDelete(t *testing.T) {
	clk := newClock()
	l := newCache[int](t, cfg(clk))
	require.Equal(t, l1.Stored, l.Set(l.Ticket(), ek("a"), 1, 8, clk.Now().Add(time.Hour)))
	require.Equal(t, l1.Stored, l.Set(l.Ticket(), ek("b"), 2, 8, clk.Now().Add(time.Hour)))
	before := l.Ticket()
	l.Delete(ek("a"))
	_, ok := l.Get(ek("a"))
	assert.False(t, ok)
	_, ok = l.Get(ek("b"))
	assert.True(t, ok, "a hint removes only its key")
	assert.Equal(t, l1.NotStoredRaced, l.Set(before, ek("a"), 1, 8, clk.Now().Add(time.Hour)), "a fill that began before the hint")
	_, ok = l.Get(ek("a"))
	assert.False(t, ok)
	assert.Equal(t, int64(1), l.Stats().Entries)
}

// TestConcurrentFlushOrdering: setters fill with tickets taken before their
// "L2 read" while a flusher flushes; right after each Flush returns, no key
// may hit with a value whose ticket predates that Flush.
func TestConcurrentFlushOrdering(t *testing.T) {
	clk := newClock()
	l := newCache[uint64](t, cfg(clk))
	pool := ekPool(64)
	var stop atomic.Bool
	var flushes atomic.Uint64 // the flush count is the epoch the value records
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for !stop.Load() {
				epochAtTicket := flushes.Load()
				tk := l.Ticket()
				if flushes.Load() != epochAtTicket {
					continue // the ticket straddles a flush: its epoch is unknown here
				}
				runtime.Gosched() // the L2 read
				l.Set(tk, pool[r.IntN(len(pool))], epochAtTicket, 8, clk.Now().Add(time.Hour))
			}
		})
	}
	violations := 0
	for range 300 {
		done := flushes.Add(1) // before the flush: a ticket taken after it sees done
		l.Flush()
		for _, k := range pool {
			if v, ok := l.Get(k); ok && v < done {
				violations++
			}
		}
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()
	assert.Zero(t, violations, "a fill whose ticket predates a returned Flush was served")
	l.Flush()
	for _, k := range pool {
		_, ok := l.Get(k)
		assert.False(t, ok)
	}
	st := l.Stats()
	t.Logf("stored %d raced %d", st.Stored, st.Raced)
}

// TestConcurrentBoundsAndExpiry: many goroutines set entries of random
// sizes and hard expiries and read them while the clock moves; every hit
// must be before its hard expiry, and the bounds hold at the end.
func TestConcurrentBoundsAndExpiry(t *testing.T) {
	clk := newClock()
	c := l1.Config{MaxEntries: 500, MaxBytes: 200 << 10, MaxAge: 30 * time.Second, Clock: clk.Now}
	type val struct{ hard, setAt int64 }
	l := newCache[val](t, c)
	pool := ekPool(2000)
	var stop atomic.Bool
	var bad, hits atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 2))
			for i := 0; !stop.Load(); i++ {
				k := pool[r.IntN(len(pool))]
				if i%3 == 0 {
					now := clk.Now()
					hard := now.Add(time.Duration(r.IntN(20_000)) * time.Millisecond)
					l.Set(l.Ticket(), k, val{hard.UnixNano(), now.UnixNano()}, r.IntN(4000), hard)
					continue
				}
				before := clk.Now().UnixNano() // Get's own reading is no earlier
				if v, ok := l.Get(k); ok {
					hits.Add(1)
					if before >= v.hard || before >= v.setAt+int64(c.MaxAge) {
						bad.Add(1)
					}
				}
				if i%101 == 0 {
					l.Delete(k)
				}
			}
		})
	}
	for range 200 {
		clk.Advance(50 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	l.CleanUp()
	st := l.Stats()
	assert.Zero(t, bad.Load(), "an entry was served at or past its hard expiry or MaxAge")
	assert.Positive(t, hits.Load())
	assert.LessOrEqual(t, st.Bytes, c.MaxBytes)
	assert.LessOrEqual(t, st.Entries, int64(c.MaxEntries))
	assert.GreaterOrEqual(t, st.Entries, int64(0))
	t.Logf("%+v", st)
}

func otterGoroutines() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "maypok86/otter")
}

func waitFor(cond func() bool) bool {
	for range 200 {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cond()
}

func TestCloseLeaksNothing(t *testing.T) {
	base := runtime.NumGoroutine()
	clk := newClock()
	var caches []*l1.Cache[int]
	for range 5 {
		l, err := l1.New[int](cfg(clk))
		require.NoError(t, err)
		for i := range 100 {
			l.Set(l.Ticket(), ek(fmt.Sprint(i)), i, 8, clk.Now().Add(time.Hour))
			l.Get(ek(fmt.Sprint(i)))
		}
		caches = append(caches, l)
	}
	// The options New uses start no goroutine: no expiry wheel, maintenance
	// on the calling goroutine.
	assert.Zero(t, otterGoroutines(), "the library runs no goroutine while open")
	assert.True(t, waitFor(func() bool { return runtime.NumGoroutine() <= base }), "goroutines while open %d > %d", runtime.NumGoroutine(), base)
	for _, l := range caches {
		l.Close()
		l.Close() // idempotent
	}
	assert.Zero(t, otterGoroutines(), "Close stops and waits for the library's goroutines")
	assert.True(t, waitFor(func() bool { return runtime.NumGoroutine() <= base }), "goroutines %d > %d", runtime.NumGoroutine(), base)

	l := caches[0]
	assert.Equal(t, l1.NotStoredClosed, l.Set(l.Ticket(), ek("x"), 1, 8, clk.Now().Add(time.Hour)))
	_, ok := l.Get(ek("1"))
	assert.False(t, ok)
	assert.Zero(t, otterGoroutines(), "use after Close starts nothing")
}

func TestNoOverflowNearLimits(t *testing.T) {
	clk := newClock()
	c := l1.Config{MaxEntries: 1, MaxBytes: math.MaxUint32, MaxAge: l1.MaxAgeLimit, Clock: clk.Now}
	l := newCache[int](t, c)
	assert.Equal(t, l1.Stored, l.Set(l.Ticket(), ek("k"), 1, 8, time.Unix(0, math.MaxInt64)))
	_, ok := l.Get(ek("k"))
	assert.True(t, ok)
}
