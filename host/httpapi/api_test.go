package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/internal/redistest"
)

const hmacKey = "httpapi-test-hmac-key-0123456789abcdefghijklmnop"

// redisConfig is the redis block of the test hosts: one private
// redis-server (the %q) holding the role the second argument names.
const redisConfig = `redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    %s: {deployment: main, required: %t, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/HTTPAPI_TEST_KEY"}
`

// rateConfig: a per-api-key fixed window of 3 per minute, selected for
// /orders. The sidecar itself is tested in host/ratelimit; this proves the
// daemon mounts it over the host's capability.
const rateConfig = `capabilities:
  rate-limit:
    provider: redis
    redis-role: coordination
    policies:
      per-key: {revision: r1, algorithm: fixed-window, limit: 3, window: 720h, subject: [api-key]}
    routes:
      - {route: /orders, policies: [{policy: per-key}]}
`

// startHost assembles a real host with the rate-limit capability against
// a private redis-server.
func startHost(t *testing.T) *host.Host {
	t.Helper()
	return startHostWith(t, "coordination", true, rateConfig)
}

// startHostWith assembles a real host against a private redis-server: the
// redis block with role (required or not), then capabilities.
func startHostWith(tb testing.TB, role string, required bool, capabilities string) *host.Host {
	tb.Helper()
	srv := redistest.StartStandalone(tb)
	path := filepath.Join(tb.TempDir(), "caphost.yaml")
	conf := fmt.Sprintf(redisConfig, srv.Addr(), role, required) + capabilities
	require.NoError(tb, os.WriteFile(path, []byte(conf), 0o600))
	env := func(k string) (string, bool) {
		switch k {
		case "HTTPAPI_TEST_KEY":
			return hmacKey, true
		case "HTTPAPI_CACHE_HINT_KEY":
			return "httpapi-cache-hint-key-0123456789abcdefghijklmnop", true
		}
		return "", false
	}
	cfg, err := config.Load(context.Background(), path, config.WithEnv(env))
	require.NoError(tb, err)
	h, err := host.New(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

func post(t *testing.T, srv http.Handler, body string) (int, map[string]any, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/ratelimit/evaluate", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	raw := rec.Body.String()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &m), raw)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	return rec.Code, m, raw
}

// TestSidecarMounted: New mounts the rate-limit sidecar of the host's
// capability (evaluated against its real limiter), answers other methods
// with the JSON 405 and unknown paths with the JSON 404.
func TestSidecarMounted(t *testing.T) {
	h := startHost(t)
	srv := httpapi.New(h, httpapi.Options{})
	for i := range 4 {
		code, m, raw := post(t, srv, `{"subject":{"api-key":"k"},"policy":"per-key"}`)
		require.Equal(t, http.StatusOK, code, raw)
		assert.Equal(t, i < 3, m["allowed"], raw)
	}
	code, m, _ := post(t, srv, `{"attributes":{"route":"/orders"}}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "missing-subject", m["code"])

	for _, p := range []string{"/v1/ratelimit/evaluate", "/v1/concurrency/acquire", "/v1/concurrency/renew", "/v1/concurrency/release"} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		assert.Equal(t, http.StatusMethodNotAllowed, rec.Code, p)
		assert.Equal(t, http.MethodPost, rec.Header().Get("Allow"), p)
		assert.Contains(t, rec.Body.String(), `"code":"method-not-allowed"`, p)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v2/anything", nil))
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Contains(t, rec.Body.String(), `"code":"not-found"`)
}

func TestOperationsEndpoints(t *testing.T) {
	h := startHost(t)
	srv := httptest.NewServer(httpapi.New(h, httpapi.Options{}))
	defer srv.Close()
	for _, p := range []string{"/livez", "/readyz", "/metrics"} {
		resp, err := http.Get(srv.URL + p)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", p, b)
	}
	// The evaluation above is counted in the host's metrics.
	_, _, _ = post(t, httpapi.New(h, httpapi.Options{}), `{"policy":"per-key","subject":{"api-key":"m"}}`)
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Contains(t, string(b), "caphost_rate")
	assert.NotContains(t, string(b), `"m"`)
}

func TestSidecarCapabilityDisabled(t *testing.T) {
	// A real host whose configuration enables no capability: every pattern
	// the rate-limit capability registers answers 503 capability-disabled,
	// whatever the body (the host does not run it, so it reads nothing).
	path := filepath.Join(t.TempDir(), "caphost.yaml")
	require.NoError(t, os.WriteFile(path, []byte("capabilities:\n  rate-limit: {provider: disabled}\n"), 0o600))
	cfg, err := config.Load(context.Background(), path, config.WithEnv(func(string) (string, bool) { return "", false }))
	require.NoError(t, err)
	h, err := host.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	srv := httpapi.New(h, httpapi.Options{})
	for _, body := range []string{`{"policy":"per-key","subject":{"api-key":"a"}}`, `{"bogus":1}`} {
		code, m, _ := post(t, srv, body)
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Equal(t, "capability-disabled", m["code"])
	}
	for _, op := range []string{"acquire", "renew", "release"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/concurrency/"+op, strings.NewReader(`{"policy":"exports","subject":{"tenant":"t"}}`))
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Contains(t, rec.Body.String(), `"capability-disabled"`)
	}
	// Other methods on a registered pattern are still the JSON 405.
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/ratelimit/evaluate", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}
