package fenced

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/internal/redistest"
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
		assert.NotContains(t, p.Message, "Ledger", "no value is echoed")
	}
	return out
}

// TestDecodeExample: the example decodes, and what it leaves out takes the
// documented defaults.
func TestDecodeExample(t *testing.T) {
	cfg, err := decodeYAML(t, example, policy.RoleCoordination)
	require.NoError(t, err)
	assert.Equal(t, Config{Role: policy.RoleCoordination, DriftBudget: lease.DefaultDriftBudget, MaxTTL: 5 * time.Minute,
		MaxWait: lease.DefaultConfigMaxWait, HardFailThreshold: fence.MaxCounter, Purposes: []string{"ledger"}}, cfg)
	cfg, err = decodeYAML(t, "hard-fail-threshold: 1000\nmax-wait: 0s\n", policy.RoleSession)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), cfg.HardFailThreshold)
	assert.Equal(t, policy.RoleSession, cfg.Role)
	assert.Zero(t, cfg.MaxWait)
}

// TestDecodeReportsEveryProblem: unknown keys, wrong types, out-of-range
// values, bad purposes and the cache role are all reported at once.
func TestDecodeReportsEveryProblem(t *testing.T) {
	_, err := decodeYAML(t, `
Max-TTL: 1m
drift-budget: 50
max-ttl: 1h0m0.0005s
max-wait: 2m
hard-fail-threshold: 9007199254740992
purposes: [ledger, Ledger, ledger]
`, policy.RoleCache)
	assert.Equal(t, map[string]policy.Rule{
		"capabilities.fenced-lease.Max-TTL":             policy.RuleUnknownKey,
		"capabilities.fenced-lease.redis-role":          policy.RuleCapabilityRole,
		"capabilities.fenced-lease.drift-budget":        policy.RuleType,
		"capabilities.fenced-lease.max-ttl":             RuleBounds,
		"capabilities.fenced-lease.max-wait":            RuleBounds,
		"capabilities.fenced-lease.hard-fail-threshold": problems(t, err)["capabilities.fenced-lease.hard-fail-threshold"],
		"capabilities.fenced-lease.purposes.1":          RulePurposes,
		"capabilities.fenced-lease.purposes.2":          RulePurposes,
	}, problems(t, err))
	assert.NotEmpty(t, problems(t, err)["capabilities.fenced-lease.hard-fail-threshold"], "2^53 is past the counter bound")
	_, err = Decode("memcached", "", nil)
	assert.Equal(t, map[string]policy.Rule{"capabilities.fenced-lease.provider": policy.RuleCapabilityProvider}, problems(t, err))
}

// TestCapabilityModule: the module decodes its example, describes itself
// validly (R1, abort, no FENCED claim), provisions a client on a real
// runtime and serves exactly the patterns its Info lists; its card parses
// at the claimed readiness.
func TestCapabilityModule(t *testing.T) {
	info := CapabilityInfo()
	c, err := capability.ParseCard(info.Card)
	require.NoError(t, err)
	assert.Equal(t, info.Readiness, c.Readiness)
	_, err = c.Tests()
	require.NoError(t, err)

	var raw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(info.Example), &raw))
	delete(raw, "provider")
	delete(raw, "redis-role")
	m := info.New()
	var ps policy.Problems
	m.Decode(module.Block{Path: "capabilities." + CapabilityID, Provider: ProviderRedis, Role: policy.RoleCoordination,
		RoleRequired: true, Raw: raw}, &ps)
	require.Empty(t, ps)
	d := m.Descriptor()
	require.NoError(t, d.Validate())
	assert.Equal(t, capability.FailAbort, d.FailureMode)
	assert.Equal(t, capability.ImpactRequired, d.Impact)
	assert.Equal(t, Readiness, d.Readiness)

	srv := redistest.StartStandalone(t)
	reg := prometheus.NewRegistry()
	require.NoError(t, m.Provision(context.Background(), module.Env{Log: slog.Default(), Registerer: reg, Runtime: newRuntime(t, srv.Addr())}))
	require.NoError(t, m.Validate(context.Background()))
	routes := m.Routes()
	require.Len(t, routes, len(info.Routes))
	for _, p := range info.Routes {
		assert.Contains(t, routes, p)
	}
	assert.Empty(t, m.Guests())
	mux := http.NewServeMux()
	httpjson.Mount(mux, routes)
	w := &world{srv: srv, c: m.(*capabilityModule).Client()}
	regn := fence.Registration{Resource: "acct-7", Epoch: 42, Digest: fence.NewDigest()}
	_, _, err = w.c.Provision(context.Background(), "ledger", regn)
	require.NoError(t, err)
	got := post(t, mux, "acquire", fields(regn, "ttl-ms", 10000))
	assert.Equal(t, "ACQUIRED", got.ok.Kind, got.raw)
	bad := post(t, mux, "acquire", fields(regn, "purpose", "payroll", "ttl-ms", 10000))
	assert.Equal(t, CodeUnknownPurpose, bad.err.Code, "the example's allowlist holds")
	require.NoError(t, m.Close(context.Background()))
}
