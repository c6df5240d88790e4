package config

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

// TestSwapKeys covers guests.watch and security.allow-unsigned-swaps: both
// default to false, decode as booleans (also from CAPHOST_ overrides) and
// report a wrong type at their path.
func TestSwapKeys(t *testing.T) {
	load := func(body string, env map[string]string) (*Config, error) {
		path := filepath.Join(t.TempDir(), "caphost.yaml")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		return Load(context.Background(), path, WithEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	}
	cfg, err := load("guests: {}\nsecurity: {}\n", nil)
	require.NoError(t, err)
	assert.False(t, cfg.Guests.Watch)
	assert.False(t, cfg.Security.AllowUnsignedSwaps)

	cfg, err = load("guests: {watch: true}\nsecurity: {allow-unsigned-swaps: true}\n", nil)
	require.NoError(t, err)
	assert.True(t, cfg.Guests.Watch)
	assert.True(t, cfg.Security.AllowUnsignedSwaps)

	cfg, err = load("guests: {}\nsecurity: {}\n", map[string]string{
		EnvName("guests.watch"): "true", EnvName("security.allow-unsigned-swaps"): "true"})
	require.NoError(t, err)
	assert.True(t, cfg.Guests.Watch, "CAPHOST_GUESTS__WATCH")
	assert.True(t, cfg.Security.AllowUnsignedSwaps, "CAPHOST_SECURITY__ALLOW_UNSIGNED_SWAPS")

	_, err = load("guests: {watch: often}\nsecurity: {allow-unsigned-swaps: 3}\n", nil)
	var verr *policy.ValidationError
	require.ErrorAs(t, err, &verr)
	paths := map[string]policy.Rule{}
	for _, p := range verr.Problems {
		paths[p.Path] = p.Rule
	}
	assert.Equal(t, map[string]policy.Rule{"guests.watch": policy.RuleType, "security.allow-unsigned-swaps": policy.RuleType}, paths)
}
