package ratelimit

import (
	"context"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// exactAdmission runs 400 attempts from 32 goroutines on one subject and
// returns how many were allowed.
func exactAdmission(t *testing.T, f *fixture, id string) int64 {
	t.Helper()
	const goroutines, attempts = 32, 400
	var allowed, next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, attempts)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= attempts {
				o := f.l.Evaluate(context.Background(), req(id, "acme"))
				if o.Kind() != Evaluated {
					errs <- o.Kind().String() + "/" + string(o.Category())
					continue
				}
				if o.Allowed() {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("unexpected outcome %s", e)
	}
	return allowed.Load()
}

func TestExactAdmissionFixedWindow(t *testing.T) {
	s := redistest.StartStandalone(t)
	f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, fixedWindow("fw", 100))
	assert.Equal(t, int64(100), exactAdmission(t, f, "fw"))
	assert.Equal(t, 100.0, counter(t, f.reg, "caphost_rate_decisions_total", map[string]string{"policy": "fw", "decision": "allow"}))
	assert.Equal(t, 300.0, counter(t, f.reg, "caphost_rate_decisions_total", map[string]string{"policy": "fw", "decision": "deny"}))
}

func TestExactAdmissionTokenBucket(t *testing.T) {
	s := redistest.StartStandalone(t)
	tb := policy.RatePolicyDecl{ID: "tb", Revision: "r1", Algorithm: policy.RateTokenBucket,
		Parameters: policy.RateParameters{Capacity: 100, RefillTokens: 1, RefillPeriod: time.Hour},
		Dimensions: []policy.RateDimension{policy.DimTenant}}
	f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, tb)
	assert.Equal(t, int64(100), exactAdmission(t, f, "tb"))
	o := f.l.Evaluate(ctxT(t), req("tb", "acme"))
	d, ok := o.Decision()
	require.True(t, ok)
	assert.False(t, d.Allowed)
	assert.Equal(t, int64(100), d.Limit, "tokens, not micro-tokens")
	assert.Equal(t, SourceGlobalRedis, d.Source)
	assert.Equal(t, Certain, d.Certainty)
	assert.Greater(t, d.RetryAfter, 30*time.Minute)
}

// The token bucket with evaluation-id dedup, batching off and on (default):
// 32 goroutines on one subject admit exactly the capacity, and the state
// is rate-token-bucket-v2's string under key version 2.
func TestExactAdmissionTokenBucketDedupBatching(t *testing.T) {
	s := redistest.StartStandalone(t)
	tb := policy.RatePolicyDecl{ID: "tbd", Revision: "r1", Algorithm: policy.RateTokenBucket,
		Parameters: policy.RateParameters{Capacity: 100, RefillTokens: 1, RefillPeriod: time.Hour},
		Dimensions: []policy.RateDimension{policy.DimTenant}, Dedup: policy.RateDedup{Enabled: true}}
	for name, opts := range map[string][]Option{"unbatched": {WithBatching(0, 0)}, "batched": {WithBatching(1, 8)}} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, opts, tb)
			require.NoError(t, s.Admin().Del(ctxT(t), f.stateKey(t, "tbd", tenant("acme")).Redis()).Err())
			assert.Equal(t, int64(100), exactAdmission(t, f, "tbd"))
			v, err := s.Admin().Get(ctxT(t), f.stateKey(t, "tbd", tenant("acme")).Redis()).Result()
			require.NoError(t, err)
			// '1:<micro-tokens>:<ts>:<revision>'. The bucket refills 1 token
			// an hour, so what accrued since the last admission (a few
			// micro-tokens on a slow machine) must stay below one token.
			m := regexp.MustCompile(`^1:(\d+):\d+:r1$`).FindStringSubmatch(v)
			require.Len(t, m, 2, "state %q", v)
			micro, err := strconv.ParseInt(m[1], 10, 64)
			require.NoError(t, err)
			assert.Less(t, micro, int64(policy.RateScale), "state %q: less than one whole token left", v)
		})
	}
}

