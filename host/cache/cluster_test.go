package cache

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestClusterRegions runs a region over a real 3+3 Cluster from two hosts:
// entries of many keys spread over the shards (each read is one slot: the
// shard's generation and the entry), a region invalidation moves every
// shard, and a racing refill loses to a per-key invalidation.
func TestClusterRegions(t *testing.T) {
	cl := redistest.StartCluster(t)
	topo := &policy.Cluster{Seeds: cl.Seeds()}
	clk := newClock()
	cfg := testConfig(t, func(_ *policy.CacheRegionDecl, o *policy.CacheOps) { o.Shards = 16 })
	a := newInstance(t, topo, cfg, clk, nil).region(t, "items")
	b := newInstance(t, topo, cfg, clk, nil).region(t, "items")
	ctx := ctxT(t)
	const n = 64
	for i := range n {
		o, err := a.Record(ctx, Parts(fmt.Sprint("k", i)), []byte(fmt.Sprint("v", i)), RecordMeta{})
		require.NoError(t, err)
		require.Equal(t, Recorded, o)
	}
	for i := range n {
		lk, err := b.Lookup(ctx, Parts(fmt.Sprint("k", i)))
		require.NoError(t, err)
		require.Equal(t, Hit, lk.Kind)
		require.Equal(t, []byte(fmt.Sprint("v", i)), lk.Value)
	}
	// The region spreads over the primaries: every one holds entries.
	for _, p := range cl.Primaries() {
		n, err := p.Admin().DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Positive(t, n, "primary %s holds none of the region", p.Addr())
	}

	o, err := b.InvalidateRegion(ctx)
	require.NoError(t, err)
	require.Equal(t, InvalidationDone, o)
	for i := range n {
		lk, err := a.Lookup(ctx, Parts(fmt.Sprint("k", i)))
		require.NoError(t, err)
		require.Equal(t, Miss, lk.Kind, "key %d survived the region invalidation", i)
	}

	key := Parts("raced")
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan Result, 1)
	go func() {
		res, err := a.GetOrLoad(ctx, key, func(ctx context.Context) (LoadOutcome, error) {
			close(started)
			if !await(ctx, release) {
				return Cancelled(), nil
			}
			return Loaded([]byte("old"), Revision{}), nil
		})
		assert.NoError(t, err)
		done <- res
	}()
	<-started
	_, err = b.Invalidate(ctx, key)
	require.NoError(t, err)
	close(release)
	res := <-done
	assert.Equal(t, NotRecordedCondition, res.Record)
	lk, err := b.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind)
}

// TestClusterL1Coherence: two hosts on a Cluster hold keys of every
// primary in L1; a write, a per-key invalidation and a region invalidation
// on one reach the other's L1 through the hint channel (one sharded
// Pub/Sub channel, on its own slot's primary), whichever primary holds the
// key.
func TestClusterL1Coherence(t *testing.T) {
	cl := redistest.StartCluster(t)
	topo := &policy.Cluster{Seeds: cl.Seeds()}
	clk := newClock()
	cfg := testConfig(t, func(d *policy.CacheRegionDecl, o *policy.CacheOps) {
		d.L1 = true
		o.L1.MaxAge = time.Hour // only hints and expiries may end an L1 copy here
		o.Shards = 16
	})
	ia, ib := newInstance(t, topo, cfg, clk, nil), newInstance(t, topo, cfg, clk, nil)
	waitHintsUp(t, ia, ib)
	a, b := ia.region(t, "items"), ib.region(t, "items")
	ctx := ctxT(t)
	const n = 32
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = Parts(fmt.Sprint("l1-", i))
		_, err := a.Record(ctx, keys[i], []byte("v1"), RecordMeta{})
		require.NoError(t, err)
	}
	for _, p := range cl.Primaries() {
		n, err := p.Admin().DBSize(ctx).Result()
		require.NoError(t, err)
		require.Positive(t, n, "primary %s holds none of the keys", p.Addr())
	}
	fillB := func(want string) {
		t.Helper()
		for _, k := range keys {
			require.Eventually(t, func() bool {
				lk, err := b.Lookup(ctx, k)
				return err == nil && lk.FromL1 && string(lk.Value) == want
			}, 10*time.Second, time.Millisecond)
		}
	}
	fillB("v1")

	for _, k := range keys {
		_, err := a.Record(ctx, k, []byte("v2"), RecordMeta{})
		require.NoError(t, err)
	}
	fillB("v2") // every key's hint reached B, whichever primary carried it

	o, err := a.Invalidate(ctx, keys[0])
	require.NoError(t, err)
	require.Equal(t, InvalidationDone, o)
	require.Eventually(t, func() bool {
		lk, err := b.Lookup(ctx, keys[0])
		return err == nil && lk.Kind == Miss
	}, 10*time.Second, 5*time.Millisecond, "a per-key invalidation reaches B's L1")

	o, err = a.InvalidateRegion(ctx)
	require.NoError(t, err)
	require.Equal(t, InvalidationDone, o)
	for _, k := range keys {
		require.Eventually(t, func() bool {
			lk, err := b.Lookup(ctx, k)
			return err == nil && lk.Kind == Miss
		}, 10*time.Second, 5*time.Millisecond, "a region invalidation reaches B for every shard")
	}
	assert.Positive(t, metric(t, ib.reg, "caphost_cache_hints_total", map[string]string{"result": "received"}))
}
