package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/flight"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// TestStampedeOneLoadPerProcess: N goroutines missing one cold key share
// one source load; the single-flight map is empty afterwards.
func TestStampedeOneLoadPerProcess(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), newClock(), nil)
	r := in.region(t, "items")
	rg := in.c.state.Load().regions["items"]
	ctx, key := ctxT(t), Parts("cold")
	const n = 64
	var loads atomic.Int32
	release := make(chan struct{})
	results := make([]Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.GetOrLoad(ctx, key, func(ctx context.Context) (LoadOutcome, error) {
				loads.Add(1)
				if !await(ctx, release) {
					return Cancelled(), nil
				}
				return Loaded([]byte("value"), SourceRevision(1)), nil
			})
			assert.NoError(t, err)
			results[i] = res
		}()
	}
	// Release the load only once every caller is attached to it.
	require.Eventually(t, func() bool { return rg.flight.Stats().Waiters == n }, 20*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	assert.Equal(t, int32(1), loads.Load())
	shared := 0
	for _, res := range results {
		assert.Equal(t, LoadedFromSource, res.Kind)
		assert.Equal(t, []byte("value"), res.Value)
		if res.Shared {
			shared++
		}
	}
	assert.Equal(t, n-1, shared)
	assert.Zero(t, rg.flight.Stats().InFlight, "the single-flight map never becomes a cache")
	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Hit, lk.Kind)
}

// TestStampedeOneLoadAcrossInstances: two hosts, 16 callers each, on one
// cold key: one source load in all, through the refresh lease; the host
// that did not get the lease waits, bounded, and reads the holder's value.
func TestStampedeOneLoadAcrossInstances(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	cfg := testConfig(t, func(_ *policy.CacheRegionDecl, o *policy.CacheOps) {
		o.LeaseTTL, o.LeaseWait = 10*time.Second, 10*time.Second
	})
	clk := newClock()
	ins := []*instance{newInstance(t, topo, cfg, clk, nil), newInstance(t, topo, cfg, clk, nil)}
	contended := func() float64 {
		sum := 0.0
		for _, in := range ins {
			sum += metric(t, in.reg, "caphost_cache_refresh_leases_total", map[string]string{"region": "items", "result": "contended"})
		}
		return sum
	}
	ctx, key := ctxT(t), Parts("hot")
	var loads atomic.Int32
	var wg sync.WaitGroup
	for _, in := range ins {
		r := in.region(t, "items")
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := r.GetOrLoad(ctx, key, func(ctx context.Context) (LoadOutcome, error) {
					loads.Add(1)
					// Hold the load until the other host found the lease taken.
					for contended() < 1 {
						time.Sleep(time.Millisecond)
					}
					return Loaded([]byte("hot"), SourceRevision(1)), nil
				})
				assert.NoError(t, err)
				assert.Equal(t, []byte("hot"), res.Value)
			}()
		}
	}
	wg.Wait()
	assert.Equal(t, int32(1), loads.Load(), "one source load across both hosts")
	assert.Equal(t, 1.0, contended())
}

// startHeldRefresh starts a GetOrLoad of key on r whose loader holds
// until release is called, then answers v2 at revision 2, and returns once
// the loader runs. done delivers the refresher's result; loads counts the
// loader's calls.
func startHeldRefresh(t *testing.T, ctx context.Context, r *Region, key Key) (release func(), done <-chan Result, loads *atomic.Int32) {
	t.Helper()
	started, held := make(chan struct{}), make(chan struct{})
	out := make(chan Result, 1)
	loads = new(atomic.Int32)
	go func() {
		res, err := r.GetOrLoad(ctx, key, func(ctx context.Context) (LoadOutcome, error) {
			loads.Add(1)
			close(started)
			if !await(ctx, held) {
				return Cancelled(), nil
			}
			return Loaded([]byte("v2"), SourceRevision(2)), nil
		})
		assert.NoError(t, err)
		out <- res
	}()
	<-started
	var once sync.Once
	return func() { once.Do(func() { close(held) }) }, out, loads
}

// mustNotLoad is a loader a test expects never to run.
func mustNotLoad(t *testing.T, why string) Loader {
	return func(context.Context) (LoadOutcome, error) {
		t.Error(why)
		return Loaded(nil, Revision{}), nil
	}
}