// Fixed window, sliding counter, GCRA (v2) and sliding log (v3) run their
// lean programs: with and without dedup, batched and not, 32 goroutines on
// one subject admit exactly the limit, and the state is the program's
// under key version 2 (the sliding log: a sorted set of 100 events and the
// sentinel). A 30-day window or period: nothing
// rolls over or is emitted back during the test.
func TestExactAdmissionLeanProgramsBatching(t *testing.T) {
	s := redistest.StartStandalone(t)
	params := policy.RateParameters{Limit: 100, Window: policy.RateMaxWindow}
	decl := func(id string, algo policy.RateAlgorithm, dedup bool) policy.RatePolicyDecl {
		return policy.RatePolicyDecl{ID: id, Revision: "r1", Algorithm: algo, Parameters: params,
			Dimensions: []policy.RateDimension{policy.DimTenant}, Dedup: policy.RateDedup{Enabled: dedup}}
	}
	cases := []struct {
		decl  policy.RatePolicyDecl
		state string
	}{
		{decl("fw", policy.RateFixedWindow, false), `^f1:100:\d+:r1$`},
		{decl("fwd", policy.RateFixedWindow, true), `^f1:100:\d+:r1$`},
		{decl("sc", policy.RateSlidingCounter, false), `^s1:100:0:\d+:r1$`},
		{decl("scd", policy.RateSlidingCounter, true), `^s1:100:0:\d+:r1$`},
		{decl("gc", policy.RateGCRA, false), `^g1:\d+:\d+:r1$`},
		{decl("gcd", policy.RateGCRA, true), `^g1:\d+:\d+:r1$`},
		{decl("sl", policy.RateSlidingLog, false), ""},
		{decl("sld", policy.RateSlidingLog, true), ""},
	}
	decls := make([]policy.RatePolicyDecl, len(cases))
	for i, c := range cases {
		decls[i] = c.decl
	}
	for name, opts := range map[string][]Option{"unbatched": {WithBatching(0, 0)}, "batched": {WithBatching(1, 8)}} {
		f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, opts, decls...)
		for _, c := range cases {
			t.Run(name+"/"+c.decl.ID, func(t *testing.T) {
				k := f.stateKey(t, c.decl.ID, tenant("acme"))
				require.NoError(t, s.Admin().Del(ctxT(t), k.Redis()).Err())
				assert.Equal(t, int64(100), exactAdmission(t, f, c.decl.ID))
				if c.decl.Algorithm == policy.RateSlidingLog {
					assert.Contains(t, k.Redis(), ":kv2:")
					n, err := s.Admin().ZCard(ctxT(t), k.Redis()).Result()
					require.NoError(t, err)
					assert.Equal(t, int64(101), n)
					return
				}
				assert.Contains(t, k.Redis(), ":kv2:")
				v, err := s.Admin().Get(ctxT(t), k.Redis()).Result()
				require.NoError(t, err)
				assert.Regexp(t, c.state, v)
			})
		}
	}
}

// stallRetriedOnce evaluates decl (a dedup policy with a limit of 10) for
// tenant acme, evaluation id eval-1, while the connection stalls: the
// attempt times out, the one retry (which restores the connection) finds
// the first attempt's decision. The caller checks the stored charge.
func stallRetriedOnce(t *testing.T, decl policy.RatePolicyDecl) (*fixture, *redistest.Server, context.Context) {
	t.Helper()
	s := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, s.Addr())
	var retries atomic.Int32
	cfg := Config{Provider: ProviderRedis, AttemptTimeout: 300 * time.Millisecond}
	f := newFixture(t, p.Addr(), s, cfg, []Option{withBeforeRetry(func() { retries.Add(1); p.Passthrough() })}, decl)
	ctx := ctxT(t)
	require.True(t, f.l.Evaluate(ctx, req(decl.ID, "warm")).Allowed(), "loads the script through the proxy")

	p.Stall()
	r := req(decl.ID, "acme")
	r.EvaluationID = "eval-1"
	o := f.l.Evaluate(ctx, r)
	require.Equal(t, Evaluated, o.Kind(), "category %s", o.Category())
	assert.True(t, o.Allowed())
	assert.True(t, o.Replayed(), "the retry found the first attempt's decision")
	assert.Equal(t, int32(1), retries.Load())
	d, _ := o.Decision()
	assert.Equal(t, int64(9), d.Remaining, "the original decision")
	return f, s, ctx
}

