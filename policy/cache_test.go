package policy

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func cacheOpts() CacheCompileOptions {
	return CacheCompileOptions{
		PathPrefix: "capabilities.cache.regions", Defaults: DefaultCacheOps(), Bounds: DefaultCacheBounds(),
		Codecs: map[string]CacheCodecInfo{
			CacheBuiltinCodec: {Source: "builtin", WriteVersion: 1, Readable: []uint32{1}},
			"product":         {Source: "guest:codec", WriteVersion: 2, Readable: []uint32{2, 1}},
		},
		JitterStrategy: "test-strategy",
	}
}

func configRegion(id string) CacheRegionDecl {
	return CacheRegionDecl{ID: id, Source: "config", KeyVersion: 1, Codec: CacheBuiltinCodec,
		SoftTTL: 30 * time.Second, HardTTL: 5 * time.Minute, NegativeTTL: 10 * time.Second, Jitter: 0.1, MaxBytes: 64 << 10}
}

func problemRules(t *testing.T, err error) []Rule {
	t.Helper()
	var ve *ValidationError
	require.True(t, errors.As(err, &ve), "want a *ValidationError, got %v", err)
	var out []Rule
	for _, p := range ve.Problems {
		out = append(out, p.Rule)
	}
	return out
}

func TestCompileCacheRegionsDefaults(t *testing.T) {
	set, err := CompileCacheRegions([]CacheRegionDecl{configRegion("products")}, cacheOpts())
	require.NoError(t, err)
	p, ok := set.Lookup("products")
	require.True(t, ok)
	assert.Equal(t, CacheBoundedStaleness, p.Consistency)
	assert.Equal(t, CacheStampedeDistributed, p.Stampede)
	assert.Equal(t, DefaultCacheOps(), p.Ops)
	assert.Equal(t, uint32(1), p.CodecWrite)
	assert.Empty(t, p.Clamped)
	assert.Regexp(t, `^[0-9a-f]{64}$`, p.Digest)
	assert.Equal(t, "config-"+p.Digest[:12], p.Revision)
	assert.Equal(t, 64<<10+CacheEnvelopeOverhead, p.MaxStoredBytes())
	assert.Equal(t, DefaultCacheOps().LeaseTTL+time.Second, p.TombstoneTTL())
	assert.Equal(t, []string{"products"}, set.IDs())
	assert.False(t, set.UsesL1())
}

// TestCompileCacheRegionsClampsGuestsRefusesConfig: the operator's bounds
// clamp what a guest declares (and the clamp is recorded), while the same
// values in configuration are refused, so an operator never silently gets
// less than they wrote.
func TestCompileCacheRegionsClampsGuestsRefusesConfig(t *testing.T) {
	o := cacheOpts()
	o.Bounds.MaxHardTTL = time.Hour
	o.Bounds.MaxNegativeTTL = time.Second
	o.Bounds.MaxBytes = 1024
	o.Bounds.MaxJitter = 0.05
	d := configRegion("products")
	d.HardTTL = 2 * time.Hour
	d.NegativeTTL = time.Minute
	d.MaxBytes = 4096
	d.Jitter = 0.2
	d.L1 = true
	d.Consistency = CacheReadAfterInvalidation

	_, err := CompileCacheRegions([]CacheRegionDecl{d}, o)
	assert.ElementsMatch(t, []Rule{RuleCacheTTL, RuleCacheTTL, RuleCacheBytes, RuleCacheJitter, RuleCacheL1}, problemRules(t, err))

	d.Source = "guest:regions"
	set, err := CompileCacheRegions([]CacheRegionDecl{d}, o)
	require.NoError(t, err)
	p, _ := set.Lookup("products")
	assert.Equal(t, time.Hour, p.HardTTL)
	assert.Equal(t, time.Second, p.NegativeTTL)
	assert.Equal(t, 1024, p.MaxBytes)
	assert.InDelta(t, 0.05, p.Jitter, 1e-12)
	assert.False(t, p.L1, "a strict region gets no L1")
	assert.Equal(t, []string{"jitter", "l1", "max-bytes", "ttl.hard", "ttl.negative"}, p.Clamped)
	assert.Equal(t, "guest-"+p.Digest[:12], p.Revision)

	o = cacheOpts()
	o.Bounds.AllowL1 = false
	d = configRegion("search")
	d.L1 = true
	_, err = CompileCacheRegions([]CacheRegionDecl{d}, o)
	assert.Equal(t, []Rule{RuleCacheL1}, problemRules(t, err))
}