// TestStaleWhileRevalidateAcrossInstances: while one host refreshes a
// stale hot key under the lease, the other serves the stale value at once.
func TestStaleWhileRevalidateAcrossInstances(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	clk := newClock()
	a := newInstance(t, topo, testConfig(t, nil), clk, nil).region(t, "items")
	b := newInstance(t, topo, testConfig(t, nil), clk, nil).region(t, "items")
	ctx, key := ctxT(t), Parts("swr")
	_, err := a.Record(ctx, key, []byte("v1"), RecordMeta{})
	require.NoError(t, err)
	clk.Advance(11 * time.Second) // past the soft TTL, before the hard one

	release, done, _ := startHeldRefresh(t, ctx, a, key)
	res, err := b.GetOrLoad(ctx, key, mustNotLoad(t, "the contender must not load"))
	require.NoError(t, err)
	assert.Equal(t, StaleHit, res.Kind)
	assert.Equal(t, []byte("v1"), res.Value)
	assert.Greater(t, res.StaleAge, time.Duration(0))
	release()
	res = <-done
	assert.Equal(t, LoadedFromSource, res.Kind)
	assert.Equal(t, Recorded, res.Record)
	lk, err := b.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Fresh, lk.Freshness)
	assert.Equal(t, []byte("v2"), lk.Value)
}

// TestSourceOutcomes covers every loader outcome against a missing and a
// stale entry: negative caching only for an authoritative absence,
// stale-if-error only for a transient failure and only before the hard
// expiry, nothing cached for a failure, an unclassified error or a panic
// passed on as they are.
func TestSourceOutcomes(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clk := newClock()
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), clk, nil)
	r := in.region(t, "items")
	noSIE := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, func(d *policy.CacheRegionDecl, _ *policy.CacheOps) {
		d.StaleIfError = false
	}), clk, nil).region(t, "items")
	boom := errors.New("boom")
	load := func(o LoadOutcome, err error) Loader {
		return func(context.Context) (LoadOutcome, error) { return o, err }
	}
	ctx := ctxT(t)
	i := 0
	fresh := func() Key { i++; return Parts("outcome", fmt.Sprint(i)) }
	stale := func(rg *Region) Key {
		k := fresh()
		_, err := rg.Record(ctx, k, []byte("old"), RecordMeta{})
		require.NoError(t, err)
		return k
	}

	k := fresh()
	res, err := r.GetOrLoad(ctx, k, load(AuthoritativeAbsent("not-found", Revision{}), nil))
	require.NoError(t, err)
	assert.Equal(t, AuthoritativeAbsence, res.Kind)
	assert.Equal(t, Recorded, res.Record)
	res, err = r.GetOrLoad(ctx, k, load(Loaded([]byte("x"), Revision{}), nil))
	require.NoError(t, err)
	assert.Equal(t, AuthoritativeAbsence, res.Kind, "the negative entry answers")
	assert.True(t, res.FromCache)

	for name, o := range map[string]LoadOutcome{
		"transient": TransientFailure("timeout", boom),
		"permanent": PermanentFailure("bad-request", boom),
		"cancelled": Cancelled(),
	} {
		k := fresh()
		_, err := r.GetOrLoad(ctx, k, load(o, nil))
		var se *SourceError
		require.ErrorAs(t, err, &se, name)
		lk, err := r.Lookup(ctx, k)
		require.NoError(t, err)
		assert.Equal(t, Miss, lk.Kind, "%s is never cached", name)
	}

	k = fresh()
	_, err = r.GetOrLoad(ctx, k, load(LoadOutcome{}, boom))
	assert.Same(t, boom, err, "an unclassified error is passed on as it is")
	_, err = r.GetOrLoad(ctx, k, func(context.Context) (LoadOutcome, error) { panic("loader bug") })
	var pe *flight.PanicError
	assert.ErrorAs(t, err, &pe)
	lk, err := r.Lookup(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind)

	// Stale entries: only a transient failure falls back, only with
	// stale-if-error, only before the hard expiry.
	ks, kp, kn := stale(r), stale(r), stale(noSIE)
	clk.Advance(11 * time.Second)
	res, err = r.GetOrLoad(ctx, ks, load(TransientFailure("timeout", boom), nil))
	require.NoError(t, err)
	assert.Equal(t, StaleFallback, res.Kind)
	assert.Equal(t, []byte("old"), res.Value)
	_, err = r.GetOrLoad(ctx, kp, load(PermanentFailure("gone", boom), nil))
	assert.Error(t, err, "a permanent failure never serves stale data")
	_, err = noSIE.GetOrLoad(ctx, kn, load(TransientFailure("timeout", boom), nil))
	assert.Error(t, err, "no stale-if-error without the region's consent")
	clk.Advance(time.Minute)
	_, err = r.GetOrLoad(ctx, ks, load(TransientFailure("timeout", boom), nil))
	assert.Error(t, err, "never past the hard expiry")
	clk.Advance(-time.Minute - 11*time.Second)
}

