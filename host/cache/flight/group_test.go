package flight_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/flight"
)

func TestConcurrentMissesShareOneLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, testConfig())
		l := newLoader(true)
		const n = 50
		outs := make([]<-chan outcome, n)
		for i := range outs {
			outs[i] = do(g, t.Context(), "cold", l.fn)
		}
		synctest.Wait()
		s := g.Stats()
		assert.Equal(t, 1, s.InFlight)
		assert.Equal(t, 1, s.Running)
		assert.Equal(t, n, s.Waiters)
		assert.Equal(t, uint64(1), s.Loads)
		assert.Equal(t, uint64(n-1), s.Joins)

		l.next(t).ret <- "value"
		synctest.Wait()
		starters := 0
		for _, ch := range outs {
			o := ready(t, ch)
			require.NoError(t, o.err)
			assert.Equal(t, "value", o.v)
			if !o.shared {
				starters++
			}
		}
		assert.Equal(t, 1, starters, "exactly one caller started the load")
		assert.Equal(t, int32(1), l.n.Load(), "fn ran once")
		assertIdle(t, g)

		// The entry went with the load: the next miss loads again.
		assert.Equal(t, outcome{v: "again"}, loadThrough(t, g, l, "cold", "again"))
		assert.Equal(t, uint64(2), g.Stats().Loads)
		assertIdle(t, g)
	})
}

// TestLeadDoesNotJoin: a caller with a stale value to serve leads a load
// when none runs, and otherwise gets ErrRunning at once instead of
// waiting; a later Do still joins the running load.
func TestLeadDoesNotJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, testConfig())
		l := newLoader(true)
		leader := make(chan outcome, 1)
		go func() {
			v, err := g.Lead(t.Context(), "hot", l.fn)
			leader <- outcome{v: v, err: err}
		}()
		synctest.Wait()
		pending(t, leader)

		_, err := g.Lead(t.Context(), "hot", l.fn)
		require.ErrorIs(t, err, flight.ErrRunning)
		assert.False(t, errors.Is(err, flight.ErrOverloaded), "a skip is not an overload")
		joined := do(g, t.Context(), "hot", l.fn)
		synctest.Wait()
		pending(t, joined)
		s := g.Stats()
		assert.Equal(t, uint64(1), s.Loads)
		assert.Equal(t, uint64(1), s.Skips)
		assert.Equal(t, uint64(1), s.Joins)
		assert.Equal(t, 2, s.Waiters, "the skipped caller never attached")

		l.next(t).ret <- "fresh"
		synctest.Wait()
		assert.Equal(t, outcome{v: "fresh"}, ready(t, leader))
		assert.Equal(t, outcome{v: "fresh", shared: true}, ready(t, joined))
		assert.Equal(t, int32(1), l.n.Load(), "fn ran once")
		assertIdle(t, g)

		// Nothing runs now: Lead starts the next load itself.
		next := make(chan outcome, 1)
		go func() {
			v, err := g.Lead(t.Context(), "hot", l.fn)
			next <- outcome{v: v, err: err}
		}()
		synctest.Wait()
		l.next(t).ret <- "again"
		synctest.Wait()
		assert.Equal(t, outcome{v: "again"}, ready(t, next))
		assertIdle(t, g)
	})
}

func TestWaiterLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.MaxWaiters = 3
		g := newGroup(t, cfg)
		l := newLoader(true)
		outs := []<-chan outcome{do(g, t.Context(), "k", l.fn), do(g, t.Context(), "k", l.fn), do(g, t.Context(), "k", l.fn)}
		synctest.Wait()

		_, shared, err := g.Do(t.Context(), "k", l.fn)
		require.ErrorIs(t, err, flight.ErrTooManyWaiters)
		assert.ErrorIs(t, err, flight.ErrOverloaded)
		assert.False(t, shared)
		assert.Equal(t, uint64(1), g.Stats().RefusedWaiters)
		assert.Equal(t, 3, g.Stats().Waiters, "the refused caller never attached")

		l.next(t).ret <- "v"
		synctest.Wait()
		for _, ch := range outs {
			o := ready(t, ch)
			require.NoError(t, o.err)
			assert.Equal(t, "v", o.v)
		}
		assertIdle(t, g)
	})
}

func TestKeyLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.MaxKeys = 2
		g := newGroup(t, cfg)
		l := newLoader(true)
		a := do(g, t.Context(), "a", l.fn)
		synctest.Wait()
		ca := l.next(t)
		b := do(g, t.Context(), "b", l.fn)
		synctest.Wait()
		cb := l.next(t)

		_, _, err := g.Do(t.Context(), "c", l.fn)
		require.ErrorIs(t, err, flight.ErrTooManyKeys)
		assert.ErrorIs(t, err, flight.ErrOverloaded)
		var r flight.Reason
		require.ErrorAs(t, err, &r)
		assert.Equal(t, "TOO_MANY_KEYS", r.String())
		assert.NotContains(t, err.Error(), `"c"`, "keys never appear in errors")
		assert.Equal(t, uint64(1), g.Stats().RefusedKeys)

		// Joining a running load needs no key slot.
		joined := do(g, t.Context(), "a", l.fn)
		synctest.Wait()
		assert.Equal(t, uint64(1), g.Stats().Joins)

		ca.ret <- "A"
		cb.ret <- "B"
		synctest.Wait()
		assert.Equal(t, outcome{v: "A"}, ready(t, a))
		assert.Equal(t, outcome{v: "A", shared: true}, ready(t, joined))
		assert.Equal(t, outcome{v: "B"}, ready(t, b))

		assert.Equal(t, outcome{v: "C"}, loadThrough(t, g, l, "c", "C"))
		assertIdle(t, g)
	})
}

func TestLoadTimeoutEndsTheLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.LoadTimeout = 5 * time.Second
		g := newGroup(t, cfg)
		l := newLoader(true)
		start := time.Now()
		// context.Background: no caller deadline; LoadTimeout alone bounds the wait.
		outs := []<-chan outcome{do(g, context.Background(), "k", l.fn), do(g, context.Background(), "k", l.fn)}
		synctest.Wait()
		call := l.next(t)
		deadline, ok := call.ctx.Deadline()
		require.True(t, ok)
		assert.Equal(t, start.Add(5*time.Second), deadline)

		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.ErrorIs(t, call.ctx.Err(), context.DeadlineExceeded)
		assert.Equal(t, flight.ErrLoadTimeout, context.Cause(call.ctx))
		for _, ch := range outs {
			o := ready(t, ch)
			require.ErrorIs(t, o.err, flight.ErrLoadTimeout)
			assert.ErrorIs(t, o.err, context.DeadlineExceeded)
			assert.NotErrorIs(t, o.err, flight.ErrOverloaded)
			assert.Empty(t, o.v)
		}
		assert.Equal(t, uint64(1), g.Stats().TimedOut)
		assertIdle(t, g)
	})
}

// A loader that ignores its context cannot hold callers past LoadTimeout,
// and it keeps its key slot until it returns; its late value is discarded.
func TestLoadTimeoutWithLoaderIgnoringContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.MaxKeys = 2
		cfg.LoadTimeout = 5 * time.Second
		g := newGroup(t, cfg)
		l := newLoader(false)
		start := time.Now()
		out := do(g, context.Background(), "k", l.fn)
		synctest.Wait()
		stuck := l.next(t)

		time.Sleep(5 * time.Second)
		synctest.Wait()
		o := ready(t, out)
		require.ErrorIs(t, o.err, flight.ErrLoadTimeout)
		assert.Equal(t, 5*time.Second, time.Since(start), "callers return at the deadline, not when fn does")
		s := g.Stats()
		assert.Equal(t, 0, s.InFlight, "the key is free")
		assert.Equal(t, 1, s.Running, "the stuck loader still runs")
		assert.Equal(t, uint64(1), s.TimedOut)

		// The key is free for a fresh load; the stuck one holds a slot.
		fresh := do(g, context.Background(), "k", l.fn)
		synctest.Wait()
		freshCall := l.next(t)
		_, _, err := g.Do(context.Background(), "other", l.fn)
		require.ErrorIs(t, err, flight.ErrTooManyKeys, "two loads run: the stuck one counts")

		stuck.ret <- "late"
		synctest.Wait()
		pending(t, fresh)
		freshCall.ret <- "fresh"
		synctest.Wait()
		assert.Equal(t, outcome{v: "fresh"}, ready(t, fresh))
		assert.Equal(t, uint64(1), g.Stats().TimedOut)
		assertIdle(t, g)
	})
}

func TestCallerLeavingDoesNotCancelLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, testConfig())
		l := newLoader(true)
		type traceKey struct{}
		// The starting caller has a short deadline and a value.
		actx, cancelA := context.WithTimeout(context.WithValue(t.Context(), traceKey{}, "trace-1"), time.Second)
		defer cancelA()
		start := time.Now()
		a := do(g, actx, "k", l.fn)
		synctest.Wait()
		b := do(g, t.Context(), "k", l.fn)
		synctest.Wait()
		call := l.next(t)
		assert.Equal(t, "trace-1", call.ctx.Value(traceKey{}), "values of the starting caller are kept")
		deadline, _ := call.ctx.Deadline()
		assert.Equal(t, start.Add(time.Minute), deadline, "LoadTimeout, not the caller's deadline")

		cancelA()
		synctest.Wait()
		oa := ready(t, a)
		require.ErrorIs(t, oa.err, context.Canceled)
		assert.False(t, oa.shared)
		require.NoError(t, call.ctx.Err(), "the load goes on for the other caller")
		s := g.Stats()
		assert.Equal(t, 1, s.Waiters)
		assert.Zero(t, s.Abandoned)

		call.ret <- "v"
		synctest.Wait()
		assert.Equal(t, outcome{v: "v", shared: true}, ready(t, b))
		assertIdle(t, g)
	})
}

func TestAbandonedLoadIsReaped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, testConfig())
		l := newLoader(false) // a loader that does not stop: its result comes late
		actx, cancelA := context.WithCancel(t.Context())
		bctx, cancelB := context.WithCancel(t.Context())
		a, b := do(g, actx, "k", l.fn), do(g, bctx, "k", l.fn)
		synctest.Wait()
		old := l.next(t)

		cancelA()
		synctest.Wait()
		require.ErrorIs(t, ready(t, a).err, context.Canceled)
		require.NoError(t, old.ctx.Err(), "one caller is still attached")

		cancelB()
		synctest.Wait()
		require.ErrorIs(t, ready(t, b).err, context.Canceled)
		require.ErrorIs(t, old.ctx.Err(), context.Canceled, "the last caller gone: the load is cancelled")
		assert.Equal(t, flight.ErrAbandoned, context.Cause(old.ctx))
		s := g.Stats()
		assert.Equal(t, uint64(1), s.Abandoned)
		assert.Equal(t, 0, s.InFlight, "the key is free at once")
		assert.Equal(t, 1, s.Running, "fn has not returned yet")

		c := do(g, t.Context(), "k", l.fn)
		synctest.Wait()
		fresh := l.next(t)
		assert.Equal(t, uint64(2), g.Stats().Loads, "a later caller starts a fresh load")
		old.ret <- "late"
		synctest.Wait()
		pending(t, c)
		fresh.ret <- "fresh"
		synctest.Wait()
		assert.Equal(t, outcome{v: "fresh"}, ready(t, c), "the abandoned load's late result is discarded")
		assertIdle(t, g)
	})
}

func TestPanicReachesEveryCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, testConfig())
		boom := errors.New("boom")
		release := make(chan struct{})
		fn := func(context.Context) (string, error) {
			<-release
			panic(boom)
		}
		const n = 10
		outs := make([]<-chan outcome, n)
		for i := range outs {
			outs[i] = do(g, t.Context(), "k", fn)
		}
		synctest.Wait()
		close(release)
		synctest.Wait()
		for _, ch := range outs {
			o := ready(t, ch)
			var pe *flight.PanicError
			require.ErrorAs(t, o.err, &pe)
			assert.Equal(t, boom, pe.Value)
			assert.Contains(t, string(pe.Stack), "flight_test.TestPanicReachesEveryCaller")
			assert.Equal(t, "cache flight: the load panicked (*errors.errorString)", pe.Error(), "the value's type, never its text")
		}
		assert.Equal(t, uint64(1), g.Stats().Panics)
		assertIdle(t, g)

		// The Group and the process go on.
		v, _, err := g.Do(t.Context(), "k", func(context.Context) (string, error) { return "ok", nil })
		require.NoError(t, err)
		assert.Equal(t, "ok", v)
	})
}

func TestGoexitReachesEveryCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, testConfig())
		_, _, err := g.Do(t.Context(), "k", func(context.Context) (string, error) {
			runtime.Goexit()
			return "", nil
		})
		var pe *flight.PanicError
		require.ErrorAs(t, err, &pe)
		assert.Nil(t, pe.Value)
		assert.Contains(t, pe.Error(), "Goexit")
		assert.Equal(t, uint64(1), g.Stats().Panics)
		assertIdle(t, g)
	})
}

func TestCloseCancelsAndWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := flight.New[string, string](testConfig())
		require.NoError(t, err)
		// Loads that see their context end but take their time to return.
		causes := make(chan error, 2)
		rets := make(chan chan struct{}, 2)
		fn := func(ctx context.Context) (string, error) {
			ret := make(chan struct{})
			rets <- ret
			<-ctx.Done()
			causes <- context.Cause(ctx)
			<-ret
			return "late", nil
		}
		a, b := do(g, t.Context(), "a", fn), do(g, t.Context(), "b", fn)
		synctest.Wait()

		closed := make(chan struct{})
		go func() {
			g.Close()
			close(closed)
		}()
		synctest.Wait()
		for _, ch := range []<-chan outcome{a, b} {
			o := ready(t, ch)
			require.ErrorIs(t, o.err, flight.ErrClosed, "attached callers are released at once")
			assert.Empty(t, o.v)
		}
		assert.Equal(t, flight.ErrClosed, <-causes)
		assert.Equal(t, flight.ErrClosed, <-causes)
		select {
		case <-closed:
			t.Fatal("Close returned while loads still run")
		default:
		}
		_, _, err = g.Do(t.Context(), "c", func(context.Context) (string, error) { return "", nil })
		require.ErrorIs(t, err, flight.ErrClosed)
		assert.Equal(t, uint64(1), g.Stats().RefusedClosed)

		close(<-rets)
		close(<-rets)
		synctest.Wait()
		select {
		case <-closed:
		default:
			t.Fatal("Close did not return after the loads did")
		}
		assertIdle(t, g)
		g.Close() // idempotent
	})
}

func TestEndedCallerStartsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroup(t, testConfig())
		l := newLoader(true)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, _, err := g.Do(ctx, "k", l.fn)
		require.ErrorIs(t, err, context.Canceled)
		assert.Zero(t, g.Stats().Loads)
		assert.Zero(t, l.n.Load())
	})
}

// The value and error fn returns reach every caller unchanged.
func TestErrorIsShared(t *testing.T) {
	g := newGroup(t, testConfig())
	sentinel := errors.New("source said no")
	_, _, err := g.Do(t.Context(), "k", func(context.Context) (string, error) { return "", sentinel })
	require.Equal(t, sentinel, err)
	assertIdle(t, g)
}

func TestConfigValidation(t *testing.T) {
	ok := testConfig()
	for _, tc := range []struct {
		name   string
		mutate func(*flight.Config)
		want   flight.Reason
	}{
		{"no keys", func(c *flight.Config) { c.MaxKeys = 0 }, flight.ErrKeysOutOfRange},
		{"too many keys", func(c *flight.Config) { c.MaxKeys = flight.MaxKeysLimit + 1 }, flight.ErrKeysOutOfRange},
		{"no waiters", func(c *flight.Config) { c.MaxWaiters = 0 }, flight.ErrWaitersOutOfRange},
		{"too many waiters", func(c *flight.Config) { c.MaxWaiters = flight.MaxWaitersLimit + 1 }, flight.ErrWaitersOutOfRange},
		{"no timeout", func(c *flight.Config) { c.LoadTimeout = 0 }, flight.ErrLoadTimeoutOutOfRange},
		{"timeout too short", func(c *flight.Config) { c.LoadTimeout = time.Microsecond }, flight.ErrLoadTimeoutOutOfRange},
		{"timeout too long", func(c *flight.Config) { c.LoadTimeout = flight.MaxLoadTimeout + 1 }, flight.ErrLoadTimeoutOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			g, err := flight.New[string, string](c)
			require.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, err, flight.ErrInvalid)
			assert.NotErrorIs(t, err, flight.ErrOverloaded)
			assert.Nil(t, g)
		})
	}
	require.NoError(t, ok.Validate())
	_, err := flight.New[string, int](flight.Config{MaxKeys: flight.MaxKeysLimit, MaxWaiters: flight.MaxWaitersLimit, LoadTimeout: flight.MaxLoadTimeout})
	require.NoError(t, err, "the limits themselves are valid")
}

