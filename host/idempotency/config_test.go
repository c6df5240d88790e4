package idempotency

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/policy"
)

func decodeYAML(t *testing.T, block string, role policy.Role) (Config, error) {
	t.Helper()
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(block), &raw))
	delete(raw, "provider")
	delete(raw, "redis-role")
	return Decode(ProviderRedis, role, raw)
}

func problems(t *testing.T, err error) map[string]policy.Rule {
	t.Helper()
	var ve *policy.ValidationError
	require.True(t, errors.As(err, &ve), "want a *ValidationError, got %v", err)
	out := map[string]policy.Rule{}
	for _, p := range ve.Problems {
		out[p.Path] = p.Rule
		assert.NotContains(t, p.Message, "Payments", "no value is echoed")
	}
	return out
}

func defaults() Config {
	return Config{Role: policy.RoleCoordination, Lease: DefaultLease, Retention: DefaultRetention, ReplayTTL: DefaultReplayTTL,
		FailedTTL: DefaultFailedTTL, MaxResponseBytes: DefaultMaxResponseBytes, PolicyRevision: DefaultPolicyRevision}
}

// TestDecodeExample: the registered example decodes, what it leaves out
// takes the documented defaults, and every key can be set.
func TestDecodeExample(t *testing.T) {
	cfg, err := decodeYAML(t, example, policy.RoleCoordination)
	require.NoError(t, err)
	want := defaults()
	want.Routes = []string{"create-payment"}
	assert.Equal(t, want, cfg)

	cfg, err = Decode(ProviderRedis, "", nil)
	require.NoError(t, err)
	assert.Equal(t, defaults(), cfg, "an empty block: coordination and the defaults")

	cfg, err = decodeYAML(t, "lease: 5s\nretention: 1m\nreplay-ttl: 720h\nfailed-ttl: 1ms\nmax-response-bytes: 1048576\npolicy-revision: v7\n", policy.RoleSession)
	require.NoError(t, err)
	assert.Equal(t, Config{Role: policy.RoleSession, Lease: 5 * time.Second, Retention: time.Minute, ReplayTTL: 720 * time.Hour,
		FailedTTL: time.Millisecond, MaxResponseBytes: 1 << 20, PolicyRevision: "v7"}, cfg)
	require.NoError(t, cfg.fill(), "what Decode accepts, the executor accepts")
}

// TestDecodeReportsEveryProblem: unknown keys (also case variants), wrong
// types, out-of-range values and bad routes are all reported, at once, at
// their paths.
func TestDecodeReportsEveryProblem(t *testing.T) {
	_, err := decodeYAML(t, `
Lease: 1s
lease: 30
retention: 1h0m0.0005s
replay-ttl: 721h
failed-ttl: 0s
max-response-bytes: 1048577
policy-revision: ""
routes: [create-payment, Payments, create-payment, 7]
no-such-key: 1
`, policy.RoleCoordination)
	assert.Equal(t, map[string]policy.Rule{
		"capabilities.idempotency.Lease":              policy.RuleUnknownKey,
		"capabilities.idempotency.no-such-key":        policy.RuleUnknownKey,
		"capabilities.idempotency.lease":              policy.RuleType,
		"capabilities.idempotency.retention":          RuleBounds,
		"capabilities.idempotency.replay-ttl":         RuleBounds,
		"capabilities.idempotency.failed-ttl":         RuleBounds,
		"capabilities.idempotency.max-response-bytes": RuleBounds,
		"capabilities.idempotency.policy-revision":    RuleBounds,
		"capabilities.idempotency.routes.3":           policy.RuleType,
	}, problems(t, err))

	_, err = decodeYAML(t, "routes: [create-payment, Payments, create-payment]\nlease: 720h\nretention: 1h\nmax-response-bytes: \"x\"\n", policy.RoleCoordination)
	assert.Equal(t, map[string]policy.Rule{
		"capabilities.idempotency.routes.1":           RuleRoutes,
		"capabilities.idempotency.routes.2":           RuleRoutes,
		"capabilities.idempotency.retention":          RuleBounds,
		"capabilities.idempotency.max-response-bytes": policy.RuleType,
	}, problems(t, err), "lease + retention over 720h")

	_, err = decodeYAML(t, "routes: []\npolicy-revision: 7\n", policy.RoleCoordination)
	assert.Equal(t, map[string]policy.Rule{
		"capabilities.idempotency.routes":          RuleRoutes,
		"capabilities.idempotency.policy-revision": policy.RuleType,
	}, problems(t, err))

	_, err = Decode("memcached", policy.RoleCoordination, map[string]any{"lease": 5})
	assert.Equal(t, map[string]policy.Rule{
		"capabilities.idempotency.provider": policy.RuleCapabilityProvider,
		"capabilities.idempotency.lease":    policy.RuleType,
	}, problems(t, err))
}

