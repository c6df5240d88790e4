package cache

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/hint"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

func l1Config(t testing.TB) Config {
	return testConfig(t, func(d *policy.CacheRegionDecl, o *policy.CacheOps) {
		d.L1 = true
		o.L1.MaxAge = time.Hour // only hints and expiries may end an L1 copy here
	})
}

func waitHintsUp(t testing.TB, ins ...*instance) {
	t.Helper()
	for _, in := range ins {
		require.Eventually(t, in.c.hintsUp, 10*time.Second, 5*time.Millisecond, "hint subscription never confirmed")
	}
}

// waitHintsDown waits until each instance has counted its hint
// subscription going down (and so has flushed L1 and ended its trust).
func waitHintsDown(t testing.TB, within time.Duration, ins ...*instance) {
	t.Helper()
	for _, in := range ins {
		require.Eventually(t, func() bool {
			return metric(t, in.reg, "caphost_cache_hints_total", map[string]string{"region": "", "result": "subscription_down"}) >= 1
		}, within, time.Millisecond, "the hint subscription never went down")
	}
}

// TestL1CoherentAcrossInstances: two hosts hold a key in L1; a write or an
// invalidation on one reaches the other's L1 through an authenticated
// hint, and a region invalidation flushes it.
func TestL1CoherentAcrossInstances(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	clk := newClock()
	ia, ib := newInstance(t, topo, l1Config(t), clk, nil), newInstance(t, topo, l1Config(t), clk, nil)
	waitHintsUp(t, ia, ib)
	a, b := ia.region(t, "items"), ib.region(t, "items")
	ctx, key := ctxT(t), Parts("l1")

	_, err := a.Record(ctx, key, []byte("v1"), RecordMeta{})
	require.NoError(t, err)
	// The first read comes from Redis and fills L1 — unless a's hint for
	// its own write lands during that read, which drops the fill (it may
	// predate the hint); a later read fills it.
	var lk Lookup
	require.Eventually(t, func() bool {
		var err error
		lk, err = b.Lookup(ctx, key)
		return err == nil && lk.FromL1
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, []byte("v1"), lk.Value)
	lk.Value[0] = 'X' // a caller's copy: L1 must not change
	lk, err = b.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []byte("v1"), lk.Value)

	_, err = a.Record(ctx, key, []byte("v2"), RecordMeta{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		lk, err := b.Lookup(ctx, key)
		return err == nil && string(lk.Value) == "v2"
	}, 10*time.Second, 5*time.Millisecond, "a write on a reaches b's L1")

	_, err = a.Invalidate(ctx, key)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		lk, err := b.Lookup(ctx, key)
		return err == nil && lk.Kind == Miss
	}, 10*time.Second, 5*time.Millisecond, "an invalidation on a reaches b's L1")

	_, err = b.Record(ctx, key, []byte("v3"), RecordMeta{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { // fill a's L1
		lk, err := a.Lookup(ctx, key)
		return err == nil && lk.FromL1 && string(lk.Value) == "v3"
	}, 10*time.Second, time.Millisecond)
	_, err = b.InvalidateRegion(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		lk, err := a.Lookup(ctx, key)
		return err == nil && lk.Kind == Miss
	}, 10*time.Second, 5*time.Millisecond, "a region invalidation flushes a's L1")
	assert.Positive(t, metric(t, ib.reg, "caphost_cache_hints_total", map[string]string{"region": "items", "result": "received"}))
	assert.Positive(t, metric(t, ia.reg, "caphost_cache_hints_total", map[string]string{"region": "items", "result": "sent"}))
}