// TestSingleFlightAndBulkheadBounds: one waiter too many and one load too
// many are overloads, never unbounded queues; a stale value stands in
// where there is one.
func TestSingleFlightAndBulkheadBounds(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clk := newClock()
	cfg := testConfig(t, func(_ *policy.CacheRegionDecl, o *policy.CacheOps) {
		o.FlightWaiters, o.SourceLoads, o.SourceQueued = 2, 1, 0
		o.LeaseWait = 0
		// Only release ends the held load, never the test deadline (2 s);
		// the refresh lease covers the load.
		o.LoadTimeout, o.LeaseTTL = time.Minute, time.Minute
	})
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, cfg, clk, nil)
	r := in.region(t, "items")
	rg := in.c.state.Load().regions["items"]
	ctx := ctxT(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	slow := func(ctx context.Context) (LoadOutcome, error) {
		select {
		case <-release:
			return Loaded([]byte("v"), Revision{}), nil
		case <-ctx.Done():
			return Cancelled(), nil
		}
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.GetOrLoad(ctx, Parts("busy"), slow)
			assert.NoError(t, err)
		}()
	}
	// Both callers joined the flight and its load holds the bulkhead's one
	// permit: the leader's lookup comes first, so on a loaded runner the
	// waiters can be counted before the load has started.
	require.Eventually(t, func() bool {
		return rg.flight.Stats().Waiters == 2 && rg.source.Stats().InUse == 1
	}, 10*time.Second, time.Millisecond)
	_, err := r.GetOrLoad(ctx, Parts("busy"), slow)
	var oe *OverloadError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "flight-waiters", oe.Reason)
	_, err = r.GetOrLoad(ctx, Parts("other"), slow)
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "source-full", oe.Reason, "one source load at a time, no queue")
	assert.Equal(t, 2.0, metric(t, in.reg, "caphost_cache_get_or_load_total", map[string]string{"region": "items", "result": "overloaded"}))
	assert.Equal(t, 1.0, metric(t, in.reg, "caphost_cache_single_flight_events_total", map[string]string{"region": "items", "event": "refused_waiters"}))

	_, err = r.Record(ctx, Parts("stale"), []byte("old"), RecordMeta{})
	require.NoError(t, err)
	clk.Advance(11 * time.Second)
	res, err := r.GetOrLoad(ctx, Parts("stale"), slow)
	require.NoError(t, err)
	assert.Equal(t, StaleFallback, res.Kind, "a full bulkhead serves stale where it can")
	clk.Advance(-11 * time.Second)
	once.Do(func() { close(release) })
	wg.Wait()

	// Serving stale on a full bulkhead is stale-if-error: a region that
	// does not allow it gets the overload.
	noSIE := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, func(d *policy.CacheRegionDecl, o *policy.CacheOps) {
		d.StaleIfError = false
		o.SourceLoads, o.SourceQueued, o.LeaseWait, o.LoadTimeout, o.LeaseTTL = 1, 0, 0, time.Minute, time.Minute
	}), clk, nil)
	nr := noSIE.region(t, "items")
	held := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-held:
		default:
			close(held)
		}
	})
	_, err = nr.Record(ctx, Parts("stale-2"), []byte("old"), RecordMeta{})
	require.NoError(t, err)
	busy := make(chan error, 1)
	go func() {
		_, err := nr.GetOrLoad(ctx, Parts("busy-2"), func(ctx context.Context) (LoadOutcome, error) {
			if !await(ctx, held) {
				return Cancelled(), nil
			}
			return Loaded([]byte("v"), Revision{}), nil
		})
		busy <- err
	}()
	nrg := noSIE.c.state.Load().regions["items"]
	require.Eventually(t, func() bool { return nrg.source.Stats().InUse == 1 }, 10*time.Second, time.Millisecond)
	clk.Advance(11 * time.Second)
	_, err = nr.GetOrLoad(ctx, Parts("stale-2"), slow)
	require.ErrorAs(t, err, &oe, "no stale-if-error: a full bulkhead is an overload")
	assert.Equal(t, "source-full", oe.Reason)
	clk.Advance(-11 * time.Second)
	close(held)
	require.NoError(t, <-busy)
}