// A stalled token-bucket call with dedup is retried once with the same
// evaluation id and charged once, batched or not.
func TestStallTokenBucketWithDedupRetriesOnce(t *testing.T) {
	tb := policy.RatePolicyDecl{ID: "tbd", Revision: "r1", Algorithm: policy.RateTokenBucket,
		Parameters: policy.RateParameters{Capacity: 10, RefillTokens: 1, RefillPeriod: time.Hour},
		Dimensions: []policy.RateDimension{policy.DimTenant}, Dedup: policy.RateDedup{Enabled: true}}
	f, s, ctx := stallRetriedOnce(t, tb)
	v, err := s.Admin().Get(ctx, f.stateKey(t, "tbd", tenant("acme")).Redis()).Result()
	require.NoError(t, err)
	assert.Regexp(t, `^1:9000000:\d+:r1$`, v, "charged exactly once")
}

func TestServerKilledFailureModes(t *testing.T) {
	s := redistest.StartStandalone(t)
	local := func(id string, limit int64) policy.RatePolicyDecl {
		d := fixedWindow(id, limit)
		d.FailureMode = policy.FailLocal
		return d
	}
	open := fixedWindow("open", 100)
	open.FailureMode = policy.FailOpenPolicy
	shadow := fixedWindow("shadow", 1)
	shadow.Shadow = true
	f := newFixture(t, s.Addr(), s, localCfg(), nil,
		fixedWindow("closed", 100), local("local", 100), local("zero", 10), open, shadow)

	ctx := ctxT(t)
	require.Equal(t, Evaluated, f.l.Evaluate(ctx, req("closed", "acme")).Kind(), "warm-up against the live server")
	s.Kill()

	o := f.l.Evaluate(ctx, req("closed", "acme"))
	assert.Equal(t, Unavailable, o.Kind())
	assert.Equal(t, CategoryRedisUnavailable, o.Category())
	assert.False(t, o.Allowed())
	assert.Equal(t, time.Second, o.RetryAfter())

	// perPodLimit = floor(100 × 0.05) = 5.
	for i := 0; i < 5; i++ {
		o = f.l.Evaluate(ctx, req("local", "acme"))
		require.Equal(t, Degraded, o.Kind(), "attempt %d: %s", i, o.Category())
		d, _ := o.Decision()
		assert.True(t, d.Allowed)
		assert.Equal(t, SourceLocalEmergency, d.Source)
		assert.Equal(t, int64(5), d.Limit)
		assert.Equal(t, int64(4-i), d.Remaining)
		assert.Equal(t, ReasonRedisUnavailable, o.Reason())
	}
	o = f.l.Evaluate(ctx, req("local", "acme"))
	require.Equal(t, Degraded, o.Kind())
	assert.False(t, o.Allowed(), "the per-pod limit is enforced")
	assert.Positive(t, o.RetryAfter())
	assert.True(t, f.l.Evaluate(ctx, req("local", "other")).Allowed(), "per subject")

	o = f.l.Evaluate(ctx, req("open", "acme"))
	require.Equal(t, Degraded, o.Kind())
	d, _ := o.Decision()
	assert.True(t, d.Allowed)
	assert.Equal(t, SourceFailOpen, d.Source)

	// floor(10 × 0.05) = 0: that policy never allows locally.
	o = f.l.Evaluate(ctx, req("zero", "acme"))
	assert.Equal(t, Unavailable, o.Kind())
	assert.Equal(t, CategoryLocalExhausted, o.Category())

	o = f.l.Evaluate(ctx, req("shadow", "acme"))
	require.Equal(t, Degraded, o.Kind())
	d, _ = o.Decision()
	assert.True(t, d.Allowed)
	assert.Equal(t, SourceShadow, d.Source)
	assert.False(t, d.ShadowDenied, "nothing was evaluated")

	assert.Equal(t, 7.0, counter(t, f.reg, "caphost_rate_enforcement_total", map[string]string{"policy": "local", "source": "LOCAL_EMERGENCY"}))
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_outcomes_total", map[string]string{"policy": "closed", "kind": "unavailable", "reason": "redis-unavailable"}))
}