// TestForgedHintIgnored: a hint published on the channel without the hint
// secret (or out of its window) is counted and changes nothing.
func TestForgedHintIgnored(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	clk := newClock()
	in := newInstance(t, topo, l1Config(t), clk, nil)
	waitHintsUp(t, in)
	r := in.region(t, "items")
	ctx, key := ctxT(t), Parts("forge")
	_, err := r.Record(ctx, key, []byte("v"), RecordMeta{})
	require.NoError(t, err)
	_, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	require.True(t, lk.FromL1)

	rg := in.c.state.Load().regions["items"]
	loc, err := in.c.locate(ctx, rg, key)
	require.NoError(t, err)
	msg := hint.Message{Kind: hint.KeyInvalidated, Region: "items", Sender: [16]byte{1}, IssuedAt: clk.Now(),
		Location: loc.Digest(), Scope: rg.gens.get(loc.Shard())}
	forger, err := hint.NewCodec([]byte("not-the-hint-secret-0123456789abcdef"), time.Minute, clk.Now)
	require.NoError(t, err)
	forged, err := forger.Seal(msg)
	require.NoError(t, err)
	genuine, err := hint.NewCodec(hintSecret.Reveal(), time.Minute, clk.Now)
	require.NoError(t, err)
	stale := msg
	stale.IssuedAt = clk.Now().Add(-time.Hour)
	old, err := genuine.Seal(stale)
	require.NoError(t, err)
	channel, err := in.rt.Keys().Build(hintChannelSpec())
	require.NoError(t, err)
	for _, m := range [][]byte{forged, old, []byte("garbage")} {
		require.NoError(t, srv.Admin().SPublish(ctx, channel.Redis(), m).Err())
	}
	require.Eventually(t, func() bool {
		return metric(t, in.reg, "caphost_cache_hints_total", map[string]string{"region": "", "result": "rejected_forged"}) == 1 &&
			metric(t, in.reg, "caphost_cache_hints_total", map[string]string{"region": "", "result": "rejected_stale"}) == 1 &&
			metric(t, in.reg, "caphost_cache_hints_total", map[string]string{"region": "", "result": "rejected_malformed"}) == 1
	}, 10*time.Second, 5*time.Millisecond)
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.True(t, lk.FromL1, "a rejected hint dropped nothing")

	// The same hint, sealed with the secret and current, does drop it.
	ok, err := genuine.Seal(msg)
	require.NoError(t, err)
	require.NoError(t, srv.Admin().SPublish(ctx, channel.Redis(), ok).Err())
	require.Eventually(t, func() bool {
		lk, err := r.Lookup(ctx, key)
		return err == nil && !lk.FromL1
	}, 10*time.Second, 5*time.Millisecond)
}

// TestHintsCountedPerRegion: hints sent and received are counted under
// their region's id, hints of one region never move another's series,
// and a rejected hint or one naming a region this host does not serve is
// counted under region="" (what it names cannot be believed, or is not a
// label this host's configuration bounds).
func TestHintsCountedPerRegion(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	clk := newClock()
	cfg := l1Config(t)
	prices := cfg.Regions[0]
	prices.ID = "prices"
	cfg.Regions = append(cfg.Regions, prices)
	ia, ib := newInstance(t, topo, cfg, clk, nil), newInstance(t, topo, cfg, clk, nil)
	waitHintsUp(t, ia, ib)
	ctx := ctxT(t)
	hints := func(in *instance, region, result string) float64 {
		return metric(t, in.reg, "caphost_cache_hints_total", map[string]string{"region": region, "result": result})
	}

	_, err := ia.region(t, "prices").Record(ctx, Parts("p"), []byte("v"), RecordMeta{})
	require.NoError(t, err)
	assert.Equal(t, 1.0, hints(ia, "prices", "sent"), "counted by the time the write returns")
	require.Eventually(t, func() bool {
		return hints(ib, "prices", "received") == 1 && hints(ia, "prices", "ignored_own") == 1
	}, 10*time.Second, time.Millisecond)

	channel, err := ib.rt.Keys().Build(hintChannelSpec())
	require.NoError(t, err)
	genuine, err := hint.NewCodec(hintSecret.Reveal(), time.Minute, clk.Now)
	require.NoError(t, err)
	elsewhere, err := genuine.Seal(hint.Message{Kind: hint.RegionInvalidated, Region: "elsewhere", Sender: [16]byte{1}, IssuedAt: clk.Now()})
	require.NoError(t, err)
	forger, err := hint.NewCodec([]byte("not-the-hint-secret-0123456789abcdef"), time.Minute, clk.Now)
	require.NoError(t, err)
	forged, err := forger.Seal(hint.Message{Kind: hint.RegionInvalidated, Region: "prices", Sender: [16]byte{1}, IssuedAt: clk.Now()})
	require.NoError(t, err)
	for _, m := range [][]byte{elsewhere, forged} {
		require.NoError(t, srv.Admin().SPublish(ctx, channel.Redis(), m).Err())
	}
	require.Eventually(t, func() bool {
		return hints(ib, "", "ignored_unknown_region") == 1 && hints(ib, "", "rejected_forged") == 1
	}, 10*time.Second, time.Millisecond)

	for _, in := range []*instance{ia, ib} {
		for _, result := range regionHintResults {
			assert.Zero(t, hints(in, "items", result), "items moved no hint series (%s)", result)
			assert.Zero(t, hints(in, "", result), "a hint of a served region is counted under its id (%s)", result)
		}
		assert.Positive(t, hints(in, "", "subscription_up"))
		assert.Zero(t, hints(in, "prices", "send_failed"))
	}
	assert.Zero(t, hints(ib, "prices", "sent"))
	assert.Zero(t, hints(ia, "prices", "received"), "a host's own hint is ignored, not received")
	assert.Zero(t, hints(ib, "prices", "rejected_forged"), "a forged hint is never counted under the region it names")
}