// TestSingleFlightKeysBound: while the single-flight's every key is
// loading, GetOrLoad of another key is refused as OVERLOADED (flight-keys)
// without running its loader, and counted; a stale value stands in where
// the region allows stale-if-error, as for a full source bulkhead.
func TestSingleFlightKeysBound(t *testing.T) {
	srv := redistest.StartStandalone(t)
	for _, sie := range []bool{true, false} {
		t.Run(fmt.Sprintf("stale-if-error=%t", sie), func(t *testing.T) {
			clk := newClock()
			in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, func(d *policy.CacheRegionDecl, o *policy.CacheOps) {
				d.StaleIfError = sie
				o.FlightKeys = 1
				o.LoadTimeout, o.LeaseTTL = time.Minute, time.Minute // only release ends the held load
			}), clk, nil)
			r := in.region(t, "items")
			ctx, stale := ctxT(t), Parts(fmt.Sprint("stale-", sie))
			_, err := r.Record(ctx, stale, []byte("old"), RecordMeta{})
			require.NoError(t, err)
			release, done, _ := startHeldRefresh(t, ctx, r, Parts(fmt.Sprint("held-", sie)))
			t.Cleanup(release)

			_, err = r.GetOrLoad(ctx, Parts("other"), mustNotLoad(t, "a refused key must not load"))
			var oe *OverloadError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "flight-keys", oe.Reason)
			assert.ErrorIs(t, err, ErrOverloaded)
			clk.Advance(11 * time.Second) // past the soft TTL, before the hard one
			res, err := r.GetOrLoad(ctx, stale, mustNotLoad(t, "a refused refresh must not load"))
			overloaded := 1.0
			if sie {
				require.NoError(t, err)
				assert.Equal(t, StaleFallback, res.Kind, "a full single-flight serves stale where it can")
				assert.Equal(t, []byte("old"), res.Value)
				assert.Equal(t, 1.0, metric(t, in.reg, "caphost_cache_stale_served_total", map[string]string{"region": "items", "reason": "overload"}))
			} else {
				require.ErrorAs(t, err, &oe, "no stale-if-error: a full single-flight is an overload")
				assert.Equal(t, "flight-keys", oe.Reason)
				overloaded++
			}
			assert.Equal(t, overloaded, metric(t, in.reg, "caphost_cache_get_or_load_total", map[string]string{"region": "items", "result": "overloaded"}))
			assert.Equal(t, 2.0, metric(t, in.reg, "caphost_cache_single_flight_events_total", map[string]string{"region": "items", "event": "refused_keys"}))
			clk.Advance(-11 * time.Second)
			release()
			assert.Equal(t, LoadedFromSource, (<-done).Kind)
		})
	}
}

