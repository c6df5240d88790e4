package cache

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/flight"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestMetricLabelsAreBounded drives every outcome the cache counts and
// then checks every caphost_cache_* series: region labels are compiled
// region ids, every other label comes from a closed set, and no label
// value is ever a key, a value or a token.
func TestMetricLabelsAreBounded(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clk := newClock()
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, l1Config(t), clk, nil)
	waitHintsUp(t, in)
	r := in.region(t, "items")
	ctx := ctxT(t)
	secretKey, secretValue := "customer-4711-secret-key", "value-that-must-not-be-a-label"
	_, err := r.Record(ctx, Parts(secretKey), []byte(secretValue), RecordMeta{})
	require.NoError(t, err)
	for range 3 {
		_, err = r.Lookup(ctx, Parts(secretKey))
		require.NoError(t, err)
	}
	_, _ = r.GetOrLoad(ctx, Parts("other"), func(context.Context) (LoadOutcome, error) {
		return TransientFailure("timeout", fmt.Errorf("source %s down", secretKey)), nil
	})
	_, _ = r.Invalidate(ctx, Parts(secretKey))
	_, _ = r.InvalidateRegion(ctx)
	clk.Advance(time.Hour)
	_, _ = r.Lookup(ctx, Parts(secretKey))

	closed := map[string][]string{
		"outcome": append(slices.Clone(lookupOutcomes), "RECORDED", "NOT_RECORDED_CONDITION", "NOT_RECORDED_PROVIDER_POLICY",
			"DEGRADED_UNAVAILABLE", "INDETERMINATE", "INVALIDATED", "ALREADY_ABSENT", "error"),
		"result":     append(slices.Clone(hintResults), "FRESH_HIT", "STALE_HIT", "LOADED_FROM_SOURCE", "AUTHORITATIVE_ABSENCE", "STALE_FALLBACK", "DEGRADED_SOURCE", "overloaded", "error", "loaded", "absent", "transient", "permanent", "cancelled", "unclassified", "invalid", "acquired", "contended", "unavailable", "refused", "waited", "woken", "wait-expired", "release-failed", "rewritten", "not-rewritten", "skipped", "failed", "ok"),
		"scope":      {"key", "region"},
		"direction":  {"in", "out", "subscription"},
		"op":         {"read", "write", "encode", "decode", "canonicalize", "admit"},
		"reason":     {"negative-off", "too-large", "admission-failed", "not-admitted", "expired", "envelope", "payload", "codec-failure", "revalidate", "error", "overload"},
		"event":      {"hit", "miss", "stored", "raced", "refused", "evicted_size", "evicted_expiry", "flush", "load", "join", "abandoned", "timed_out", "refused_keys", "refused_waiters", "panic"},
		"region":     {"items"},
		"generation": {"trusted", "read"},
	}
	mfs, err := in.reg.Gather()
	require.NoError(t, err)
	series := 0
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "caphost_cache_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			series++
			for _, lp := range m.GetLabel() {
				allowed, ok := closed[lp.GetName()]
				require.True(t, ok, "%s has an unexpected label %s", mf.GetName(), lp.GetName())
				if mf.GetName() == "caphost_cache_hints_total" && lp.GetName() == "region" {
					allowed = append(slices.Clone(allowed), noHintRegion) // hints no region can be named for
				}
				assert.Contains(t, allowed, lp.GetValue(), "%s{%s}", mf.GetName(), lp.GetName())
				assert.NotContains(t, lp.GetValue(), "customer")
				assert.NotContains(t, lp.GetValue(), "must-not")
			}
		}
	}
	assert.Greater(t, series, 20)
}

// TestRegionLabelsAreCapped: more distinct region ids than the cap share
// one "other" label, so a guest swapping ids cannot grow series forever.
func TestRegionLabelsAreCapped(t *testing.T) {
	m, err := newMetrics(nil)
	require.NoError(t, err)
	for i := range maxRegionLabels + 10 {
		m.region(fmt.Sprint("r", i))
	}
	labels := map[string]bool{}
	for _, rm := range m.regions {
		labels[rm.label] = true
	}
	assert.Len(t, labels, maxRegionLabels+1)
	assert.True(t, labels["other"])
}