// TestL1FlushedWhileHintsAreDown: when the hint subscription drops, L1 is
// flushed and bypassed (a hint may be lost meanwhile); once it is back,
// L1 serves again.
func TestL1FlushedWhileHintsAreDown(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, l1Config(t), newClock(), nil)
	waitHintsUp(t, in)
	r := in.region(t, "items")
	ctx, key := ctxT(t), Parts("drop")
	_, err := r.Record(ctx, key, []byte("v"), RecordMeta{})
	require.NoError(t, err)
	_, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	require.True(t, lk.FromL1)
	entries := func() float64 {
		return metric(t, in.reg, "caphost_cache_l1_entries", map[string]string{"region": "items"})
	}
	require.Equal(t, 1.0, entries())

	require.NoError(t, srv.Admin().ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
	waitHintsDown(t, 10*time.Second, in)
	assert.Zero(t, entries(), "L1 is flushed when hints may be lost")
	waitHintsUp(t, in)
	for range 2 {
		lk, err = r.Lookup(ctx, key)
		require.NoError(t, err)
	}
	assert.True(t, lk.FromL1, "L1 serves again once hints are back")
	assert.GreaterOrEqual(t, metric(t, in.reg, "caphost_cache_hints_total", map[string]string{"region": "", "result": "subscription_up"}), 2.0)
}

// TestInvalidationWhileHintsAreDown: host B is cut off from the hint
// channel (its subscription dropped and cannot come back) while host A
// invalidates. The hint is lost for B; once B resubscribes it must serve
// neither its L1 copy nor the generation it trusted before the drop. B's
// clock stands still, so no age cap ends either of them: only the
// subscription's drop may.
func TestInvalidationWhileHintsAreDown(t *testing.T) {
	for _, scope := range []string{"key", "region"} {
		t.Run(scope, func(t *testing.T) {
			srv := redistest.StartStandalone(t)
			proxy := redistest.NewProxy(t, srv.Addr())
			clk := newClock()
			a := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, l1Config(t), clk, nil)
			b := newInstance(t, &policy.Standalone{Endpoint: proxy.Addr()}, l1Config(t), clk, nil)
			waitHintsUp(t, a, b)
			ra, rb := a.region(t, "items"), b.region(t, "items")
			ctx, key := ctxT(t), Parts("cut-off")
			_, err := ra.Record(ctx, key, []byte("v1"), RecordMeta{})
			require.NoError(t, err)
			// A's hint for its own write may land during B's first read and
			// drop that fill; a later read fills L1 (as in
			// TestL1CoherentAcrossInstances).
			var lk Lookup
			require.Eventually(t, func() bool {
				lk, err = rb.Lookup(ctx, key)
				return err == nil && lk.FromL1
			}, 10*time.Second, time.Millisecond, "B holds v1 in L1")

			// B's pooled connections keep working; its subscription is
			// killed and cannot be re-dialled.
			proxy.Refuse()
			require.NoError(t, srv.Admin().ClientKillByFilter(ctx, "TYPE", "pubsub").Err())
			waitHintsDown(t, 10*time.Second, b)
			if scope == "key" {
				o, err := ra.Invalidate(ctx, key)
				require.NoError(t, err)
				require.Equal(t, InvalidationDone, o)
			} else {
				o, err := ra.InvalidateRegion(ctx)
				require.NoError(t, err)
				require.Equal(t, InvalidationDone, o)
			}
			proxy.Passthrough()
			waitHintsUp(t, b)

			lk, err = rb.Lookup(ctx, key)
			require.NoError(t, err)
			assert.False(t, lk.FromL1)
			assert.Equal(t, Miss, lk.Kind, "B must not serve v1 after an invalidation it never heard of")
			if scope == "key" {
				assert.Equal(t, Invalidated, lk.MissReason)
			}
		})
	}
}