func dedupWindow(id string, limit int64) policy.RatePolicyDecl {
	d := fixedWindow(id, limit)
	d.Dedup = policy.RateDedup{Enabled: true}
	return d
}

func TestStallWithDedupRetriesOnceAndChargesOnce(t *testing.T) {
	f, s, ctx := stallRetriedOnce(t, dedupWindow("dd", 10))
	used, err := windowUsed(ctx, s.Admin(), f.stateKey(t, "dd", tenant("acme")))
	require.NoError(t, err)
	assert.Equal(t, int64(1), used, "charged exactly once")
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_dedup_replays_total", map[string]string{"policy": "dd"}))
}

func TestStallWithoutDedupIsIndeterminate(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, s.Addr())
	open := fixedWindow("open", 10)
	open.FailureMode = policy.FailOpenPolicy
	local := fixedWindow("local", 100)
	local.FailureMode = policy.FailLocal
	var retries atomic.Int32
	cfg := localCfg()
	cfg.AttemptTimeout = 200 * time.Millisecond
	f := newFixture(t, p.Addr(), s, cfg, []Option{withBeforeRetry(func() { retries.Add(1) })},
		fixedWindow("closed", 10), open, local)
	ctx := ctxT(t)
	// stalled evaluates id with its write sent and its reply held: a
	// warm-up first leaves one live pooled connection (a fresh dial through
	// a stalled proxy would fail its handshake, provably before send).
	stalled := func(id string) Outcome {
		p.Passthrough()
		require.True(t, f.l.Evaluate(ctx, req(id, "warm")).Allowed())
		p.Stall()
		defer p.Passthrough()
		return f.l.Evaluate(ctx, req(id, "acme"))
	}
	for _, id := range []string{"closed", "open"} {
		o := stalled(id)
		assert.Equal(t, Indeterminate, o.Kind(), id)
		assert.False(t, o.Allowed(), "a timeout is never an allow (%s)", id)
		assert.Equal(t, CategoryTimeout, o.Category())
		_, ok := o.Decision()
		assert.False(t, ok)
	}
	o := stalled("local")
	require.Equal(t, Degraded, o.Kind(), "local emergency may answer a timeout")
	d, _ := o.Decision()
	assert.Equal(t, SourceLocalEmergency, d.Source)
	assert.Equal(t, ReasonTimeout, o.Reason())

	assert.Zero(t, retries.Load(), "no retry without dedup")
	used, err := windowUsed(ctx, s.Admin(), f.stateKey(t, "closed", tenant("acme")))
	require.NoError(t, err)
	assert.Equal(t, int64(1), used, "the stalled write did apply: that is why it is not a failure")
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_indeterminate_total", map[string]string{"policy": "closed"}))
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_indeterminate_total", map[string]string{"policy": "open"}))
}