// TestStaleWhileRevalidateWithinInstance: on the host that refreshes a
// stale key, only the caller that started the refresh waits for it; the
// others get the stale value at once, under either stampede strategy.
func TestStaleWhileRevalidateWithinInstance(t *testing.T) {
	srv := redistest.StartStandalone(t)
	for _, st := range []policy.CacheStampede{policy.CacheStampedeLocal, policy.CacheStampedeDistributed} {
		t.Run(string(st), func(t *testing.T) {
			clk := newClock()
			in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, func(d *policy.CacheRegionDecl, _ *policy.CacheOps) {
				d.Stampede = st
			}), clk, nil)
			r := in.region(t, "items")
			rg := in.c.state.Load().regions["items"]
			ctx, key := ctxT(t), Parts("swr-local-"+string(st))
			_, err := r.Record(ctx, key, []byte("v1"), RecordMeta{})
			require.NoError(t, err)
			clk.Advance(11 * time.Second) // past the soft TTL, before the hard one

			release, done, loads := startHeldRefresh(t, ctx, r, key)
			for range 3 {
				res, err := r.GetOrLoad(ctx, key, mustNotLoad(t, "a caller behind the refresh must not load"))
				require.NoError(t, err)
				assert.Equal(t, StaleHit, res.Kind, "served stale, not queued behind the refresh")
				assert.Equal(t, []byte("v1"), res.Value)
				assert.Greater(t, res.StaleAge, time.Duration(0))
			}
			assert.Equal(t, uint64(3), rg.flight.Stats().Skips)
			assert.Equal(t, uint64(0), rg.flight.Stats().Joins)
			release()
			res := <-done
			assert.Equal(t, LoadedFromSource, res.Kind)
			assert.Equal(t, int32(1), loads.Load())
			res, err = r.GetOrLoad(ctx, key, mustNotLoad(t, "refreshed: no load"))
			require.NoError(t, err)
			assert.Equal(t, FreshHit, res.Kind)
			assert.Equal(t, []byte("v2"), res.Value)
		})
	}
}

// TestRedisDownServesFromSource: with Redis gone a lookup is Unavailable
// (never a miss) and GetOrLoad answers from the source, degraded, without
// writing.
func TestRedisDownServesFromSource(t *testing.T) {
	srv := redistest.StartStandalone(t)
	r := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), newClock(), nil).region(t, "items")
	ctx := ctxT(t)
	_, err := r.Record(ctx, Parts("k"), []byte("v"), RecordMeta{})
	require.NoError(t, err)
	srv.Kill()
	lk, err := r.Lookup(ctx, Parts("k"))
	require.NoError(t, err)
	assert.Equal(t, Unavailable, lk.Kind)
	assert.Equal(t, Down, lk.Unavailable)
	res, err := r.GetOrLoad(ctx, Parts("k"), func(context.Context) (LoadOutcome, error) {
		return Loaded([]byte("from-source"), Revision{}), nil
	})
	require.NoError(t, err)
	assert.Equal(t, DegradedSource, res.Kind)
	assert.Equal(t, []byte("from-source"), res.Value)
	o, err := r.Record(ctx, Parts("k"), []byte("v"), RecordMeta{})
	require.NoError(t, err)
	assert.Contains(t, []RecordOutcome{DegradedUnavailable, Indeterminate}, o)
}