// TestL1HitReadsNoPayload: payload_bytes{op="read"} observes values decoded
// from Redis; an L1 hit is counted as a lookup and an L1 event, not as a
// payload read.
func TestL1HitReadsNoPayload(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, l1Config(t), newClock(), nil)
	waitHintsUp(t, in)
	r := in.region(t, "items")
	ctx := ctxT(t)
	in.c.state.Load().regions["items"].l1.Flush() // the Record's own fill
	_, err := r.Record(ctx, Parts("k"), []byte("value"), RecordMeta{})
	require.NoError(t, err)
	in.c.state.Load().regions["items"].l1.Flush()
	fromL1 := 0
	for range 3 {
		lk, err := r.Lookup(ctx, Parts("k"))
		require.NoError(t, err)
		require.Equal(t, Hit, lk.Kind)
		if lk.FromL1 {
			fromL1++
		}
	}
	require.Equal(t, 2, fromL1, "one L2 read fills L1, two L1 hits follow")
	mfs, err := in.reg.Gather()
	require.NoError(t, err)
	reads := uint64(0)
	for _, mf := range mfs {
		if mf.GetName() != "caphost_cache_payload_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "op" && lp.GetValue() == "read" {
					reads += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	assert.Equal(t, uint64(1), reads, "only the L2 read observed a payload")
}

// TestL1HitsCountOneLookup: an L1 hit is counted where it is served, so
// Lookup, GetOrLoad and LookupOrClaim each count it exactly once, as
// hit_fresh or negative_hit, and no other lookup outcome moves.
func TestL1HitsCountOneLookup(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, l1Config(t), newClock(), nil)
	waitHintsUp(t, in)
	r := in.region(t, "items")
	ctx := ctxT(t)
	counts := func() map[string]float64 {
		t.Helper()
		mfs, err := in.reg.Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "caphost_cache_lookups_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "outcome" {
						out[lp.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
		return out
	}
	// inL1 reads key until L1 holds it (a host's hint for its own write
	// may drop the fill of a read that overlapped it).
	inL1 := func(key Key) {
		t.Helper()
		require.Eventually(t, func() bool {
			lk, err := r.Lookup(ctx, key)
			return err == nil && lk.FromL1
		}, 10*time.Second, time.Millisecond)
	}
	never := func(context.Context) (LoadOutcome, error) {
		return LoadOutcome{}, fmt.Errorf("the loader ran on an L1 hit")
	}

	_, err := r.Record(ctx, Parts("k"), []byte("value"), RecordMeta{})
	require.NoError(t, err)
	inL1(Parts("k"))
	before := counts()
	lk, err := r.Lookup(ctx, Parts("k"))
	require.NoError(t, err)
	require.True(t, lk.FromL1)
	res, err := r.GetOrLoad(ctx, Parts("k"), never)
	require.NoError(t, err)
	require.True(t, res.FromL1)
	lk, _, _, err = r.LookupOrClaim(ctx, Parts("k"), time.Second)
	require.NoError(t, err)
	require.True(t, lk.FromL1)
	after := counts()
	assert.Equal(t, before["hit_fresh"]+3, after["hit_fresh"])
	after["hit_fresh"] = before["hit_fresh"]
	assert.Equal(t, before, after, "only hit_fresh moved")

	_, err = r.RecordAbsent(ctx, Parts("gone"), RecordMeta{})
	require.NoError(t, err)
	inL1(Parts("gone"))
	before = counts()
	lk, err = r.Lookup(ctx, Parts("gone"))
	require.NoError(t, err)
	require.Equal(t, NegativeHit, lk.Kind)
	require.True(t, lk.FromL1)
	res, err = r.GetOrLoad(ctx, Parts("gone"), never)
	require.NoError(t, err)
	require.True(t, res.FromL1)
	after = counts()
	assert.Equal(t, before["negative_hit"]+2, after["negative_hit"])
	after["negative_hit"] = before["negative_hit"]
	assert.Equal(t, before, after, "only negative_hit moved")
}