// TestDecodeRefusesTheCacheRole: an evicted record runs the action a
// second time, so the evictable cache role is refused, and a descriptor
// claiming request-replay on it does not validate.
func TestDecodeRefusesTheCacheRole(t *testing.T) {
	_, err := decodeYAML(t, example, policy.RoleCache)
	assert.Equal(t, map[string]policy.Rule{"capabilities.idempotency.redis-role": policy.RuleCapabilityRole}, problems(t, err))
	m := CapabilityInfo().New()
	var ps policy.Problems
	m.Decode(moduleBlock(policy.RoleCache), &ps)
	require.Len(t, ps, 1)
	assert.Equal(t, policy.RuleCapabilityRole, ps[0].Rule)
	assert.Contains(t, ps[0].Message, "evicted")

	ok := CapabilityInfo().New()
	ps = nil
	ok.Decode(moduleBlock(""), &ps)
	require.Empty(t, ps)
	d := ok.Descriptor()
	require.NoError(t, d.Validate())
	assert.Equal(t, policy.RoleCoordination, d.Role, "the default role")
	assert.Equal(t, capability.ImpactRequired, d.Impact)
	assert.Equal(t, Readiness, d.Readiness)
	d.Role = policy.RoleCache
	assert.ErrorIs(t, d.Validate(), capability.ErrInvalidDescriptor)
}

// TestDocsListEveryIdempotencyRule: docs/idempotency.md documents every
// rule, key and endpoint the capability has, and the card parses.
func TestDocsListEveryIdempotencyRule(t *testing.T) {
	doc, err := os.ReadFile("../../docs/idempotency.md")
	require.NoError(t, err)
	for _, r := range Rules() {
		assert.Contains(t, string(doc), "`"+string(r)+"`", "docs/idempotency.md misses rule %s", r)
	}
	for _, k := range []string{"provider", "redis-role", "lease", "retention", "replay-ttl", "failed-ttl", "max-response-bytes",
		"policy-revision", "routes"} {
		assert.Contains(t, string(doc), "| `"+k+"` |", "docs/idempotency.md misses key %s", k)
	}
	for _, p := range SidecarPatterns() {
		assert.Contains(t, string(doc), p, "docs/idempotency.md misses endpoint %s", p)
	}
	for _, c := range []string{string(CodeUnknownRoute), string(CodeResponseTooLarge), string(CodeCorrupt)} {
		assert.Contains(t, string(doc), "`"+c+"`", "docs/idempotency.md misses code %s", c)
	}
	c, err := capability.ParseCard(card)
	require.NoError(t, err)
	assert.Equal(t, Readiness, c.Readiness)
}

// moduleBlock is the example block as host/config hands it to the module.
func moduleBlock(role policy.Role) module.Block {
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(example), &raw); err != nil {
		panic(err)
	}
	delete(raw, "provider")
	delete(raw, "redis-role")
	return module.Block{Path: "capabilities.idempotency", Provider: ProviderRedis, Role: role, RoleRequired: true, Raw: raw}
}
