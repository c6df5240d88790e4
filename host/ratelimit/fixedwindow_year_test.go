package ratelimit

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// The policy bounds mirror the programs' manifest: a fixed window may be
// as long as rate-fixed-window-v3 takes, every other window as long as the
// other rate programs take (rate-fixed-window-v2's bound).
func TestWindowBoundsMatchPrograms(t *testing.T) {
	assert.Equal(t, programs.MaxFixedWindowV3, policy.RateMaxFixedWindow)
	cat, err := programs.Load()
	require.NoError(t, err)
	window := func(id string) time.Duration {
		p, ok := cat.Program(id)
		require.True(t, ok, id)
		for _, a := range p.Spec().Arguments {
			if a.Name == "windowMillis" {
				return time.Duration(*a.Max) * time.Millisecond
			}
		}
		t.Fatalf("%s has no windowMillis", id)
		return 0
	}
	assert.Equal(t, policy.RateMaxFixedWindow, window("rate-fixed-window-v3"))
	for _, id := range []string{"rate-fixed-window-v2", "rate-sliding-counter-v2", "rate-sliding-log-v3"} {
		assert.Equal(t, policy.RateMaxWindow, window(id), id)
	}
}

// A fixed window of a year (envoyproxy/ratelimit's YEAR: 365 days, aligned
// to the Unix epoch) runs rate-fixed-window-v3 against real Redis: it
// admits the limit, resets at the next multiple of 365 days since the
// epoch in Redis time, and a denial's retry-after runs to that reset; the
// state is v2's string under key version 2 with a TTL to the reset plus
// the cleanup grace.
func TestFixedWindowYear(t *testing.T) {
	s := redistest.StartStandalone(t)
	const year = 365 * 24 * time.Hour
	decl := policy.RatePolicyDecl{ID: "yearly", Revision: "r1", Algorithm: policy.RateFixedWindow,
		Parameters: policy.RateParameters{Limit: 3, Window: year}, Dimensions: []policy.RateDimension{policy.DimTenant},
		CleanupGrace: 5 * time.Second}
	f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, decl)
	ctx := ctxT(t)
	before, err := s.Admin().Time(ctx).Result()
	require.NoError(t, err)
	reset := time.UnixMilli((before.UnixMilli()/year.Milliseconds() + 1) * year.Milliseconds())
	for i := range 4 {
		o := f.l.Evaluate(ctx, req("yearly", "acme"))
		d, ok := o.Decision()
		require.True(t, ok, "%s/%s", o.Kind(), o.Category())
		assert.Equal(t, i < 3, d.Allowed, "call %d", i)
		assert.Equal(t, int64(3), d.Limit)
		assert.Equal(t, int64(max(2-i, 0)), d.Remaining, "call %d", i)
		assert.True(t, d.ResetAt.Equal(reset), "call %d: reset %s, want %s", i, d.ResetAt, reset)
		if i == 3 {
			// Retry-after is measured from the program's own Redis time.
			assert.LessOrEqual(t, d.RetryAfter, reset.Sub(before))
			assert.Greater(t, d.RetryAfter, reset.Sub(before)-time.Minute)
		}
	}
	k := f.stateKey(t, "yearly", tenant("acme"))
	assert.Contains(t, k.Redis(), ":kv2:")
	used, err := windowUsed(ctx, s.Admin(), k)
	require.NoError(t, err)
	assert.Equal(t, int64(3), used)
	pttl, err := s.Admin().PTTL(ctx, k.Redis()).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, pttl, reset.Sub(before)+5*time.Second)
	assert.Greater(t, pttl, reset.Sub(before)+5*time.Second-time.Minute)
}

// A rolling upgrade: a binary that runs rate-fixed-window-v2 and one that
// runs v3 (this limiter) count a subject in one window, because v3 keeps
// v2's state under v2's key. Calls of the old program and the limiter
// interleave on one key and admit exactly the limit together.
func TestFixedWindowSharesStateWithV2(t *testing.T) {
	s := redistest.StartStandalone(t)
	decl := fixedWindow("fw", 10)
	decl.CleanupGrace, decl.MaxClockStep = 2*time.Second, 3*time.Second
	f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, decl)
	ctx := ctxT(t)
	pol, ok := f.l.Policies().Policy("fw")
	require.True(t, ok)
	k := f.stateKey(t, "fw", tenant("acme"))
	dep, err := f.rt.Role(policy.RoleCoordination)
	require.NoError(t, err)
	// What an old binary renders for the same policy.
	old := programs.NewFixedWindowPlan(programs.FixedWindowRequest{Limit: 10, Cost: 1, Window: pol.Parameters.Window,
		RateOptions: programs.RateOptions{PolicyRevision: pol.Revision, MaxClockStep: pol.MaxClockStep, CleanupGrace: pol.CleanupGrace}})
	require.Equal(t, "rate-fixed-window-v2", old.Program())
	var allowed int
	for i := range 16 {
		var ok bool
		var remaining int64
		if i%2 == 0 {
			r, err := dep.Programs().RatePlan(ctx, k, keys.Key{}, old, 1, "")
			require.NoError(t, err)
			ok, remaining = r.Allowed, r.Remaining
		} else {
			d, dok := f.l.Evaluate(ctx, req("fw", "acme")).Decision()
			require.True(t, dok)
			ok, remaining = d.Allowed, d.Remaining
		}
		if ok {
			allowed++
		}
		assert.Equal(t, int64(max(10-allowed, 0)), remaining, "call %d", i)
	}
	assert.Equal(t, 10, allowed)
	v, err := s.Admin().Get(ctx, k.Redis()).Result()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(v, "f1:10:"), v)
	assert.True(t, strings.HasSuffix(v, ":"+pol.Revision), v)
}
