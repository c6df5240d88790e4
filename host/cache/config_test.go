package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

func decodeYAML(t *testing.T, block string, guests bool) (Config, error) {
	t.Helper()
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(block), &raw))
	delete(raw, "provider")
	delete(raw, "redis-role")
	return Decode(ProviderRedis, policy.RoleCache, raw, guests)
}

func problems(t *testing.T, err error) map[string]policy.Rule {
	t.Helper()
	var ve *policy.ValidationError
	require.True(t, errors.As(err, &ve), "want a *ValidationError, got %v", err)
	out := map[string]policy.Rule{}
	for _, p := range ve.Problems {
		out[p.Path] = p.Rule
	}
	return out
}

func TestDecodeExample(t *testing.T) {
	cfg, err := decodeYAML(t, example, false)
	require.NoError(t, err)
	require.Len(t, cfg.Regions, 1)
	r := cfg.Regions[0]
	assert.Equal(t, "products", r.ID)
	assert.Equal(t, policy.CacheBuiltinCodec, r.Codec)
	assert.Equal(t, 30*time.Second, r.SoftTTL)
	assert.Equal(t, 5*time.Minute, r.HardTTL)
	assert.Equal(t, 10*time.Second, r.NegativeTTL)
	assert.Nil(t, r.Ops, "no override: the defaults apply")
	assert.Equal(t, policy.DefaultCacheOps(), cfg.Defaults)
}

// TestDecodeReportsEveryProblem: unknown keys (also case variants), wrong
// types, out-of-range values, a literal where a secret belongs and an L1
// region without a hint secret are all reported, at once, at their paths.
func TestDecodeReportsEveryProblem(t *testing.T) {
	_, err := decodeYAML(t, `
defaults:
  shards: 0
  single-flight: {max-keys: 10, Max-Waiters: 3}
  refresh-lease: {ttl: 100ms, wait: 1s}
bounds: {max-jitter: 0.9, l1: maybe}
hints: {hmac: "literal-secret-value-that-is-long-enough", window: 1h}
regions:
  products:
    ttl: {hard: 5m, soft: 10m}
    codec: product
    l1: true
    stampede: global-lock
    shards: 300
  Bad_Id:
    ttl: {hard: 1m}
  no-ttl: {codec: bytes}
  typo: {ttl: {hard: 1m}, jiter: 0.1}
`, false)
	ps := problems(t, err)
	for path, rule := range map[string]policy.Rule{
		"capabilities.cache.defaults.shards":                    policy.RuleType,
		"capabilities.cache.defaults.single-flight.Max-Waiters": policy.RuleUnknownKey,
		"capabilities.cache.defaults.refresh-lease.wait":        policy.RuleCacheOps,
		"capabilities.cache.bounds.max-jitter":                  policy.RuleCacheBounds,
		"capabilities.cache.bounds.l1":                          policy.RuleType,
		"capabilities.cache.hints.hmac":                         policy.RuleSecretLiteral,
		"capabilities.cache.hints.window":                       policy.RuleCacheHints,
		"capabilities.cache.regions.products.ttl.soft":          policy.RuleCacheTTL,
		"capabilities.cache.regions.products.codec":             policy.RuleCacheCodec,
		"capabilities.cache.regions.products.stampede":          policy.RuleCacheStampede,
		"capabilities.cache.regions.products.shards":            policy.RuleType,
		"capabilities.cache.regions":                            policy.RuleCacheID,
		"capabilities.cache.regions.no-ttl.ttl":                 policy.RuleCacheTTL,
		"capabilities.cache.regions.typo.jiter":                 policy.RuleUnknownKey,
	} {
		assert.Equal(t, rule, ps[path], "%s in %v", path, ps)
	}
	assert.NotContains(t, err.Error(), "literal-secret-value", "a rejected literal is never echoed")
}

func TestDecodeHints(t *testing.T) {
	block := map[string]any{
		"hints":   map[string]any{"hmac": policy.NewSecret([]byte("0123456789abcdef0123456789abcdef")), "window": "10s"},
		"regions": map[string]any{"p": map[string]any{"ttl": map[string]any{"hard": "1m"}, "l1": true}},
	}
	cfg, err := Decode(ProviderRedis, "", block, false)
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, cfg.HintWindow)
	assert.Equal(t, policy.RoleCache, cfg.Role)
	assert.Equal(t, 32, cfg.HintSecret.Len())

	delete(block, "hints")
	_, err = Decode(ProviderRedis, "", block, false)
	assert.Equal(t, policy.RuleCacheHints, problems(t, err)["capabilities.cache.hints.hmac"], "L1 needs a hint secret")

	block["hints"] = map[string]any{"hmac": policy.NewSecret([]byte("short"))}
	_, err = Decode(ProviderRedis, "", block, false)
	assert.Equal(t, policy.RuleCacheHints, problems(t, err)["capabilities.cache.hints.hmac"], "a short secret is refused")
}

