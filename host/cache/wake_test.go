package cache

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestWaitersRegistry: one slot per key whatever the number of waiters, a
// wake closes it once, and the map empties whether waiters leave woken or
// not (it must not grow with keys nobody waits for any more).
func TestWaitersRegistry(t *testing.T) {
	var w waiters
	a, b := waitKey{region: "r", loc: [32]byte{1}}, waitKey{region: "r", loc: [32]byte{2}}
	assert.False(t, w.wake(a), "nobody waits")

	s1, s2 := w.watch(a), w.watch(a)
	require.Same(t, s1, s2)
	s3 := w.watch(b)
	assert.Equal(t, 2, w.len())

	assert.True(t, w.wake(a))
	assert.False(t, w.wake(a), "a slot is woken once")
	select {
	case <-s1.ch:
	default:
		t.Fatal("the slot was not closed")
	}
	w.unwatch(a, s1)
	// A new waiter after the wake gets a new slot, which the old slot's
	// last waiter must not remove.
	s4 := w.watch(a)
	require.NotSame(t, s1, s4)
	w.unwatch(a, s2)
	assert.Equal(t, 2, w.len())
	assert.True(t, w.wake(a))
	// rewatch leaves a woken slot and takes the key's current one in one
	// step: here a fresh slot, since the wake removed s4's.
	s5 := w.rewatch(a, s4)
	require.NotSame(t, s4, s5)
	assert.Equal(t, 2, w.len())
	w.unwatch(a, s5)

	w.unwatch(b, s3) // leaves unwoken
	assert.Zero(t, w.len())
	assert.Empty(t, w.m)
}

// slowPoll is a region whose waiters would poll only every second (the
// longest LeasePoll the policy allows), so a read before that is a wake.
func slowPoll(t testing.TB) Config {
	return testConfig(t, func(_ *policy.CacheRegionDecl, o *policy.CacheOps) {
		o.LeaseTTL, o.LeaseWait, o.LeasePoll = 10*time.Second, 10*time.Second, time.Second
	})
}

// TestRefreshWaiterWokenByLocalWrite: a caller waiting for a refresh on
// the host where the holder records is woken by that write (not by its
// poll), and gets the value.
func TestRefreshWaiterWokenByLocalWrite(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, slowPoll(t), newClock(), nil)
	r := in.region(t, "items")
	ctx, key := ctxT(t), Parts("hot")

	_, claim, token, err := r.LookupOrClaim(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, Granted, claim)

	type got struct {
		lk  Lookup
		err error
	}
	waiter := make(chan got, 1)
	go func() {
		lk, _, _, err := r.LookupOrClaim(ctx, key, 10*time.Second)
		waiter <- got{lk, err}
	}()
	require.Eventually(t, func() bool { return in.c.waiters.len() == 1 }, 10*time.Second, time.Millisecond)

	o, err := r.RecordClaimed(ctx, key, token, []byte("loaded"), false, RecordMeta{})
	require.NoError(t, err)
	require.Equal(t, Recorded, o)
	// The wake is part of the write: counted by the time it returns.
	assert.Equal(t, 1.0, metric(t, in.reg, "caphost_cache_refresh_leases_total", map[string]string{"region": "items", "result": "woken"}))
	w := <-waiter
	require.NoError(t, w.err)
	assert.Equal(t, Hit, w.lk.Kind)
	assert.Equal(t, []byte("loaded"), w.lk.Value)
	assert.Zero(t, in.c.waiters.len())
}

// TestRefreshWaiterWokenAcrossHosts: the holder's write on one host wakes
// a caller waiting on another through the key hint; GetOrLoad on both
// hosts ends with one source load and the same value.
func TestRefreshWaiterWokenAcrossHosts(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	clk := newClock()
	ia, ib := newInstance(t, topo, slowPoll(t), clk, nil), newInstance(t, topo, slowPoll(t), clk, nil)
	waitHintsUp(t, ia, ib)
	a, b := ia.region(t, "items"), ib.region(t, "items")
	ctx, key := ctxT(t), Parts("hot")

	// A slot registered on b before a writes: only a's hint can close it.
	rb, err := b.current()
	require.NoError(t, err)
	loc, err := ib.c.locate(ctx, rb, key)
	require.NoError(t, err)
	k := waitKeyOf(rb, loc)
	slot := ib.c.waiters.watch(k)

	release := make(chan struct{})
	loaded := make(chan Result, 1)
	go func() {
		res, err := a.GetOrLoad(ctx, key, func(context.Context) (LoadOutcome, error) {
			<-release
			return Loaded([]byte("hot"), SourceRevision(1)), nil
		})
		assert.NoError(t, err)
		loaded <- res
	}()
	require.Eventually(t, func() bool {
		return metric(t, ia.reg, "caphost_cache_refresh_leases_total", map[string]string{"region": "items", "result": "acquired"}) == 1
	}, 10*time.Second, time.Millisecond)
	waited := make(chan Result, 1)
	go func() {
		res, err := b.GetOrLoad(ctx, key, func(context.Context) (LoadOutcome, error) {
			t.Error("b loaded although a holds the refresh lease")
			return TransientFailure("test", nil), nil
		})
		assert.NoError(t, err)
		waited <- res
	}()
	require.Eventually(t, func() bool {
		return metric(t, ib.reg, "caphost_cache_refresh_leases_total", map[string]string{"region": "items", "result": "contended"}) == 1
	}, 10*time.Second, time.Millisecond)
	close(release)

	select {
	case <-slot.ch:
	case <-ctx.Done():
		t.Fatal("a's write never woke b's waiters")
	}
	ib.c.waiters.unwatch(k, slot)
	assert.Equal(t, []byte("hot"), (<-loaded).Value)
	res := <-waited
	assert.Equal(t, []byte("hot"), res.Value)
	assert.Equal(t, FreshHit, res.Kind, "b read a's write")
	assert.Equal(t, 1.0, metric(t, ib.reg, "caphost_cache_refresh_leases_total", map[string]string{"region": "items", "result": "woken"}))
	assert.Zero(t, metric(t, ia.reg, "caphost_cache_refresh_leases_total", map[string]string{"region": "items", "result": "woken"}),
		"a had no waiter of its own")
}