func TestProgramErrorNeverFallsBack(t *testing.T) {
	s := redistest.StartStandalone(t)
	local := fixedWindow("local", 100)
	local.FailureMode = policy.FailLocal
	f := newFixture(t, s.Addr(), s, localCfg(), nil, local)
	ctx := ctxT(t)
	key := f.stateKey(t, "local", tenant("acme"))
	require.NoError(t, s.Admin().Set(ctx, key.Redis(), "not-a-window", time.Minute).Err())

	o := f.l.Evaluate(ctx, req("local", "acme"))
	assert.Equal(t, Unavailable, o.Kind())
	assert.Equal(t, CategoryMisconfigured, o.Category())
	assert.Zero(t, f.l.local.len(), "the local limiter was not consulted")

	// State of another revision under this key is refused the same way,
	// and so is another type (a hash, v1's layout).
	require.NoError(t, s.Admin().Set(ctx, key.Redis(), "f1:1:1:r0", time.Minute).Err())
	o = f.l.Evaluate(ctx, req("local", "acme"))
	assert.Equal(t, Unavailable, o.Kind())
	assert.Equal(t, CategoryMisconfigured, o.Category())
	require.NoError(t, s.Admin().Del(ctx, key.Redis()).Err())
	require.NoError(t, s.Admin().HSet(ctx, key.Redis(), "v", "1", "rev", "r1", "wid", "1", "used", "1", "ts", "1").Err())
	o = f.l.Evaluate(ctx, req("local", "acme"))
	assert.Equal(t, Unavailable, o.Kind())
	assert.Equal(t, CategoryMisconfigured, o.Category())
}

func TestShadowAlwaysAllowsAndCounts(t *testing.T) {
	s := redistest.StartStandalone(t)
	sh := fixedWindow("sh", 1)
	sh.Shadow = true
	cfg := Config{Provider: ProviderRedis, ShadowSampleLog: ShadowSampleLog{PerMinute: 1}}
	f := newFixture(t, s.Addr(), s, cfg, nil, sh)
	for i := 0; i < 3; i++ {
		o := f.l.Evaluate(ctxT(t), req("sh", "acme"))
		require.Equal(t, Evaluated, o.Kind())
		d, _ := o.Decision()
		assert.True(t, d.Allowed)
		assert.Equal(t, SourceShadow, d.Source)
		assert.Equal(t, i > 0, d.ShadowDenied, "only the evaluations over the limit would have denied")
	}
	assert.Equal(t, 2.0, counter(t, f.reg, "caphost_rate_shadow_would_deny_total", map[string]string{"policy": "sh"}))
}

func TestSwapNewRevisionUsesFreshState(t *testing.T) {
	s := redistest.StartStandalone(t)
	cfg := Config{Provider: ProviderRedis}
	f := newFixture(t, s.Addr(), s, cfg, nil, fixedWindow("p", 2))
	ctx := ctxT(t)
	for i := 0; i < 2; i++ {
		require.True(t, f.l.Evaluate(ctx, req("p", "acme")).Allowed())
	}
	require.False(t, f.l.Evaluate(ctx, req("p", "acme")).Allowed())

	// Same revision, changed limit: refused, old set keeps serving.
	err := f.l.Swap(compile(t, cfg, fixedWindow("p", 5)))
	require.ErrorIs(t, err, ErrRevisionReuse)
	assert.False(t, f.l.Evaluate(ctx, req("p", "acme")).Allowed())

	next := fixedWindow("p", 2)
	next.Revision = "r2"
	require.NoError(t, f.l.Swap(compile(t, cfg, next)))
	o := f.l.Evaluate(ctx, req("p", "acme"))
	require.True(t, o.Allowed(), "new revision, new key, fresh state")
	assert.Equal(t, "r2", o.Revision())

	// A local-emergency policy needs the local limiter.
	loc := fixedWindow("q", 1)
	loc.FailureMode = policy.FailLocal
	require.ErrorIs(t, f.l.Swap(compile(t, localCfg(), loc)), ErrConfig)
}

func TestSwapUnderLoad(t *testing.T) {
	s := redistest.StartStandalone(t)
	cfg := Config{Provider: ProviderRedis}
	f := newFixture(t, s.Addr(), s, cfg, nil, fixedWindow("p", 1_000_000))
	var wg sync.WaitGroup
	var bad atomic.Int32
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if o := f.l.Evaluate(context.Background(), req("p", "acme")); !o.Allowed() {
					bad.Add(1)
				}
			}
		}()
	}
	for i := 2; i < 6; i++ {
		d := fixedWindow("p", 1_000_000)
		d.Revision = "r" + strconv.Itoa(i)
		require.NoError(t, f.l.Swap(compile(t, cfg, d)))
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, bad.Load())
}

