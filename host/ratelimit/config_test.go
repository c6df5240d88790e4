package ratelimit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/policy"
)

func loadRaw(t testing.TB, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(b, &m))
	return m
}

func TestDecodeDesignExample(t *testing.T) {
	cfg, err := Decode(ProviderRedis, policy.RoleCoordination, loadRaw(t, "rate-limit.yaml"))
	require.NoError(t, err)
	assert.Equal(t, DegradedLocalEmergency, cfg.DegradedProvider)
	assert.Equal(t, &LocalEmergencyConfig{MaxEntries: 10000, EntryTTL: 2 * time.Minute, MaxInFlight: 256, AssumedMaxPods: 20, PerPodShare: 0.025}, cfg.LocalEmergency)
	assert.Equal(t, 6, cfg.ShadowSampleLog.PerMinute)
	require.Len(t, cfg.Policies, 2)
	set, err := cfg.CompilePolicies()
	require.NoError(t, err)
	login, ok := set.Policy("login")
	require.True(t, ok)
	assert.Equal(t, policy.RateParameters{Capacity: 10, RefillTokens: 10, RefillPeriod: time.Minute}, login.Parameters)
	assert.Equal(t, []policy.RateDimension{policy.DimClientIP, policy.DimRoute}, login.Dimensions)
	api, _ := set.Policy("api")
	assert.Equal(t, policy.RateDedup{Enabled: true, TTL: 30 * time.Second, MaxEntries: 128}, api.Dedup)
	require.Len(t, cfg.Routes, 2)
	assert.Equal(t, []Selection{{Policy: "api", Cost: 2, Dimensions: map[string]string{"tenant": "tenant"}}}, cfg.Routes[1].Selections)

	// Environment overrides arrive as strings.
	raw := loadRaw(t, "rate-limit.yaml")
	raw["local-emergency"].(map[string]any)["maximum-entries"] = "500"
	raw["local-emergency"].(map[string]any)["per-pod-share"] = "0.05"
	cfg, err = Decode(ProviderRedis, "", raw)
	require.NoError(t, err)
	assert.Equal(t, 500, cfg.LocalEmergency.MaxEntries)
	assert.Equal(t, policy.RoleCoordination, cfg.RedisRole)
}

func TestDecodeReportsEveryProblem(t *testing.T) {
	raw := loadRaw(t, "rate-limit.yaml")
	raw["surprise"] = 1
	raw["local-emergency"].(map[string]any)["per-pod-share"] = 0.5 // × 20 pods > 1
	pols := raw["policies"].(map[string]any)
	pols["login"].(map[string]any)["failure-mode"] = "fail-open" // critical
	pols["login"].(map[string]any)["colour"] = "red"
	pols["api"].(map[string]any)["limit"] = "many"
	pols["bad"] = map[string]any{"revision": "r1", "algorithm": "leaky", "subject": []any{"ssn"}}
	raw["routes"].([]any)[0].(map[string]any)["policies"] = []any{map[string]any{"policy": "ghost"}}
	_, err := Decode(ProviderRedis, policy.RoleCache, raw)
	require.ErrorIs(t, err, policy.ErrInvalid)
	var verr *policy.ValidationError
	require.ErrorAs(t, err, &verr)
	for _, r := range []policy.Rule{policy.RuleUnknownKey, policy.RuleType, policy.RuleRateLocal, policy.RuleRateFailOpen,
		policy.RuleRateAlgorithm, policy.RuleRateDimensions, policy.RuleRateID, policy.RuleCapabilityRole} {
		assert.True(t, verr.Has(r), "missing %s in\n%v", r, err)
	}

	_, err = Decode(ProviderRedis, policy.RoleCoordination, map[string]any{"local-emergency": map[string]any{}, "policies": map[string]any{}})
	require.ErrorAs(t, err, &verr)
	assert.True(t, verr.Has(policy.RuleRateLocal), "local-emergency without degraded-provider")
}

func FuzzDecode(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "rate-limit.yaml"))
	require.NoError(f, err)
	var m map[string]any
	require.NoError(f, yaml.Unmarshal(b, &m))
	seed, err := json.Marshal(m)
	require.NoError(f, err)
	f.Add(seed)
	f.Add([]byte(`{"policies":{"a":{"revision":"r","algorithm":"gcra","limit":1e300,"window":"1ms","subject":"global"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var raw map[string]any
		if json.Unmarshal(data, &raw) != nil {
			return
		}
		cfg, err := Decode(ProviderRedis, policy.RoleCoordination, raw)
		if err != nil {
			var verr *policy.ValidationError
			require.ErrorAs(t, err, &verr)
			return
		}
		_, err = cfg.CompilePolicies()
		require.NoError(t, err, "a decoded config always compiles")
	})
}