// TestRedisOverloadedIsUnavailable: while the deployment's in-flight
// bound is taken (one slot, held by a lookup whose reply is stalled), a
// lookup is Unavailable(OVERLOADED) and never sent, and GetOrLoad answers
// from the source, degraded; both lookups are counted as "overloaded".
func TestRedisOverloadedIsUnavailable(t *testing.T) {
	srv := redistest.StartStandalone(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	// Only the stall ends the held read: a command timeout far beyond the
	// test, a short wait for a slot.
	rt := newRuntimeWith(t, &policy.Standalone{Endpoint: proxy.Addr()}, policy.Budgets{MaxRequestBytes: 2 << 20, MaxReplyBytes: 2 << 20},
		20*time.Second, func(d *policy.Deployment) {
			d.Lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 1, MaxInFlight: 1}
			d.Timeouts.Acquire, d.Timeouts.Shutdown = 100*time.Millisecond, d.Timeouts.Command
		})
	in := newInstanceOn(t, rt, testConfig(t, nil), newClock(), nil)
	r := in.region(t, "items")
	ctx, key := ctxT(t), Parts("k")
	_, err := r.Record(ctx, key, []byte("v"), RecordMeta{})
	require.NoError(t, err)
	lk, err := r.Lookup(ctx, key) // the regular lane's one connection is open
	require.NoError(t, err)
	require.Equal(t, Hit, lk.Kind)

	proxy.Stall()
	up, _ := proxy.Bytes()
	held := make(chan error, 1)
	go func() {
		_, err := r.Lookup(ctx, key)
		held <- err
	}()
	require.Eventually(t, func() bool { n, _ := proxy.Bytes(); return n > up }, 10*time.Second, time.Millisecond,
		"the held lookup never took the slot")
	up, _ = proxy.Bytes()

	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err, "an overload is an outcome, not an error")
	assert.Equal(t, Unavailable, lk.Kind)
	assert.Equal(t, Overloaded, lk.Unavailable)
	assert.Equal(t, certainty.OverloadedBeforeSend, lk.Certainty)
	res, err := r.GetOrLoad(ctx, key, func(context.Context) (LoadOutcome, error) {
		return Loaded([]byte("from-source"), Revision{}), nil
	})
	require.NoError(t, err)
	assert.Equal(t, DegradedSource, res.Kind)
	assert.Equal(t, Unavailable, res.Lookup)
	assert.Equal(t, []byte("from-source"), res.Value)
	sent, _ := proxy.Bytes()
	assert.Equal(t, up, sent, "nothing was sent past the bound")
	assert.Equal(t, 2.0, metric(t, in.reg, "caphost_cache_lookups_total", map[string]string{"region": "items", "outcome": "overloaded"}))
	assert.Zero(t, metric(t, in.reg, "caphost_cache_lookups_total", map[string]string{"region": "items", "outcome": "unavailable"}))
	assert.Equal(t, 1.0, metric(t, in.reg, "caphost_cache_get_or_load_total", map[string]string{"region": "items", "result": "DEGRADED_SOURCE"}))

	proxy.Passthrough()
	require.NoError(t, <-held)
}

// TestRedisDownBulkheadProtectsTheSource: with Redis down every lookup
// would become a source load; the bulkhead still bounds them. Callers of
// one key share a load, two loads run, one waits in the queue and every
// other key is refused as an overload while they hold.
func TestRedisDownBulkheadProtectsTheSource(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, func(_ *policy.CacheRegionDecl, o *policy.CacheOps) {
		o.SourceLoads, o.SourceQueued = 2, 1
		o.LoadTimeout, o.LeaseTTL = time.Minute, time.Minute // only release ends the held loads
	}), newClock(), nil)
	r := in.region(t, "items")
	rg := in.c.state.Load().regions["items"]
	ctx := ctxT(t)
	srv.Kill()

	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var loads atomic.Int32
	held := func(ctx context.Context) (LoadOutcome, error) {
		loads.Add(1)
		if !await(ctx, release) {
			return Cancelled(), nil
		}
		return Loaded([]byte("from-source"), Revision{}), nil
	}
	type answer struct {
		res Result
		err error
	}
	answers := make(chan answer, 5)
	call := func(key string) {
		res, err := r.GetOrLoad(ctx, Parts(key), held)
		answers <- answer{res, err}
	}
	go call("a")
	go call("b")
	require.Eventually(t, func() bool { return rg.source.Stats().InUse == 2 }, 10*time.Second, time.Millisecond)
	go call("c")
	require.Eventually(t, func() bool { return rg.source.Stats().Queued == 1 }, 10*time.Second, time.Millisecond)
	go call("a") // joins a's load
	go call("a")
	require.Eventually(t, func() bool { return rg.flight.Stats().Joins == 2 }, 10*time.Second, time.Millisecond)

	for _, key := range []string{"d", "e", "f"} {
		_, err := r.GetOrLoad(ctx, Parts(key), held)
		var oe *OverloadError
		require.ErrorAs(t, err, &oe, "key %s", key)
		assert.Equal(t, "source-full", oe.Reason)
	}
	assert.Equal(t, int32(2), loads.Load(), "the third load is queued, the rest refused")
	once.Do(func() { close(release) })
	for range 5 {
		a := <-answers
		require.NoError(t, a.err)
		assert.Equal(t, DegradedSource, a.res.Kind)
		assert.Equal(t, []byte("from-source"), a.res.Value)
	}
	assert.Equal(t, int32(3), loads.Load(), "a, b and c: one load per key")
}
