package config

import (
	"context"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/policy"
)

// envoyBase is a minimal configuration with a coordination role; server is
// appended by each test.
const envoyBase = `redis:
  deployments:
    main:
      standalone: {endpoint: "127.0.0.1:6390"}
      auth: {admin-shared: true}
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    coordination: {deployment: main, required: true, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/CAPHOST_KEY_V1"}
`

func loadEnvoy(t *testing.T, server string, files map[string]string) (*Config, error) {
	t.Helper()
	fsys := fstest.MapFS{"etc/c.yaml": {Data: []byte(envoyBase + server)}}
	for n, body := range files {
		fsys["etc/"+n] = &fstest.MapFile{Data: []byte(body)}
	}
	return Load(context.Background(), "etc/c.yaml", WithFS(fsys), WithEnv(testEnv(nil)))
}

func TestEnvoyRateLimitBlock(t *testing.T) {
	upstream, err := os.ReadFile("../ratelimit/envoyrls/testdata/example2.yaml")
	require.NoError(t, err)
	cfg, err := loadEnvoy(t, `server:
  envoy-rate-limit:
    listen: 127.0.0.1:8081
    config-files: [rls/messaging.yaml]
    algorithm: sliding-counter
    failure-mode: fail-open
    response-headers: true
    shadow-mode: true
    attempt-timeout: 250ms
`, map[string]string{"rls/messaging.yaml": string(upstream)})
	require.NoError(t, err)
	e := cfg.Server.EnvoyRateLimit
	require.NotNil(t, e)
	assert.Equal(t, "127.0.0.1:8081", e.Listen)
	assert.Equal(t, []string{"etc/rls/messaging.yaml"}, e.ConfigFiles, "resolved against the configuration's directory")
	assert.Equal(t, policy.RoleCoordination, e.RedisRole)
	assert.Equal(t, policy.RateSlidingCounter, e.Algorithm)
	assert.Equal(t, policy.FailOpenPolicy, e.FailureMode)
	assert.True(t, e.ResponseHeaders)
	assert.True(t, e.ShadowMode)
	assert.Equal(t, 250*time.Millisecond, e.AttemptTimeout)
	require.NotNil(t, e.Descriptors)
	r := e.Descriptors.Match("messaging", []rlsconfig.Entry{{Key: "to_number", Value: "1"}})
	require.NotNil(t, r)
	assert.Equal(t, uint32(100), r.RequestsPerUnit)

	// The listener is overridable from the environment, like server.listen.
	fsys := fstest.MapFS{"etc/c.yaml": {Data: []byte(envoyBase + "server:\n  envoy-rate-limit: {listen: 127.0.0.1:8081, config-files: [m.yaml]}\n")},
		"etc/m.yaml": {Data: upstream}}
	cfg, err = Load(context.Background(), "etc/c.yaml", WithFS(fsys),
		WithEnv(testEnv(map[string]string{"CAPHOST_SERVER__ENVOY_RATE_LIMIT__LISTEN": "127.0.0.1:9091"})))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9091", cfg.Server.EnvoyRateLimit.Listen)

	cfg, err = loadEnvoy(t, "server: {listen: 127.0.0.1:8080}\n", nil)
	require.NoError(t, err)
	assert.Nil(t, cfg.Server.EnvoyRateLimit, "absent: not served")
}

// TestEnvoyRateLimitLocalEmergency: the local-emergency block has the
// rate-limit capability's shape; it lets the service (or a rule's caphost
// block) fail over to the local limiter; its problems, and a rule that
// asks for it when it is absent, are located.
func TestEnvoyRateLimitLocalEmergency(t *testing.T) {
	rule := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n    caphost: {failure_mode: local-emergency, per_pod_share: 0.5}\n"
	cfg, err := loadEnvoy(t, `server:
  envoy-rate-limit:
    listen: 127.0.0.1:8081
    config-files: [d.yaml]
    failure-mode: local-emergency
    local-emergency: {maximum-entries: 1000, entry-ttl: 1m, maximum-in-flight: 64, assumed-maximum-pods: 2, per-pod-share: 0.5}
`, map[string]string{"d.yaml": rule})
	require.NoError(t, err)
	e := cfg.Server.EnvoyRateLimit
	assert.Equal(t, policy.FailLocal, e.FailureMode)
	require.NotNil(t, e.LocalEmergency)
	assert.Equal(t, 2, e.LocalEmergency.AssumedMaxPods)
	assert.Equal(t, time.Minute, e.LocalEmergency.EntryTTL)

	_, err = loadEnvoy(t, "server:\n  envoy-rate-limit: {listen: 127.0.0.1:8081, config-files: [d.yaml]}\n", map[string]string{"d.yaml": rule})
	assert.Contains(t, problemText(t, err), "d.yaml:3: descriptors[0]: local-emergency needs degraded-provider")

	_, err = loadEnvoy(t, `server:
  envoy-rate-limit:
    listen: 127.0.0.1:8081
    config-files: [d.yaml]
    local-emergency: {maximum-entries: 0, entry-ttl: 1m, maximum-in-flight: 64, assumed-maximum-pods: 4, per-pod-share: 0.5, x: 1}
`, map[string]string{"d.yaml": rule})
	all := problemText(t, err)
	for _, want := range []string{
		"server.envoy-rate-limit.local-emergency.maximum-entries",
		"server.envoy-rate-limit.local-emergency.per-pod-share: per-pod-share × assumed-maximum-pods must not exceed 1",
		"server.envoy-rate-limit.local-emergency.x",
	} {
		assert.Contains(t, all, want)
	}
}