func TestCompileCacheRegionsReportsEveryProblem(t *testing.T) {
	bad := CacheRegionDecl{ID: "Bad Id", Source: "config"}
	dup := configRegion("products")
	dup.Source = "guest:other"
	unknownCodec := configRegion("search")
	unknownCodec.Codec = "nope"
	ops := configRegion("ops")
	o := DefaultCacheOps()
	o.Shards = 0
	o.LeaseWait = 2 * o.LeaseTTL
	ops.Ops = &o
	consistency := configRegion("c")
	consistency.Consistency = "strong"
	consistency.Stampede = "global-lock"
	ttl := configRegion("t")
	ttl.HardTTL = 0
	ttl.SoftTTL = -1
	ttl.Jitter = 0.9
	ttl.MaxBytes = 0
	ttl.KeyVersion = 0

	_, err := CompileCacheRegions([]CacheRegionDecl{configRegion("products"), bad, dup, unknownCodec, ops, consistency, ttl}, cacheOpts())
	assert.ElementsMatch(t, []Rule{RuleCacheID, RuleCacheDuplicate, RuleCacheCodec, RuleCacheOps, RuleCacheOps,
		RuleCacheConsistency, RuleCacheStampede, RuleCacheTTL, RuleCacheTTL, RuleCacheJitter, RuleCacheBytes, RuleCacheID},
		problemRules(t, err)) // ttl: hard 0 and soft negative; nothing is checked against an invalid hard TTL
	assert.NotContains(t, err.Error(), "Bad Id\n", "ids are quoted and bounded")
}

func TestCacheRegionDigestTracksBehaviour(t *testing.T) {
	base := configRegion("products")
	digest := func(d CacheRegionDecl, mut func(*CacheCompileOptions)) string {
		o := cacheOpts()
		if mut != nil {
			mut(&o)
		}
		set, err := CompileCacheRegions([]CacheRegionDecl{d}, o)
		require.NoError(t, err)
		p, _ := set.Lookup(d.ID)
		return p.Digest
	}
	ref := digest(base, nil)
	assert.Equal(t, ref, digest(base, nil), "deterministic")
	for name, change := range map[string]func(*CacheRegionDecl, *CacheCompileOptions){
		"soft ttl":    func(d *CacheRegionDecl, _ *CacheCompileOptions) { d.SoftTTL += time.Millisecond },
		"jitter":      func(d *CacheRegionDecl, _ *CacheCompileOptions) { d.Jitter = 0.2 },
		"key version": func(d *CacheRegionDecl, _ *CacheCompileOptions) { d.KeyVersion = 2 },
		"shards":      func(_ *CacheRegionDecl, o *CacheCompileOptions) { o.Defaults.Shards = 8 },
		"strategy":    func(_ *CacheRegionDecl, o *CacheCompileOptions) { o.JitterStrategy = "other" },
		"codec write": func(d *CacheRegionDecl, o *CacheCompileOptions) {
			d.Codec = "product"
			o.Codecs["product"] = CacheCodecInfo{WriteVersion: 3, Readable: []uint32{3}}
		},
		"stale if error": func(d *CacheRegionDecl, _ *CacheCompileOptions) { d.StaleIfError = true },
	} {
		d := base
		var optMut func(*CacheCompileOptions)
		optMut = func(o *CacheCompileOptions) { change(&d, o) }
		o := cacheOpts()
		optMut(&o)
		set, err := CompileCacheRegions([]CacheRegionDecl{d}, o)
		require.NoError(t, err, name)
		p, _ := set.Lookup(d.ID)
		assert.NotEqual(t, ref, p.Digest, name)
	}
}