// TestDecodeGenerationTrust: generation-trust is read in defaults and per
// region, bounded, compiled to 0 in a strict region, and refused where the
// host could not act on it: written on a strict region, or anywhere
// without a hint secret (trust needs the hints).
func TestDecodeGenerationTrust(t *testing.T) {
	// decode decodes block, with a hint secret when hints (the loader
	// resolves secret references before Decode sees them).
	decode := func(block string, hints bool) (Config, error) {
		var raw map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(block), &raw))
		if hints {
			raw["hints"] = map[string]any{"hmac": policy.NewSecret([]byte("0123456789abcdef0123456789abcdef"))}
		}
		return Decode(ProviderRedis, policy.RoleCache, raw, false)
	}
	cfg, err := decode(`
defaults: {generation-trust: 250ms}
regions:
  p: {ttl: {hard: 1m}}
  q: {ttl: {hard: 1m}, generation-trust: 0s}
  s: {ttl: {hard: 1m}, consistency: read-after-invalidation}
`, true)
	require.NoError(t, err)
	assert.Equal(t, 250*time.Millisecond, cfg.Defaults.GenerationTrust)
	assert.Equal(t, time.Second, policy.DefaultCacheOps().GenerationTrust, "the default")
	set, err := policy.CompileCacheRegions(cfg.Regions, cfg.compileOptions(map[string]policy.CacheCodecInfo{
		policy.CacheBuiltinCodec: BuiltinCodecInfo()}))
	require.NoError(t, err)
	got := map[string]time.Duration{}
	for _, id := range []string{"p", "q", "s"} {
		p, ok := set.Lookup(id)
		require.True(t, ok, id)
		got[id] = p.Ops.GenerationTrust
	}
	assert.Equal(t, map[string]time.Duration{"p": 250 * time.Millisecond, "q": 0, "s": 0}, got,
		"a strict region never trusts, whatever the defaults say")

	for _, tc := range []struct {
		block string
		hints bool
		want  map[string]policy.Rule
	}{
		{"regions: {p: {ttl: {hard: 1m}, generation-trust: 2m}}", true,
			map[string]policy.Rule{"capabilities.cache.regions.p.generation-trust": policy.RuleCacheOps}},
		{"regions: {p: {ttl: {hard: 1m}, generation-trust: -1s}}", true,
			map[string]policy.Rule{"capabilities.cache.regions.p.generation-trust": policy.RuleCacheOps}},
		{"regions: {p: {ttl: {hard: 1m}, generation-trust: 1s, consistency: source-revision-guarded}}", true,
			map[string]policy.Rule{"capabilities.cache.regions.p.generation-trust": policy.RuleCacheConsistency}},
		{"defaults: {generation-trust: 1s}\nregions: {p: {ttl: {hard: 1m}}}", false,
			map[string]policy.Rule{"capabilities.cache.defaults.generation-trust": policy.RuleCacheHints}},
		{"regions: {p: {ttl: {hard: 1m}, l1: true, generation-trust: 2s}, q: {ttl: {hard: 1m}, generation-trust: 3s}}", false,
			map[string]policy.Rule{"capabilities.cache.hints.hmac": policy.RuleCacheHints,
				"capabilities.cache.regions.p.generation-trust": policy.RuleCacheHints,
				"capabilities.cache.regions.q.generation-trust": policy.RuleCacheHints}},
	} {
		_, err := decode(tc.block, tc.hints)
		assert.Equal(t, tc.want, problems(t, err), tc.block)
	}
	_, err = decode("regions: {p: {ttl: {hard: 1m}, generation-trust: 0s}}", false)
	require.NoError(t, err, "0 needs no hints")
	_, err = decode("regions: {p: {ttl: {hard: 1m}}}", false)
	require.NoError(t, err, "the default needs no hints: without them no host trusts")
}

// TestDecodeGuestsMayDeclareRegions: with guest modules the block may hold
// no region, and a configured region may name a codec a guest will
// declare; without guests both are refused.
func TestDecodeGuestsMayDeclareRegions(t *testing.T) {
	_, err := decodeYAML(t, "defaults: {shards: 8}\n", true)
	require.NoError(t, err)
	_, err = decodeYAML(t, "defaults: {shards: 8}\n", false)
	assert.Equal(t, policy.RuleCacheCount, problems(t, err)["capabilities.cache.regions"])
	_, err = decodeYAML(t, "regions: {p: {ttl: {hard: 1m}, codec: product}}\n", true)
	require.NoError(t, err)
	_, err = decodeYAML(t, "regions: {p: {ttl: {hard: 1m}, codec: product}}\n", false)
	assert.Equal(t, policy.RuleCacheCodec, problems(t, err)["capabilities.cache.regions.p.codec"])
}