// TestEnvoyRateLimitSelectorDomains: selector-mapped domains need no
// descriptor file; they are unique and never also in a file.
func TestEnvoyRateLimitSelectorDomains(t *testing.T) {
	cfg, err := loadEnvoy(t, "server:\n  envoy-rate-limit: {listen: 127.0.0.1:8081, selector-domains: [edge, api]}\n", nil)
	require.NoError(t, err)
	e := cfg.Server.EnvoyRateLimit
	assert.Equal(t, []string{"edge", "api"}, e.SelectorDomains)
	require.NotNil(t, e.Descriptors)
	assert.Empty(t, e.ConfigFiles)

	upstream, err := os.ReadFile("../ratelimit/envoyrls/testdata/example2.yaml")
	require.NoError(t, err)
	_, err = loadEnvoy(t, "server:\n  envoy-rate-limit: {listen: 127.0.0.1:8081, config-files: [m.yaml], selector-domains: [messaging, edge, edge, \"\"]}\n",
		map[string]string{"m.yaml": string(upstream)})
	all := problemText(t, err)
	for _, want := range []string{
		"server.envoy-rate-limit.selector-domains.0: domain is also in config-files",
		"server.envoy-rate-limit.selector-domains.2: duplicate domain",
		"server.envoy-rate-limit.selector-domains.3: a domain is 1..256 bytes",
	} {
		assert.Contains(t, all, want)
	}
}

// TestEnvoyRateLimitHeaderNames: response-header-names renames the
// headers; a name that is not an HTTP token, names that clash or names
// without response-headers are problems.
func TestEnvoyRateLimitHeaderNames(t *testing.T) {
	upstream, err := os.ReadFile("../ratelimit/envoyrls/testdata/example2.yaml")
	require.NoError(t, err)
	files := map[string]string{"m.yaml": string(upstream)}
	cfg, err := loadEnvoy(t, "server:\n  envoy-rate-limit: {listen: 127.0.0.1:8081, config-files: [m.yaml], response-headers: true,\n"+
		"    response-header-names: {limit: X-RateLimit-Limit, reset: X-RateLimit-Reset}}\n", files)
	require.NoError(t, err)
	e := cfg.Server.EnvoyRateLimit
	assert.Equal(t, []string{"X-RateLimit-Limit", "", "X-RateLimit-Reset"}, []string{e.HeaderLimit, e.HeaderRemaining, e.HeaderReset})

	_, err = loadEnvoy(t, "server:\n  envoy-rate-limit: {listen: 127.0.0.1:8081, config-files: [m.yaml],\n"+
		"    response-header-names: {limit: \"a b\", remaining: X-R, reset: x-r, other: y}}\n", files)
	all := problemText(t, err)
	for _, want := range []string{
		"server.envoy-rate-limit.response-header-names.limit: a header name is 1..64 bytes of an HTTP token",
		"server.envoy-rate-limit.response-header-names: header names without response-headers: true would never be sent",
		"server.envoy-rate-limit.response-header-names: the header names must differ",
		"server.envoy-rate-limit.response-header-names.other",
	} {
		assert.Contains(t, all, want)
	}

	// A configured name that is another header's default clashes with it
	// (envoyrls.New refuses it; the check must not pass it).
	_, err = loadEnvoy(t, "server:\n  envoy-rate-limit: {listen: 127.0.0.1:8081, config-files: [m.yaml], response-headers: true,\n"+
		"    response-header-names: {limit: ratelimit-remaining}}\n", files)
	assert.Contains(t, problemText(t, err), "server.envoy-rate-limit.response-header-names: the header names must differ")
}

// TestEnvoyRateLimitProblems: everything the host cannot act on is a
// problem at its path, all reported together, descriptor-file problems
// with their file, path and line.
func TestEnvoyRateLimitProblems(t *testing.T) {
	_, err := loadEnvoy(t, `server:
  envoy-rate-limit:
    listen: "nope"
    config-files: [bad.yaml, missing.yaml]
    redis-role: cache
    algorithm: sliding-log
    failure-mode: local-emergency
    attempt-timeout: 1h
    extra: 1
`, map[string]string{"bad.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"})
	all := problemText(t, err)
	for _, want := range []string{
		"server.envoy-rate-limit.listen:",
		"server.envoy-rate-limit.redis-role: rate-limit state needs a non-evicting role",
		"server.envoy-rate-limit.algorithm: want one of",
		"server.envoy-rate-limit.failure-mode: local-emergency needs server.envoy-rate-limit.local-emergency",
		"server.envoy-rate-limit.attempt-timeout: must be within",
		"server.envoy-rate-limit.extra",
		`server.envoy-rate-limit.config-files.0: bad.yaml:4: descriptors[0].rate_limit.unit: invalid unit "fortnight"`,
		"server.envoy-rate-limit.config-files.1:",
	} {
		assert.Contains(t, all, want)
	}

	_, err = loadEnvoy(t, "server:\n  envoy-rate-limit: {config-files: []}\n", nil)
	all = problemText(t, err)
	assert.Contains(t, all, "server.envoy-rate-limit.listen: required")
	assert.Contains(t, all, "server.envoy-rate-limit.config-files: at least one")

	// A limit caphost cannot hold is refused with the config, not at serve.
	_, err = loadEnvoy(t, "server:\n  envoy-rate-limit: {listen: 127.0.0.1:8081, config-files: [big.yaml]}\n",
		map[string]string{"big.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"})
	assert.Contains(t, problemText(t, err), "server.envoy-rate-limit.rules.limit: big.yaml:3: descriptors[0]: must be within")
}

func problemText(t *testing.T, err error) string {
	t.Helper()
	ps := problems(t, err)
	text := make([]string, len(ps))
	for i, p := range ps {
		text[i] = p.String()
	}
	return strings.Join(text, "\n")
}