func TestCacheRegionMinTTLFollowsShortestTTL(t *testing.T) {
	d := configRegion("tiny")
	d.SoftTTL, d.HardTTL, d.NegativeTTL = 0, 2*time.Second, 200*time.Millisecond
	o := cacheOpts()
	o.Bounds.MinHardTTL = time.Second
	set, err := CompileCacheRegions([]CacheRegionDecl{d}, o)
	require.NoError(t, err)
	p, _ := set.Lookup("tiny")
	assert.Equal(t, 200*time.Millisecond, p.Ops.MinTTL, "a TTL below the default minimum lowers it")
	assert.Zero(t, p.SoftTTL)

	d.SoftTTL = d.HardTTL
	set, err = CompileCacheRegions([]CacheRegionDecl{d}, o)
	require.NoError(t, err)
	p, _ = set.Lookup("tiny")
	assert.Zero(t, p.SoftTTL, "soft equal to hard is no stale window")
}

// TestCacheLeaseTTLCoversTheLoadTimeout: the refresh lease must outlive
// the load its holder runs, or another host claims the expired lease and
// loads the same key again mid-refresh. A shorter lease is refused where
// it is written, in the defaults or a region's overrides; a lease or a
// timeout out of its own range is reported once, by its own rule.
func TestCacheLeaseTTLCoversTheLoadTimeout(t *testing.T) {
	const (
		defaults = "capabilities.cache.defaults"
		region   = "capabilities.cache.regions.products"
	)
	ops := func(lease, load time.Duration) CacheOps {
		o := DefaultCacheOps()
		o.LeaseTTL, o.LoadTimeout, o.LeaseWait = lease, load, 0
		return o
	}
	for name, tc := range map[string]struct {
		defaults CacheOps
		override *CacheOps
		path     string // "": valid
		message  string
	}{
		"defaults":                      {defaults: DefaultCacheOps()},
		"equal":                         {defaults: ops(5*time.Second, 5*time.Second)},
		"longer":                        {defaults: ops(time.Minute, 5*time.Second)},
		"shorter in defaults":           {defaults: ops(2*time.Second, 5*time.Second), path: defaults + ".refresh-lease.ttl", message: "2s is shorter than single-flight.load-timeout 5s"},
		"a millisecond short":           {defaults: ops(4999*time.Millisecond, 5*time.Second), path: defaults + ".refresh-lease.ttl", message: "raise it to at least 5s"},
		"shorter in an override":        {defaults: DefaultCacheOps(), override: new(ops(time.Second, 3*time.Second)), path: region + ".refresh-lease.ttl", message: "1s is shorter than single-flight.load-timeout 3s"},
		"override raises the timeout":   {defaults: DefaultCacheOps(), override: new(ops(DefaultCacheOps().LeaseTTL, time.Minute)), path: region + ".refresh-lease.ttl", message: "6s is shorter than single-flight.load-timeout 1m0s"},
		"override raises both":          {defaults: DefaultCacheOps(), override: new(ops(time.Minute, time.Minute))},
		"lease out of range":            {defaults: ops(0, 5*time.Second), path: defaults + ".refresh-lease.ttl", message: "must be whole milliseconds"},
		"timeout out of range":          {defaults: ops(time.Second, 0), path: defaults + ".single-flight.load-timeout", message: "must be within 1ms"},
		"timeout over its bound":        {defaults: ops(CacheMaxLeaseTTL, CacheMaxLoadTimeout+time.Second), path: defaults + ".single-flight.load-timeout", message: "must be within 1ms"},
		"the longest timeout is leased": {defaults: ops(CacheMaxLoadTimeout, CacheMaxLoadTimeout)},
	} {
		t.Run(name, func(t *testing.T) {
			o := cacheOpts()
			o.Defaults = tc.defaults
			d := configRegion("products")
			d.Ops = tc.override
			_, err := CompileCacheRegions([]CacheRegionDecl{d}, o)
			if tc.path == "" {
				require.NoError(t, err)
				return
			}
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.Len(t, ve.Problems, 1, "one problem, at the value written: %v", err)
			assert.Equal(t, tc.path, ve.Problems[0].Path)
			assert.Equal(t, RuleCacheOps, ve.Problems[0].Rule)
			assert.Contains(t, ve.Problems[0].Message, tc.message)
		})
	}
}
