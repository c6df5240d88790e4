package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caphost/caphost/host/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const fixtures = "../../testdata/config"

var env = map[string]string{
	"CACHE_PASS":     "cache-pass-value-123",
	"COORD_PASS":     "coord-pass-value-456",
	"SENTINEL_PASS":  "sentinel-pass-value-789",
	"CAPHOST_KEY_V1": "hmac-key-version-1-0123456789abcdefghijklmnop",
	"SHORT_KEY":      "too-short",
	"EMPTY_PASS":     "",
}

var secrets = []string{
	"cache-pass-value-123", "coord-pass-value-456", "sentinel-pass-value-789",
	"hmac-key-version-1-0123456789abcdefghijklmnop", "hmac-key-version-2-0123456789abcdefghijklmnopqrstuv",
	"admin-password-from-file", "hunter2-plaintext-password", "plain-text-password",
}

func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code := runWith(context.Background(), args, &out, &errb, config.WithEnv(lookup))
	for _, s := range secrets {
		require.NotContains(t, out.String()+errb.String(), s, "secret printed")
	}
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := cli(t, "version")
	assert.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(out, "caphost "), out)
}

// roleArgs turns a fixture's "# roles: a, b" header (within its first two
// lines) into --role flags: no capability this host implements selects the
// cache role, so the fixtures about cache deployments select it this way.
func roleArgs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitN(string(data), "\n", 3)
	var out []string
	for _, l := range lines[:min(2, len(lines))] {
		if rest, ok := strings.CutPrefix(l, "# roles: "); ok {
			for _, r := range strings.Split(rest, ",") {
				out = append(out, "--role", strings.TrimSpace(r))
			}
		}
	}
	return out
}

func TestCheckValid(t *testing.T) {
	for _, f := range []string{"standalone.yaml", "sentinel.yaml", "cluster.yaml", "multi-role.yaml", "colocation-allowed.yaml"} {
		t.Run(f, func(t *testing.T) {
			path := filepath.Join(fixtures, "valid", f)
			code, out, errOut := cli(t, append([]string{"check", "--config", path}, roleArgs(t, path)...)...)
			assert.Equal(t, 0, code, out+errOut)
			assert.Contains(t, out, "ok: ")
			assert.Contains(t, out, "deployments: ")
			assert.Contains(t, out, "roles: ")
		})
	}
	_, out, _ := cli(t, "check", "--config", filepath.Join(fixtures, "valid", "multi-role.yaml"), "--role", "cache")
	assert.Contains(t, out, "cache-main: standalone 127.0.0.1:6380")
	assert.Contains(t, out, "coord-main: sentinel ca-coordination@127.0.0.1:26379")
	assert.Contains(t, out, "coordination -> coord-main (required=true)")
	assert.NotContains(t, out, "legacy-main", "unselected deployment is not decoded")
}

func TestCheckInvalid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtures, "invalid", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		rule := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(rule, func(t *testing.T) {
			code, out, _ := cli(t, append([]string{"check", "--config", f}, roleArgs(t, f)...)...)
			assert.Equal(t, 1, code)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.GreaterOrEqual(t, len(lines), 2)
			for _, l := range lines[:len(lines)-1] {
				assert.Regexp(t, `^\S+: .+ \[`+strings.ReplaceAll(rule, ".", `\.`)+`\]$`, l)
			}
			assert.Contains(t, lines[len(lines)-1], "problem(s) in")
		})
	}
}

func TestCheckThreeProblemsAndRoles(t *testing.T) {
	three := filepath.Join(fixtures, "multi", "three-problems.yaml")
	code, out, _ := cli(t, append([]string{"check", "--config", three}, roleArgs(t, three)...)...)
	assert.Equal(t, 1, code)
	for _, r := range []string{"[secret.literal]", "[timeouts.order]", "[capability.provider]"} {
		assert.Contains(t, out, r)
	}
	assert.Contains(t, out, "3 problem(s)")

	code, out, _ = cli(t, "check", "--config", filepath.Join(fixtures, "valid", "multi-role.yaml"), "--role", "cache", "--role", "session")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "redis.deployments.legacy-main: ")
}

func TestCheckUsageErrors(t *testing.T) {
	code, _, errOut := cli(t, "check")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--config is required")
	code, _, _ = cli(t, "check", "--config", "x.yaml", "--role", "queue")
	assert.Equal(t, 2, code)
	code, _, _ = cli(t, "check", "--bogus")
	assert.Equal(t, 2, code)
	code, _, errOut = cli(t, "check", "--config", filepath.Join(fixtures, "does-not-exist.yaml"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no such file")
}