// TestL1NeverOutlivesTheHardExpiry: an L1 copy ends with its L2 entry's
// hard expiry, whatever L1's age cap says.
func TestL1NeverOutlivesTheHardExpiry(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clk := newClock()
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, l1Config(t), clk, nil)
	waitHintsUp(t, in)
	r := in.region(t, "items")
	ctx, key := ctxT(t), Parts("hard")
	_, err := r.Record(ctx, key, []byte("v"), RecordMeta{})
	require.NoError(t, err)
	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	require.True(t, lk.FromL1)
	clk.Advance(lk.SoftExpiresAt.Sub(clk.Now()))
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.False(t, lk.FromL1, "a stale copy is not served from L1")
	assert.Equal(t, Stale, lk.Freshness)
	clk.Advance(lk.HardExpiresAt.Sub(clk.Now()))
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind)
	assert.Equal(t, Expired, lk.MissReason)
}

// TestL1AcrossSentinelFailover: two hosts on a Sentinel deployment hold a
// key in L1; the primary is killed and Sentinel promotes a replica. The
// hint subscriptions drop (L1 flushed and bypassed), come back on the new
// primary, and a write and then an invalidation on one host reach the
// other's L1 again.
//
// The primary is killed rather than demoted by SENTINEL FAILOVER: a demoted
// primary keeps serving reads (and answering SPUBLISH locally) until the
// Sentinels convert it, and a go-redis failover client that missed
// +switch-master keeps its pooled connections there. That is the
// runtime's Sentinel rediscovery to fix; an L1 copy filled from such a
// read lives at most the region's max-age, as after any lost hint.
func TestL1AcrossSentinelFailover(t *testing.T) {
	sen := redistest.StartSentinel(t)
	topo := &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()}
	clk := newClock()
	ia, ib := newInstance(t, topo, l1Config(t), clk, nil), newInstance(t, topo, l1Config(t), clk, nil)
	waitHintsUp(t, ia, ib)
	a, b := ia.region(t, "items"), ib.region(t, "items")
	ctx, key := ctxT(t), Parts("failover")
	fill := func(r *Region, want string) {
		t.Helper()
		require.Eventually(t, func() bool {
			lk, err := r.Lookup(ctx, key)
			return err == nil && lk.FromL1 && string(lk.Value) == want
		}, 20*time.Second, 10*time.Millisecond)
	}
	_, err := a.Record(ctx, key, []byte("v1"), RecordMeta{})
	require.NoError(t, err)
	fill(b, "v1")

	sen.Primary().Kill()
	waitHintsDown(t, 20*time.Second, ia, ib) // the kill drops the hint subscription
	lk, _ := b.Lookup(ctx, key)              // Unavailable or a hit on the new primary, never L1
	assert.False(t, lk.FromL1, "L1 is bypassed while the hints are down")
	waitHintsUp(t, ia, ib)
	// The write may need a moment while clients find the new primary.
	require.Eventually(t, func() bool {
		o, err := a.Record(ctx, key, []byte("v2"), RecordMeta{})
		return err == nil && o == Recorded
	}, 20*time.Second, 50*time.Millisecond)
	fill(b, "v2")
	_, err = a.Invalidate(ctx, key)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		lk, err := b.Lookup(ctx, key)
		return err == nil && lk.Kind == Miss
	}, 5*time.Second, 10*time.Millisecond, "the invalidation reaches b's L1 on the new primary")
}
