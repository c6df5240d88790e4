package policy

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateRateGolden = flag.Bool("update-rate-golden", false, "rewrite testdata/rate/digests.json")

func goldenRateDecls() []RatePolicyDecl {
	return []RatePolicyDecl{
		{ID: "login", Revision: "v3", Algorithm: RateTokenBucket, Critical: true,
			Parameters: RateParameters{Capacity: 10, RefillTokens: 10, RefillPeriod: time.Minute},
			Dimensions: []RateDimension{DimRoute, DimClientIP}},
		{ID: "api", Revision: "r1", Algorithm: RateFixedWindow, MaxCost: 5,
			Parameters: RateParameters{Limit: 100, Window: time.Second}, Dimensions: []RateDimension{DimTenant},
			FailureMode: FailLocal, Dedup: RateDedup{Enabled: true}, Hierarchy: "edge"},
		{ID: "smooth", Revision: "r1", Algorithm: RateSlidingCounter, Parameters: RateParameters{Limit: 50, Window: time.Minute},
			Dimensions: []RateDimension{DimPrincipal, DimRoute}, FailureMode: FailOpenPolicy, Shadow: true},
		{ID: "everyone", Revision: "r2", Algorithm: RateGCRA, Parameters: RateParameters{Limit: 1000, Window: time.Second},
			Dimensions: []RateDimension{DimGlobal}},
		{ID: "exports", Revision: "r1", Algorithm: RateSlidingLog, Parameters: RateParameters{Limit: 10, Window: time.Hour},
			Dimensions: []RateDimension{DimAPIKey}},
		{ID: "uploads", Revision: "r1", Algorithm: RateConcurrency, Parameters: RateParameters{Limit: 4, PermitTTL: 30 * time.Second},
			Dimensions: []RateDimension{DimPrincipal}},
	}
}

var testLocal = &RateLocalEmergency{AssumedMaxPods: 20, PerPodShare: 0.025}