func TestHierarchicalConservativeConsumption(t *testing.T) {
	s := redistest.StartStandalone(t)
	tenantP := fixedWindow("tenant", 3)
	route := policy.RatePolicyDecl{ID: "route", Revision: "r1", Algorithm: policy.RateFixedWindow,
		Parameters: policy.RateParameters{Limit: 1, Window: policy.RateMaxWindow},
		Dimensions: []policy.RateDimension{policy.DimTenant, policy.DimRoute}, Hierarchy: "edge"}
	tenantP.Hierarchy = "edge"
	f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, tenantP, route)
	ctx := ctxT(t)
	reqs := func() []Request {
		return []Request{
			req("tenant", "acme"),
			{Policy: "route", Subject: Subject{policy.DimTenant: []byte("acme"), policy.DimRoute: []byte("/export")}, Cost: 1},
		}
	}
	used := func() int64 {
		n, err := windowUsed(ctx, s.Admin(), f.stateKey(t, "tenant", tenant("acme")))
		require.NoError(t, err)
		return n
	}
	o := f.l.EvaluateAll(ctx, reqs())
	require.True(t, o.Allowed())
	d, _ := o.Decision()
	assert.Equal(t, "route", d.Policy, "most restrictive decision (0 remaining)")

	o = f.l.EvaluateAll(ctx, reqs())
	assert.False(t, o.Allowed())
	assert.Equal(t, "route", o.Policy(), "denied by the later policy")
	assert.Equal(t, int64(2), used(), "the tenant quota consumed before the denial stands (no refund)")

	f.l.EvaluateAll(ctx, reqs())
	o = f.l.EvaluateAll(ctx, reqs())
	assert.False(t, o.Allowed())
	assert.Equal(t, "tenant", o.Policy(), "stopped at the first denial")
	assert.Equal(t, int64(3), used())
	assert.Equal(t, []string{"route", "tenant"}, f.l.Policies().Hierarchy("edge"))
}

func TestInvalidRequests(t *testing.T) {
	s := redistest.StartStandalone(t)
	conc := policy.RatePolicyDecl{ID: "conc", Revision: "r1", Algorithm: policy.RateConcurrency,
		Parameters: policy.RateParameters{Limit: 2, PermitTTL: time.Second}, Dimensions: []policy.RateDimension{policy.DimTenant}}
	f := newFixture(t, s.Addr(), s, localCfg(), nil, fixedWindow("p", 10), conc)
	ctx := ctxT(t)
	bad := []Request{
		{Policy: "nope", Subject: tenant("a"), Cost: 1},
		{Policy: "p", Subject: tenant("a"), Cost: 2},
		{Policy: "p", Subject: tenant("a"), Cost: 0},
		{Policy: "p", Subject: Subject{policy.DimPrincipal: []byte("a")}, Cost: 1},
		{Policy: "p", Subject: Subject{policy.DimTenant: []byte("a"), policy.DimRoute: []byte("r")}, Cost: 1},
		{Policy: "p", Subject: tenant(""), Cost: 1},
		{Policy: "p", Subject: tenant(string(make([]byte, 1025))), Cost: 1},
		{Policy: "p", Subject: tenant("a"), Cost: 1, EvaluationID: string(make([]byte, 129))},
	}
	for i, r := range bad {
		o := f.l.Evaluate(ctx, r)
		assert.Equal(t, Unavailable, o.Kind(), "%d", i)
		assert.Equal(t, CategoryInvalidRequest, o.Category(), "%d", i)
	}
	o := f.l.Evaluate(ctx, Request{Policy: "conc", Subject: tenant("a"), Cost: 1})
	assert.Equal(t, CategoryMisconfigured, o.Category(), "concurrency is not evaluated as a rate")
	o = f.l.Evaluate(ctx, Request{Policy: "p", Subject: tenant("a"), Cost: 1, Deadline: time.Now().Add(-time.Second)})
	assert.Equal(t, CategoryDeadline, o.Category())
	assert.Zero(t, f.l.local.len(), "no fallback for invalid requests")
	assert.Equal(t, 8.0, counter(t, f.reg, "caphost_rate_outcomes_total", map[string]string{"kind": "unavailable", "reason": "invalid-request", "policy": "p"})+
		counter(t, f.reg, "caphost_rate_outcomes_total", map[string]string{"kind": "unavailable", "reason": "invalid-request", "policy": "unknown"}))
}