// runtimeCounters reads the L1 and single-flight counters, by
// "l1/<event>" and "flight/<event>", of region items.
func runtimeCounters(t testing.TB, in *instance) map[string]float64 {
	t.Helper()
	mfs, err := in.reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		prefix, ok := map[string]string{"caphost_cache_l1_events_total": "l1/", "caphost_cache_single_flight_events_total": "flight/"}[mf.GetName()]
		if !ok {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !matches(m, map[string]string{"region": "items"}) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "event" {
					out[prefix+lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// rebuild changes the configured region's operational settings and
// reloads, as after a guest swap: a new policy gets a new runtime (L1,
// single-flight), which Reload installs in place of the old one.
func rebuild(t testing.TB, in *instance, mut func(*policy.CacheOps)) {
	t.Helper()
	old := in.c.state.Load().regions["items"]
	in.c.mu.Lock()
	regions := slices.Clone(in.c.cfg.Regions)
	for i := range regions {
		ops := *regions[i].Ops
		mut(&ops)
		regions[i].Ops = &ops
	}
	in.c.cfg.Regions = regions
	in.c.mu.Unlock()
	require.NoError(t, in.c.Reload(ctxT(t)))
	require.NotSame(t, old, in.c.state.Load().regions["items"], "a new policy is a new runtime")
}

// TestRuntimeCountersSurviveARebuild: the L1 and single-flight counters
// live in the region's runtime, which a swap that changes the region's
// policy replaces. The counters reported carry the replaced runtimes'
// counts: no counter goes down across a rebuild, a load still running on
// the replaced runtime counts when it ends, and the new runtime counts on
// top.
func TestRuntimeCountersSurviveARebuild(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, l1Config(t), newClock(), nil)
	waitHintsUp(t, in)
	r := in.region(t, "items")
	ctx := ctxT(t)
	loaded := func(context.Context) (LoadOutcome, error) { return Loaded([]byte("v"), Revision{}), nil }
	fromL1 := func(key Key) {
		t.Helper()
		require.Eventually(t, func() bool {
			lk, err := r.Lookup(ctx, key)
			return err == nil && lk.FromL1
		}, 10*time.Second, time.Millisecond)
	}

	_, err := r.GetOrLoad(ctx, Parts("k"), loaded)
	require.NoError(t, err)
	fromL1(Parts("k"))
	// A load that is still running when its runtime is replaced, and then
	// panics.
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := r.GetOrLoad(ctx, Parts("slow"), func(ctx context.Context) (LoadOutcome, error) {
			close(started)
			if await(ctx, release) {
				panic("loader bug")
			}
			return Cancelled(), nil
		})
		done <- err
	}()
	<-started
	before := runtimeCounters(t, in)
	require.Equal(t, 2.0, before["flight/load"])
	require.Positive(t, before["l1/hit"])
	require.Positive(t, before["l1/stored"])

	rebuild(t, in, func(o *policy.CacheOps) { o.LeaseWait /= 2 })
	after := runtimeCounters(t, in)
	assert.Len(t, after, len(before), "every series is still there")
	for ev, v := range before {
		assert.GreaterOrEqual(t, after[ev], v, "%s went down across the rebuild", ev)
	}

	close(release)
	var pe *flight.PanicError
	require.ErrorAs(t, <-done, &pe)
	assert.Equal(t, 1.0, runtimeCounters(t, in)["flight/panic"], "the replaced runtime's last load counts")

	before = runtimeCounters(t, in)
	_, err = r.GetOrLoad(ctx, Parts("k2"), loaded)
	require.NoError(t, err)
	fromL1(Parts("k2"))
	after = runtimeCounters(t, in)
	assert.Equal(t, before["flight/load"]+1, after["flight/load"], "the new runtime counts on top")
	assert.Greater(t, after["l1/hit"], before["l1/hit"])
	for ev, v := range before {
		assert.GreaterOrEqual(t, after[ev], v, ev)
	}
	assert.Zero(t, metric(t, in.reg, "caphost_cache_single_flight_keys", map[string]string{"region": "items"}))
}
