package ratelimit

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// TestConcurrencyCluster proves the permit limiter on a 3+3 Cluster:
// admission is exact per subject while subjects land in different slots,
// a release frees a slot, a wrong owner releases nothing, an expired permit
// is reclaimed, and every permit set lives on the primary that owns its
// slot.
func TestConcurrencyCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rt := newRuntimeTopo(t, &policy.Cluster{Seeds: cl.Seeds()})
	cfg := Config{Provider: ProviderRedis}
	const limit = 3
	set := compile(t, cfg, permits("jobs", limit, 30*time.Second))
	reg := prometheus.NewRegistry()
	l, err := New(rt, cfg, set, WithRegisterer(reg))
	require.NoError(t, err)
	c, err := NewConcurrencyLimiter(l, WithRegisterer(reg))
	require.NoError(t, err)
	ctx := ctxT(t)

	subjects := []string{"acme", "globex", "initech", "umbrella"}
	f := &concFixture{fixture: &fixture{rt: rt, l: l, reg: reg}, c: c}
	slots := map[uint16]bool{}
	for _, s := range subjects {
		slots[f.permitKey(t, "jobs", "r1", tenant(s)).Slot()] = true
	}
	require.Greater(t, len(slots), 1, "the subjects spread over slots")

	var wg sync.WaitGroup
	peaks := make([]atomic.Int64, len(subjects))
	holders := make([]atomic.Int64, len(subjects))
	// A bounded number of tries, not a wall-clock window: the stress only
	// proves "never more than the limit"; that the limit is reachable on
	// every subject is proven with held permits below.
	for si, sub := range subjects {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					lease, err := c.AcquireLease(ctx, acq("jobs", sub))
					if errors.Is(err, ErrPermitContended) {
						time.Sleep(time.Millisecond)
						continue
					}
					if !assert.NoError(t, err) {
						return
					}
					n := holders[si].Add(1)
					for p := peaks[si].Load(); n > p && !peaks[si].CompareAndSwap(p, n); p = peaks[si].Load() {
					}
					time.Sleep(2 * time.Millisecond)
					holders[si].Add(-1)
					lease.Release(ctx)
				}
			}()
		}
	}
	wg.Wait()
	for si, sub := range subjects {
		assert.LessOrEqual(t, peaks[si].Load(), int64(limit), "%s: never more holders than permits", sub)
		assert.Positive(t, peaks[si].Load(), "%s: some try was admitted", sub)
	}

	owners := func(sub string) []string {
		k := f.permitKey(t, "jobs", "r1", tenant(sub))
		node, err := cl.Admin().MasterForKey(ctx, k.Redis())
		require.NoError(t, err)
		got, err := node.ZRangeByScore(ctx, k.Redis(), &redis.ZRangeBy{Min: "(0", Max: "+inf"}).Result()
		require.NoError(t, err)
		return got
	}
	for _, sub := range subjects {
		assert.Empty(t, owners(sub), sub)
	}
	// The limit is reachable on every subject, whichever slot it hashes to:
	// limit held permits, then the next acquire is contended.
	for _, sub := range subjects {
		var hold []*Lease
		for range limit {
			o := c.Acquire(ctx, acq("jobs", sub))
			require.True(t, o.Acquired(), "%s: %v %s", sub, o.Kind(), o.Category())
			hold = append(hold, o.Lease())
		}
		st, _ := c.Acquire(ctx, acq("jobs", sub)).Status()
		assert.Equal(t, PermitContended, st, sub)
		for _, l := range hold {
			l.Release(ctx)
		}
		assert.Empty(t, owners(sub), sub)
	}

	held := make([]*Lease, limit)
	for i := range held {
		o := c.Acquire(ctx, acq("jobs", "acme"))
		require.True(t, o.Acquired())
		held[i] = o.Lease()
	}
	st, _ := c.Acquire(ctx, acq("jobs", "acme")).Status()
	assert.Equal(t, PermitContended, st)
	st, _ = c.Release(ctx, PermitRef{Policy: "jobs", Subject: tenant("acme"), Owner: newOwnerToken()}).Status()
	assert.Equal(t, PermitNotHeld, st, "a wrong owner releases nothing")
	assert.Len(t, owners("acme"), limit)
	st, _ = held[0].Release(ctx).Status()
	assert.Equal(t, PermitReleased, st)
	assert.True(t, c.Acquire(ctx, acq("jobs", "acme")).Acquired(), "the released slot is free")

	// A short permit: long enough (1 s) that the next acquires surely run
	// while it is live, then waited out until the expiry Redis reported.
	r := acq("jobs", "globex")
	r.TTL = time.Second
	short := c.Acquire(ctx, r)
	require.True(t, short.Acquired())
	for range limit - 1 {
		require.True(t, c.Acquire(ctx, acq("jobs", "globex")).Acquired())
	}
	st, _ = c.Acquire(ctx, acq("jobs", "globex")).Status()
	require.Equal(t, PermitContended, st)
	time.Sleep(time.Until(short.ExpiresAt()) + 50*time.Millisecond)
	assert.True(t, c.Acquire(ctx, acq("jobs", "globex")).Acquired(), "the expired permit was reclaimed")
	assert.Equal(t, LeaseLost, short.Lease().State())
	assert.ErrorIs(t, short.Lease().Renew(ctx).Err(), ErrPermitInvalid, "a lost lease does not renew")
	st, _ = c.Renew(ctx, PermitRef{Policy: "jobs", Subject: tenant("globex"), Owner: short.Lease().Owner()}).Status()
	assert.Equal(t, PermitNotHeld, st)

	// The primary owning a subject's slot dies: that subject fails closed.
	node, err := cl.Admin().MasterForKey(ctx, f.permitKey(t, "jobs", "r1", tenant("initech")).Redis())
	require.NoError(t, err)
	killed := false
	for _, p := range cl.Primaries() {
		if p.Addr() == node.Options().Addr {
			p.Kill()
			killed = true
		}
	}
	require.True(t, killed)
	o := c.Acquire(ctx, acq("jobs", "initech"))
	assert.Equal(t, Unavailable, o.Kind(), "%s", o.Category())
	assert.Equal(t, CategoryRedisUnavailable, o.Category())
	assert.Equal(t, certainty.UnavailableBeforeSend, o.Certainty())
	assert.ErrorIs(t, o.Err(), ErrPermitUnavailable)
}
