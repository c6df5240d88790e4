package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/config"
)

// TestCheckEnvoyYearRule: `caphost check` accepts an envoyproxy/ratelimit
// file with a year rule under the default algorithm (fixed-window), and
// refuses it under another service algorithm, naming the file, line and
// descriptor.
func TestCheckEnvoyYearRule(t *testing.T) {
	check := func(extra string) (int, string) {
		path := serveConfig(t, "127.0.0.1:1", "127.0.0.1:18080", "  envoy-rate-limit:\n    listen: 127.0.0.1:18081\n"+
			"    config-files: [yearly.yaml]\n"+extra)
		require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(path), "yearly.yaml"),
			[]byte("domain: yearly\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: YEAR, requests_per_unit: 1000}\n"), 0o600))
		var out, errb bytes.Buffer
		code := runWith(context.Background(), []string{"check", "--config", path}, &out, &errb, config.WithEnv(serveEnv))
		return code, out.String() + errb.String()
	}
	code, out := check("")
	assert.Equal(t, 0, code, out)
	code, out = check("    algorithm: sliding-counter\n")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "server.envoy-rate-limit.rules.window: ")
	assert.Contains(t, out, "yearly.yaml:3: descriptors[0]: year needs algorithm fixed-window: a year is 365 days, and sliding-counter (from the service's algorithm) takes windows of at most 30 days")
}
