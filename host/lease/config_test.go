package lease

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

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
		assert.NotContains(t, p.Message, "Nightly", "no value is echoed")
	}
	return out
}

// TestDecodeExample: the registered example decodes, and what it leaves
// out takes the documented defaults.
func TestDecodeExample(t *testing.T) {
	cfg, err := decodeYAML(t, example, policy.RoleCoordination)
	require.NoError(t, err)
	assert.Equal(t, Config{Role: policy.RoleCoordination, DriftBudget: DefaultDriftBudget, MaxTTL: 5 * time.Minute,
		MaxWait: DefaultConfigMaxWait, Purposes: []string{"nightly-cleanup"}}, cfg)

	cfg, err = Decode(ProviderRedis, "", nil)
	require.NoError(t, err)
	assert.Equal(t, Config{Role: policy.RoleCoordination, DriftBudget: DefaultDriftBudget, MaxTTL: DefaultConfigMaxTTL,
		MaxWait: DefaultConfigMaxWait}, cfg, "an empty block: coordination and the defaults")

	cfg, err = decodeYAML(t, "drift-budget: 20ms\nmax-ttl: 720h\nmax-wait: 0s\n", policy.RoleSession)
	require.NoError(t, err)
	assert.Equal(t, policy.RoleSession, cfg.Role)
	assert.Equal(t, MaxTTL, cfg.MaxTTL)
	assert.Zero(t, cfg.MaxWait, "max-wait 0: one try, never a wait")
}

// TestDecodeReportsEveryProblem: unknown keys (also case variants), wrong
// types, out-of-range values and bad purposes are all reported, at once, at
// their paths.
func TestDecodeReportsEveryProblem(t *testing.T) {
	_, err := decodeYAML(t, `
Max-TTL: 1m
drift-budget: 50
max-ttl: 1h0m0.0005s
max-wait: 2m
purposes: [nightly-cleanup, Nightly, nightly-cleanup, 7]
no-such-key: 1
`, policy.RoleCoordination)
	assert.Equal(t, map[string]policy.Rule{
		"capabilities.lease.Max-TTL":      policy.RuleUnknownKey,
		"capabilities.lease.no-such-key":  policy.RuleUnknownKey,
		"capabilities.lease.drift-budget": policy.RuleType,
		"capabilities.lease.max-ttl":      RuleBounds,
		"capabilities.lease.max-wait":     RuleBounds,
		"capabilities.lease.purposes.3":   policy.RuleType,
	}, problems(t, err), "a list with a non-string is reported once, at its element")

	_, err = decodeYAML(t, "purposes: [nightly-cleanup, Nightly, nightly-cleanup]\ndrift-budget: 2s\nmax-ttl: 1s\n", policy.RoleCoordination)
	assert.Equal(t, map[string]policy.Rule{
		"capabilities.lease.purposes.1": RulePurposes,
		"capabilities.lease.purposes.2": RulePurposes,
		"capabilities.lease.max-ttl":    RuleBounds,
	}, problems(t, err))

	_, err = decodeYAML(t, "purposes: []\ndrift-budget: 0s\n", policy.RoleCoordination)
	assert.Equal(t, map[string]policy.Rule{
		"capabilities.lease.purposes":     RulePurposes,
		"capabilities.lease.drift-budget": RuleBounds,
	}, problems(t, err))

	_, err = Decode("memcached", policy.RoleCoordination, map[string]any{"max-ttl": 5})
	assert.Equal(t, map[string]policy.Rule{
		"capabilities.lease.provider": policy.RuleCapabilityProvider,
		"capabilities.lease.max-ttl":  policy.RuleType,
	}, problems(t, err))
}

// TestDecodeRefusesTheCacheRole: an evicted lease silently frees its
// resource, so the evictable cache role is refused.
func TestDecodeRefusesTheCacheRole(t *testing.T) {
	_, err := decodeYAML(t, example, policy.RoleCache)
	assert.Equal(t, map[string]policy.Rule{"capabilities.lease.redis-role": policy.RuleCapabilityRole}, problems(t, err))
	m := CapabilityInfo().New()
	var ps policy.Problems
	m.Decode(moduleBlock(policy.RoleCache), &ps)
	require.Len(t, ps, 1)
	assert.Equal(t, policy.RuleCapabilityRole, ps[0].Rule)
	assert.Contains(t, ps[0].Message, "evicted")
}

// TestDocsListEveryLeaseRule: docs/lease.md documents every rule and key
// the block has.
func TestDocsListEveryLeaseRule(t *testing.T) {
	doc, err := os.ReadFile("../../docs/lease.md")
	require.NoError(t, err)
	for _, r := range Rules() {
		assert.Contains(t, string(doc), "`"+string(r)+"`", "docs/lease.md misses rule %s", r)
	}
	for _, k := range []string{"provider", "redis-role", "drift-budget", "max-ttl", "max-wait", "purposes"} {
		assert.Contains(t, string(doc), "`"+k+"`", "docs/lease.md misses key %s", k)
	}
	for _, p := range SidecarPatterns() {
		assert.Contains(t, string(doc), p, "docs/lease.md misses endpoint %s", p)
	}
}

// moduleBlock is the example block as host/config hands it to the module.
func moduleBlock(role policy.Role) module.Block {
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(example), &raw); err != nil {
		panic(err)
	}
	delete(raw, "provider")
	delete(raw, "redis-role")
	return module.Block{Path: "capabilities.lease", Provider: ProviderRedis, Role: role, RoleRequired: true, Raw: raw}
}