// TestDecodeLeaseTTLCoversTheLoadTimeout: a refresh lease shorter than the
// load timeout is refused where the block makes it so — the defaults, or a
// region whose overrides shorten the lease or lengthen the timeout past
// it — with a message naming both values.
func TestDecodeLeaseTTLCoversTheLoadTimeout(t *testing.T) {
	for name, tc := range map[string]struct {
		block string
		path  string // "": valid
		msg   string
	}{
		"the defaults": {block: "regions: {p: {ttl: {hard: 1m}}}"},
		"equal": {block: `
defaults: {single-flight: {load-timeout: 10s}, refresh-lease: {ttl: 10s}}
regions: {p: {ttl: {hard: 1m}}}`},
		"short lease in defaults": {block: `
defaults: {refresh-lease: {ttl: 2s}}
regions: {p: {ttl: {hard: 1m}}}`, path: "capabilities.cache.defaults.refresh-lease.ttl", msg: "2s is shorter than single-flight.load-timeout 5s"},
		"long timeout in defaults": {block: `
defaults: {single-flight: {load-timeout: 10s}}
regions: {p: {ttl: {hard: 1m}}}`, path: "capabilities.cache.defaults.refresh-lease.ttl", msg: "6s is shorter than single-flight.load-timeout 10s"},
		"short lease in a region": {block: `
regions: {p: {ttl: {hard: 1m}, refresh-lease: {ttl: 3s, wait: 1s}}}`, path: "capabilities.cache.regions.p.refresh-lease.ttl", msg: "raise it to at least 5s"},
		"long timeout in a region": {block: `
defaults: {refresh-lease: {ttl: 8s}}
regions: {p: {ttl: {hard: 1m}, single-flight: {load-timeout: 9s}}}`, path: "capabilities.cache.regions.p.refresh-lease.ttl", msg: "8s is shorter than single-flight.load-timeout 9s"},
		"a region raising both": {block: `
regions: {p: {ttl: {hard: 1m}, single-flight: {load-timeout: 1m}, refresh-lease: {ttl: 1m}}}`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := decodeYAML(t, tc.block, false)
			if tc.path == "" {
				require.NoError(t, err)
				return
			}
			var ve *policy.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Len(t, ve.Problems, 1, "%v", err)
			assert.Equal(t, tc.path, ve.Problems[0].Path)
			assert.Equal(t, policy.RuleCacheOps, ve.Problems[0].Rule)
			assert.Contains(t, ve.Problems[0].Message, tc.msg)
		})
	}
}

func TestDecodeRegionOverridesOps(t *testing.T) {
	cfg, err := decodeYAML(t, `
defaults: {shards: 8, single-flight: {load-timeout: 3s}}
regions:
  p:
    ttl: {hard: 1m}
    shards: 32
    l1-limits: {max-entries: 100, max-bytes: 65536, max-age: 2s}
`, false)
	require.NoError(t, err)
	require.NotNil(t, cfg.Regions[0].Ops)
	o := *cfg.Regions[0].Ops
	assert.Equal(t, 32, o.Shards)
	assert.Equal(t, 3*time.Second, o.LoadTimeout, "an override starts from the configured defaults")
	assert.Equal(t, 100, o.L1.MaxEntries)
	assert.Equal(t, 8, cfg.Defaults.Shards)
}

// TestRegionMustFitTheBudgets: a region whose largest value the guard would
// refuse to read or write is refused at start, naming the budget.
func TestRegionMustFitTheBudgets(t *testing.T) {
	srv := redistest.StartStandalone(t)
	rt := newRuntime(t, &policy.Standalone{Endpoint: srv.Addr()}) // 2 MiB budgets
	dep, err := rt.Role(policy.RoleCache)
	require.NoError(t, err)
	cfg := testConfig(t, func(d *policy.CacheRegionDecl, _ *policy.CacheOps) { d.MaxBytes = policy.CacheMaxValueBytes })
	c, err := New(context.Background(), dep, rt.Keys(), cfg, Options{})
	require.NoError(t, err, "1 MiB values fit 2 MiB budgets")
	require.NoError(t, c.Close(context.Background()))

	small := newRuntimeBudgets(t, &policy.Standalone{Endpoint: srv.Addr()}, policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20})
	dep, err = small.Role(policy.RoleCache)
	require.NoError(t, err)
	_, err = New(context.Background(), dep, small.Keys(), cfg, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "max-reply-bytes")
	assert.Contains(t, err.Error(), "max-request-bytes")
}

// TestDocsListEveryCacheRule keeps docs/configuration.md's cache section
// in step with the rules the decoder and compiler report.
func TestDocsListEveryCacheRule(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	for _, r := range policy.CacheRules() {
		assert.Contains(t, string(doc), "`"+string(r)+"`", "docs/configuration.md misses rule %s", r)
	}
	assert.Contains(t, string(doc), fmt.Sprintf("at most %d bytes", policy.CacheEnvelopeOverhead))
}