// TestTokenBucketCostsDedupAndCounters drives the pre-rendered token-bucket
// path off its default cost, with dedup, and checks the pre-resolved
// counters count exactly what the generic recorder would.
func TestTokenBucketCostsDedupAndCounters(t *testing.T) {
	s := redistest.StartStandalone(t)
	tb := policy.RatePolicyDecl{ID: "tb", Revision: "r1", Algorithm: policy.RateTokenBucket,
		Parameters: policy.RateParameters{Capacity: 5, RefillTokens: 1, RefillPeriod: time.Hour},
		Dimensions: []policy.RateDimension{policy.DimTenant}, MaxCost: 5}
	tbd := tb
	tbd.ID, tbd.Dedup = "tbd", policy.RateDedup{Enabled: true}
	f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, tb, tbd)
	ctx := ctxT(t)
	eval := func(id string, cost int64, evalID string) Decision {
		t.Helper()
		r := req(id, "acme")
		r.Cost, r.EvaluationID = cost, evalID
		o := f.l.Evaluate(ctx, r)
		require.Equal(t, Evaluated, o.Kind(), o.Category())
		d, _ := o.Decision()
		return d
	}
	for _, step := range []struct {
		cost      int64
		allowed   bool
		remaining int64
	}{{2, true, 3}, {2, true, 1}, {2, false, 1}, {1, true, 0}} {
		d := eval("tb", step.cost, "")
		assert.Equal(t, step.allowed, d.Allowed, "cost %d", step.cost)
		assert.Equal(t, step.remaining, d.Remaining, "cost %d", step.cost)
		assert.Equal(t, int64(5), d.Limit)
	}
	d := eval("tbd", 3, "e-1")
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(2), d.Remaining)
	r := req("tbd", "acme")
	r.Cost, r.EvaluationID = 3, "e-1"
	o := f.l.Evaluate(ctx, r)
	assert.True(t, o.Replayed(), "same evaluation id replays")
	d, _ = o.Decision()
	assert.Equal(t, int64(2), d.Remaining, "a replay consumes nothing")
	assert.Equal(t, int64(2), eval("tbd", 1, "e-2").Remaining+1)

	dec := func(id, decision string) float64 {
		return counter(t, f.reg, "caphost_rate_decisions_total", map[string]string{"policy": id, "revision": "r1", "decision": decision})
	}
	assert.Equal(t, 3.0, dec("tb", "allow"))
	assert.Equal(t, 1.0, dec("tb", "deny"))
	assert.Equal(t, 3.0, dec("tbd", "allow"))
	assert.Equal(t, 4.0, counter(t, f.reg, "caphost_rate_enforcement_total", map[string]string{"policy": "tb", "source": string(SourceGlobalRedis)}))
	assert.Equal(t, 4.0, counter(t, f.reg, "caphost_rate_outcomes_total", map[string]string{"policy": "tb", "kind": "evaluated", "reason": "none"}))
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_dedup_replays_total", map[string]string{"policy": "tbd"}))
	assert.Equal(t, 0.0, counter(t, f.reg, "caphost_rate_dedup_replays_total", map[string]string{"policy": "tb"}))
}