func TestCompileRatePoliciesGoldenDigests(t *testing.T) {
	set, err := CompileRatePolicies(goldenRateDecls(), RateCompileOptions{LocalEmergency: testLocal})
	require.NoError(t, err)
	got := map[string]string{"@set": set.Digest()}
	for _, id := range set.IDs() {
		p, _ := set.Policy(id)
		got[id] = p.Digest
	}
	path := filepath.Join("testdata", "rate", "digests.json")
	if *updateRateGolden {
		b, _ := json.MarshalIndent(got, "", "  ")
		require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update-rate-golden once")
	var want map[string]string
	require.NoError(t, json.Unmarshal(b, &want))
	assert.Equal(t, want, got, "a digest changed: the canonical encoding is a contract")

	// Declaration order of dimensions does not matter; a changed parameter does.
	d := goldenRateDecls()
	d[0].Dimensions = []RateDimension{DimClientIP, DimRoute}
	again, err := CompileRatePolicies(d, RateCompileOptions{LocalEmergency: testLocal})
	require.NoError(t, err)
	assert.Equal(t, set.Digest(), again.Digest())
	d[0].Parameters.Capacity = 11
	changed, err := CompileRatePolicies(d, RateCompileOptions{LocalEmergency: testLocal})
	require.NoError(t, err)
	assert.NotEqual(t, set.Digest(), changed.Digest())
}

func TestCompileRatePoliciesDefaultsAndFreeze(t *testing.T) {
	set, err := CompileRatePolicies(goldenRateDecls(), RateCompileOptions{LocalEmergency: testLocal})
	require.NoError(t, err)
	p, ok := set.Policy("login")
	require.True(t, ok)
	assert.Equal(t, FailClosed, p.FailureMode)
	assert.Equal(t, int64(1), p.MaxCost)
	assert.Equal(t, []RateDimension{DimClientIP, DimRoute}, p.Dimensions, "canonical order")
	assert.Equal(t, "login--v3", p.KeyRegion())
	assert.Equal(t, int64(10), p.Limit())
	api, _ := set.Policy("api")
	assert.Equal(t, RateDedup{Enabled: true, TTL: DefaultRateDedupTTL, MaxEntries: DefaultRateDedupEntries}, api.Dedup)
	assert.InDelta(t, 0.025, api.PerPodShare, 1e-12)
	assert.Equal(t, []string{"api"}, set.Hierarchy("edge"))

	// Mutating a returned copy never changes the set.
	p.Dimensions[0] = DimTenant
	p.Revision = "x"
	again, _ := set.Policy("login")
	assert.Equal(t, []RateDimension{DimClientIP, DimRoute}, again.Dimensions)
	assert.Equal(t, "v3", again.Revision)
	_, ok = set.Policy("nope")
	assert.False(t, ok)
}

func TestCompileRatePoliciesReportsEveryProblem(t *testing.T) {
	decls := []RatePolicyDecl{
		{ID: "Bad_ID", Revision: "", Algorithm: "leaky", Dimensions: nil},
		{ID: "open-crit", Revision: "r1", Algorithm: RateFixedWindow, Parameters: RateParameters{Limit: 1, Window: time.Second},
			Dimensions: []RateDimension{DimTenant}, FailureMode: FailOpenPolicy, Critical: true},
		{ID: "open-global", Revision: "r1", Algorithm: RateFixedWindow, Parameters: RateParameters{Limit: 1, Window: time.Second},
			Dimensions: []RateDimension{DimGlobal}, FailureMode: FailOpenPolicy},
		{ID: "share", Revision: "r1", Algorithm: RateFixedWindow, Parameters: RateParameters{Limit: 100, Window: time.Second},
			Dimensions: []RateDimension{DimTenant}, FailureMode: FailLocal, PerPodShare: 0.1},
		{ID: "params", Revision: "r1", Algorithm: RateTokenBucket,
			Parameters: RateParameters{Capacity: 0, RefillTokens: 1, RefillPeriod: 1500 * time.Microsecond, Limit: 3},
			Dimensions: []RateDimension{DimTenant, DimTenant, "ssn"}, MaxCost: 0},
		{ID: "log", Revision: "r1", Algorithm: RateSlidingLog, Parameters: RateParameters{Limit: 10001, Window: 31 * 24 * time.Hour},
			Dimensions: []RateDimension{DimGlobal, DimRoute}, MaxCost: 2, Dedup: RateDedup{TTL: time.Second}},
		{ID: "dedup", Revision: "a--b", Algorithm: RateGCRA, Parameters: RateParameters{Limit: 5, Window: time.Second},
			Dimensions: []RateDimension{DimTenant}, Dedup: RateDedup{Enabled: true, MaxEntries: 5000}, MaxClockStep: -1},
		{ID: "log", Revision: "r2"},
	}
	_, err := CompileRatePolicies(decls, RateCompileOptions{LocalEmergency: testLocal})
	require.Error(t, err)
	require.ErrorIs(t, err, ErrInvalid)
	var verr *ValidationError
	require.ErrorAs(t, err, &verr)
	for _, r := range []Rule{RuleRateID, RuleRateRevision, RuleRateAlgorithm, RuleRateDimensions, RuleRateFailOpen, RuleRateLocal,
		RuleRateParameters, RuleRateCost, RuleRateDedup, RuleRateClock, RuleRateDuplicate} {
		assert.True(t, verr.Has(r), "missing %s in:\n%v", r, err)
	}
	var failOpen int
	for _, p := range verr.Problems {
		if p.Rule == RuleRateFailOpen {
			failOpen++
		}
	}
	assert.Equal(t, 2, failOpen, "critical and global fail-open are both rejected")
}

func TestCompileRateLocalEmergencyNeedsProvider(t *testing.T) {
	d := []RatePolicyDecl{{ID: "a", Revision: "r1", Algorithm: RateFixedWindow, Parameters: RateParameters{Limit: 1, Window: time.Second},
		Dimensions: []RateDimension{DimTenant}, FailureMode: FailLocal}}
	_, err := CompileRatePolicies(d, RateCompileOptions{})
	var verr *ValidationError
	require.ErrorAs(t, err, &verr)
	assert.True(t, verr.Has(RuleRateLocal))
	// share × pods exactly 1 is allowed.
	_, err = CompileRatePolicies(d, RateCompileOptions{LocalEmergency: &RateLocalEmergency{AssumedMaxPods: 4, PerPodShare: 0.25}})
	require.NoError(t, err)
	_, err = CompileRatePolicies(d, RateCompileOptions{LocalEmergency: &RateLocalEmergency{AssumedMaxPods: 5, PerPodShare: 0.25}})
	require.ErrorAs(t, err, &verr)
	assert.True(t, verr.Has(RuleRateLocal))
}

func TestRateTokenBucketBounds(t *testing.T) {
	tb := func(capacity, refill int64, period time.Duration) error {
		_, err := CompileRatePolicies([]RatePolicyDecl{{ID: "t", Revision: "r1", Algorithm: RateTokenBucket,
			Parameters: RateParameters{Capacity: capacity, RefillTokens: refill, RefillPeriod: period},
			Dimensions: []RateDimension{DimTenant}}}, RateCompileOptions{})
		return err
	}
	require.NoError(t, tb(10, 10, time.Minute))
	require.Error(t, tb(1_000_000, 1, 30*24*time.Hour), "capacity × period over 2^52")
	require.Error(t, tb(1000, 1, 24*time.Hour), "full refill beyond 30 days")
	require.NoError(t, tb(4503, 1, time.Millisecond))
}

func TestRateSlugsAreInjectiveInRegion(t *testing.T) {
	assert.NotEmpty(t, rateSlugProblem("a--b", 32))
	assert.NotEmpty(t, rateSlugProblem("a-", 32))
	assert.NotEmpty(t, rateSlugProblem("-a", 32))
	assert.Empty(t, rateSlugProblem("a-b-c", 32))
	assert.Len(t, RateRules(), 15)
}

func FuzzCompileRatePolicies(f *testing.F) {
	f.Add("login", "v3", "token-bucket", int64(10), int64(60000), "client-ip,route", 0.5)
	f.Add("x", "r", "fixed-window", int64(-1), int64(0), "global", 2.0)
	f.Fuzz(func(t *testing.T, id, rev, alg string, n, ms int64, dims string, share float64) {
		var ds []RateDimension
		for _, d := range splitComma(dims) {
			ds = append(ds, RateDimension(d))
		}
		decl := RatePolicyDecl{ID: id, Revision: rev, Algorithm: RateAlgorithm(alg), Dimensions: ds, PerPodShare: share,
			FailureMode: FailLocal, Parameters: RateParameters{Limit: n, Window: time.Duration(ms) * time.Millisecond,
				Capacity: n, RefillTokens: n, RefillPeriod: time.Duration(ms) * time.Millisecond}}
		set, err := CompileRatePolicies([]RatePolicyDecl{decl}, RateCompileOptions{LocalEmergency: testLocal})
		if err != nil {
			return
		}
		p, ok := set.Policy(id)
		require.True(t, ok)
		require.Empty(t, rateSlugProblem(p.KeyRegion()[:len(p.ID)], RateMaxIDBytes))
		require.LessOrEqual(t, p.PerPodShare*float64(testLocal.AssumedMaxPods), 1+1e-9)
		require.Len(t, p.Digest, 64)
	})
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// TestRateWindowBounds: a fixed window may be up to 366 days (a year, for
// envoyproxy/ratelimit's unit YEAR, runs rate-fixed-window-v3); every other
// algorithm keeps 30 days, and a longer window there is a problem at its
// path that says only fixed-window takes it.
func TestRateWindowBounds(t *testing.T) {
	const day = 24 * time.Hour
	compile := func(algo RateAlgorithm, w time.Duration) error {
		d := RatePolicyDecl{ID: "w", Revision: "r1", Algorithm: algo, Parameters: RateParameters{Limit: 10, Window: w},
			Dimensions: []RateDimension{DimTenant}}
		if algo == RateTokenBucket {
			d.Parameters = RateParameters{Capacity: 1, RefillTokens: 1, RefillPeriod: w}
		}
		_, err := CompileRatePolicies([]RatePolicyDecl{d}, RateCompileOptions{PathPrefix: "p"})
		return err
	}
	assert.Equal(t, 366*day, RateMaxFixedWindow)
	for _, w := range []time.Duration{time.Millisecond, 30 * day, 30*day + time.Millisecond, 365 * day, RateMaxFixedWindow} {
		require.NoError(t, compile(RateFixedWindow, w), "fixed-window %s", w)
	}
	for _, w := range []time.Duration{RateMaxFixedWindow + time.Millisecond, 400 * day, 365*day + time.Microsecond, 0} {
		err := compile(RateFixedWindow, w)
		var verr *ValidationError
		require.ErrorAs(t, err, &verr, "fixed-window %s", w)
		require.Len(t, verr.Problems, 1)
		assert.Equal(t, "p.w.window", verr.Problems[0].Path)
		assert.Equal(t, RuleRateParameters, verr.Problems[0].Rule)
		assert.Contains(t, verr.Problems[0].Message, "within 1ms..8784h0m0s (366 days)")
	}
	for algo, field := range map[RateAlgorithm]string{RateSlidingCounter: "window", RateGCRA: "window", RateSlidingLog: "window", RateTokenBucket: "refill-period"} {
		require.NoError(t, compile(algo, 30*day), "%s 30 days", algo)
		for _, w := range []time.Duration{30*day + time.Millisecond, 365 * day, RateMaxFixedWindow} {
			err := compile(algo, w)
			var verr *ValidationError
			require.ErrorAs(t, err, &verr, "%s %s", algo, w)
			require.Len(t, verr.Problems, 1, "%v", err)
			assert.Equal(t, "p.w."+field, verr.Problems[0].Path)
			assert.Contains(t, verr.Problems[0].Message, "longer than 720h0m0s (30 days), the most "+string(algo)+" allows; only fixed-window takes a window up to 8784h0m0s (366 days)")
		}
		var verr *ValidationError
		require.ErrorAs(t, compile(algo, 400*day), &verr)
		assert.Contains(t, verr.Problems[0].Message, "within 1ms..720h0m0s")
	}
}