func TestReasons(t *testing.T) {
	names := map[string]bool{}
	overloaded, invalid := 0, 0
	for _, r := range flight.Reasons() {
		require.True(t, r.Valid())
		assert.False(t, names[r.String()], "duplicate name %s", r)
		names[r.String()] = true
		assert.Equal(t, strings.ToUpper(r.String()), r.String())
		assert.Equal(t, "cache flight: "+r.String(), r.Error())
		if errors.Is(r, flight.ErrOverloaded) {
			overloaded++
		}
		if errors.Is(r, flight.ErrInvalid) {
			invalid++
		}
		assert.False(t, errors.Is(r, flight.ErrOverloaded) && errors.Is(r, flight.ErrInvalid))
	}
	assert.Equal(t, 4, overloaded)
	assert.Equal(t, 5, invalid)
	assert.Len(t, flight.Reasons(), 13)
	assert.False(t, flight.Reason(0).Valid())
	assert.Equal(t, "INVALID_REASON", flight.Reason(0).String())
	assert.Equal(t, "INVALID_REASON", flight.Reason(200).String())
	assert.Equal(t, "cache flight: overloaded", flight.ErrOverloaded.Error())
	assert.Equal(t, "cache flight: invalid configuration", flight.ErrInvalid.Error())
}

// TestStress runs many callers over few keys with no scheduling help. It
// asserts what must hold under every interleaving: without cancellations
// at most one fn per key runs at a time and every caller gets its key's
// value; with callers leaving at random, everything drains.
func TestStress(t *testing.T) {
	const goroutines, calls, keys = 16, 200, 4
	t.Run("no cancellations", func(t *testing.T) {
		g := newGroup(t, flight.Config{MaxKeys: keys, MaxWaiters: goroutines, LoadTimeout: time.Minute})
		var running [keys]atomic.Int32
		var wg sync.WaitGroup
		for i := range goroutines {
			wg.Go(func() {
				for j := range calls {
					k := (i + j) % keys
					v, _, err := g.Do(t.Context(), strconv.Itoa(k), func(context.Context) (string, error) {
						if running[k].Add(1) != 1 {
							t.Error("two loads of one key at once")
						}
						runtime.Gosched()
						running[k].Add(-1)
						return strconv.Itoa(k), nil
					})
					if err != nil || v != strconv.Itoa(k) {
						t.Errorf("key %d: %q %v", k, v, err)
						return
					}
				}
			})
		}
		wg.Wait()
		assertIdle(t, g)
		s := g.Stats()
		assert.Equal(t, uint64(goroutines*calls), s.Loads+s.Joins)
	})
	t.Run("callers leaving", func(t *testing.T) {
		g, err := flight.New[string, string](flight.Config{MaxKeys: keys * 2, MaxWaiters: goroutines, LoadTimeout: time.Minute})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for i := range goroutines {
			wg.Go(func() {
				for j := range calls {
					ctx, cancel := context.WithCancel(t.Context())
					if j%3 == 0 {
						go cancel()
					}
					_, _, err := g.Do(ctx, strconv.Itoa((i+j)%keys), func(ctx context.Context) (string, error) {
						runtime.Gosched()
						return "v", ctx.Err()
					})
					cancel()
					if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, flight.ErrTooManyKeys) {
						t.Errorf("unexpected error: %v", err)
					}
				}
			})
		}
		wg.Wait()
		g.Close()
		assertIdle(t, g)
	})
}
