package cache

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestGenerationTrustReadsOnlyTheEntry: once a read confirmed a shard's
// generation, lookups read only the entry (one GETRANGE, no GET) until the
// trust's age, a change of the hints' state or the host's own region
// invalidation ends it; the next read then reads the generation again.
func TestGenerationTrustReadsOnlyTheEntry(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clk := newClock()
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), clk, nil)
	waitHintsUp(t, in)
	r := in.region(t, "items")
	ctx, key := ctxT(t), Parts("trusted")
	_, err := r.Record(ctx, key, []byte("v"), RecordMeta{})
	require.NoError(t, err)

	// lookups runs n hits and reports the GETs and GETRANGEs they sent.
	lookups := func(n int) (gets, ranges int64) {
		t.Helper()
		g0, r0 := srv.CommandCalls(t, "get"), srv.CommandCalls(t, "getrange")
		for range n {
			lk, err := r.Lookup(ctx, key)
			require.NoError(t, err)
			require.Equal(t, Hit, lk.Kind)
			require.Equal(t, []byte("v"), lk.Value)
		}
		return srv.CommandCalls(t, "get") - g0, srv.CommandCalls(t, "getrange") - r0
	}
	trusted := func() float64 {
		return metric(t, in.reg, "caphost_cache_generation_reads_total", map[string]string{"generation": "trusted"})
	}

	gets, ranges := lookups(1)
	assert.Equal(t, [2]int64{1, 1}, [2]int64{gets, ranges}, "the first read reads the generation with the entry")
	gets, ranges = lookups(10)
	assert.Equal(t, [2]int64{0, 10}, [2]int64{gets, ranges}, "then only the entry, under the confirmed generation")
	assert.Equal(t, 10.0, trusted())

	// Just short of the trust, still trusted; at it, read again.
	clk.Advance(time.Second - time.Millisecond)
	gets, _ = lookups(1)
	assert.Zero(t, gets)
	clk.Advance(time.Millisecond)
	gets, _ = lookups(2)
	assert.Equal(t, int64(1), gets, "the trust's age ends it; the read renews it")

	// The hints going down and coming back end it: a hint may have been
	// lost meanwhile.
	require.NoError(t, srv.Admin().ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	waitHintsDown(t, 10*time.Second, in)
	waitHintsUp(t, in)
	gets, _ = lookups(2)
	assert.Equal(t, int64(1), gets, "no trust survives the hints' down and up")

	// The host's own region invalidation ends it too.
	_, err = r.InvalidateRegion(ctx)
	require.NoError(t, err)
	_, err = r.Record(ctx, key, []byte("v"), RecordMeta{})
	require.NoError(t, err)
	gets, _ = lookups(2)
	assert.Equal(t, int64(1), gets)
}

// TestGenerationTrustIsBounded: a region invalidation whose hint never
// arrives (host a has no hint secret, so it sends none) leaves b reading
// the old generation for at most the trust, the staleness bound the
// bounded-staleness intent documents; a strict region, or a trust of 0,
// never reads under an unconfirmed generation.
func TestGenerationTrustIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mut         func(*policy.CacheRegionDecl, *policy.CacheOps)
		staleWithin bool
	}{
		{"bounded-staleness", nil, true},
		{"read-after-invalidation", func(d *policy.CacheRegionDecl, _ *policy.CacheOps) {
			d.Consistency = policy.CacheReadAfterInvalidation
		}, false},
		{"trust 0", func(_ *policy.CacheRegionDecl, o *policy.CacheOps) { o.GenerationTrust = 0 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartStandalone(t)
			topo := &policy.Standalone{Endpoint: srv.Addr()}
			clk := newClock()
			silent := testConfig(t, tc.mut)
			silent.HintSecret = policy.Secret{}
			ia, ib := newInstance(t, topo, silent, clk, nil), newInstance(t, topo, testConfig(t, tc.mut), clk, nil)
			waitHintsUp(t, ib)
			a, b := ia.region(t, "items"), ib.region(t, "items")
			ctx, key := ctxT(t), Parts("k")
			_, err := a.Record(ctx, key, []byte("old"), RecordMeta{})
			require.NoError(t, err)
			lk, err := b.Lookup(ctx, key)
			require.NoError(t, err)
			require.Equal(t, Hit, lk.Kind)

			_, err = a.InvalidateRegion(ctx)
			require.NoError(t, err)
			lk, err = b.Lookup(ctx, key)
			require.NoError(t, err)
			if tc.staleWithin {
				assert.Equal(t, Hit, lk.Kind, "within the trust, b has not seen the move")
				clk.Advance(time.Second) // the default trust
				lk, err = b.Lookup(ctx, key)
				require.NoError(t, err)
			}
			assert.Equal(t, Miss, lk.Kind, "past the trust (or without one) b reads the moved generation")
			assert.Equal(t, Invalidated, lk.MissReason)
		})
	}
}

// TestGenerationTrustEndsWhenAGenerationIsRecreated: a shard generation
// that disappears (eviction, a deleted key) is re-created by the next host
// that reads it, which tells the others: their trust in the vanished one,
// whose entries are orphans, ends with the hint rather than the trust's
// age (the clock stands still here).
func TestGenerationTrustEndsWhenAGenerationIsRecreated(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	clkA, clkB := newClock(), newClock()
	ia, ib := newInstance(t, topo, testConfig(t, nil), clkA, nil), newInstance(t, topo, testConfig(t, nil), clkB, nil)
	waitHintsUp(t, ia, ib)
	a, b := ia.region(t, "items"), ib.region(t, "items")
	ctx, key := ctxT(t), Parts("k")
	_, err := a.Record(ctx, key, []byte("orphan-to-be"), RecordMeta{})
	require.NoError(t, err)
	for _, r := range []*Region{a, b} {
		lk, err := r.Lookup(ctx, key)
		require.NoError(t, err)
		require.Equal(t, Hit, lk.Kind)
	}
	rg := ia.c.state.Load().regions["items"]
	for i := range rg.layout.Shards() {
		require.NoError(t, srv.Admin().Del(ctx, rg.layout.Anchor(i).Redis()).Err())
	}
	// a trusts the vanished generation as b does: its trust must end first
	// for it to see the loss. b's clock stands still.
	clkA.Advance(time.Second)
	lk, err := a.Lookup(ctx, key)
	require.NoError(t, err)
	require.Equal(t, Miss, lk.Kind, "a re-created the generation")
	require.Eventually(t, func() bool {
		lk, err = b.Lookup(ctx, key)
		return err == nil && lk.Kind == Miss
	}, 10*time.Second, time.Millisecond, "a's hint ends b's trust in the vanished generation")
}

// TestGenerationsConfirm: a confirmation counts only for the generation the
// view holds and only under the epoch read before its read was sent; an
// observation of the same generation keeps it; the trust ends at its age
// and never holds for a time before the confirmation.
func TestGenerationsConfirm(t *testing.T) {
	g := &generations{slots: make([]atomic.Pointer[genView], 1)}
	g1, g2 := []byte("generation-one--"), []byte("generation-two--")
	t0 := time.Now()
	const trust = time.Second

	_, ok := g.trusted(0, t0, trust)
	assert.False(t, ok, "no view")
	g.observe(0, nil, g1)
	_, ok = g.trusted(0, t0, trust)
	assert.False(t, ok, "observed, not confirmed")

	e := g.epoch.Load()
	g.distrust() // a hint arrived while the read was out
	g.confirm(0, g1, e, t0)
	_, ok = g.trusted(0, t0, trust)
	assert.False(t, ok, "a confirmation from before the hint")

	e = g.epoch.Load()
	g.confirm(0, g2, e, t0)
	_, ok = g.trusted(0, t0, trust)
	assert.False(t, ok, "a confirmation of another generation than the view's")

	g.confirm(0, g1, e, t0)
	gen, ok := g.trusted(0, t0.Add(trust-1), trust)
	assert.True(t, ok)
	assert.Equal(t, g1, gen)
	_, ok = g.trusted(0, t0.Add(trust), trust)
	assert.False(t, ok, "at its age the trust ends")
	_, ok = g.trusted(0, t0.Add(-1), trust)
	assert.False(t, ok, "never before the confirmation")

	g.confirm(0, g1, e, t0.Add(-time.Hour))
	_, ok = g.trusted(0, t0, trust)
	assert.True(t, ok, "an older confirmation does not replace a newer one")
	g.observe(0, g1, g1)
	_, ok = g.trusted(0, t0, trust)
	assert.True(t, ok, "observing the same generation keeps the confirmation")

	g.observe(0, g1, g2)
	assert.True(t, bytes.Equal(g2, g.get(0)))
	_, ok = g.trusted(0, t0, trust)
	assert.False(t, ok, "a moved view is not confirmed")
	g.confirm(0, g2, e, t0)
	_, ok = g.trusted(0, t0, trust)
	assert.True(t, ok)
	g.distrust()
	_, ok = g.trusted(0, t0, trust)
	assert.False(t, ok, "distrust ends every confirmation")
}
