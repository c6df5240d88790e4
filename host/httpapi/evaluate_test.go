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
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/internal/redistest"
)

const hmacKey = "httpapi-test-hmac-key-0123456789abcdefghijklmnop"

// rateConfig: a per-api-key fixed window of 3 per minute (max cost 2, dedup), a
// global token bucket, and routes that select them.
const rateConfig = `redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    coordination: {deployment: main, required: true, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/HTTPAPI_TEST_KEY"}
capabilities:
  rate-limit:
    provider: redis
    redis-role: coordination
    policies:
      per-key:
        revision: r1
        algorithm: fixed-window
        limit: 3
        window: 1m
        max-cost: 2
        failure-mode: fail-closed
        subject: [api-key]
        dedup: {enabled: true, ttl: 30s, max-entries: 128}
      edge:
        revision: r7
        algorithm: token-bucket
        capacity: 1000
        refill-tokens: 1000
        refill-period: 1s
        failure-mode: fail-closed
        subject: [global]
    routes:
      - route: /orders
        policies: [{policy: edge}, {policy: per-key}]
      - route: /by-plan
        policies: [{policy: per-key, dimensions: {api-key: api-key-plan}}]
`

// startHost assembles a real host against a private redis-server.
func startHost(t *testing.T) *host.Host {
	t.Helper()
	srv := redistest.StartStandalone(t)
	path := filepath.Join(t.TempDir(), "caphost.yaml")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, rateConfig, srv.Addr()), 0o600))
	env := func(k string) (string, bool) {
		if k == "HTTPAPI_TEST_KEY" {
			return hmacKey, true
		}
		return "", false
	}
	cfg, err := config.Load(context.Background(), path, config.WithEnv(env))
	require.NoError(t, err)
	h, err := host.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(context.Background()) })
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

func TestEvaluateExplicitPolicy(t *testing.T) {
	h := startHost(t)
	srv := httpapi.New(h, httpapi.Options{})
	const secretKey = "sk_live_very-secret-api-key"
	body := `{"attributes":{"route":"/x","method":"GET"},"subject":{"api-key":"` + secretKey + `"},"policy":"per-key","evaluation-id":"e-%d"}`
	for i := range 3 {
		code, m, raw := post(t, srv, fmt.Sprintf(body, i))
		require.Equal(t, http.StatusOK, code, raw)
		assert.Equal(t, "evaluated", m["kind"])
		assert.Equal(t, true, m["allowed"])
		assert.EqualValues(t, 3, m["limit"])
		assert.EqualValues(t, 2-i, m["remaining"])
		assert.EqualValues(t, 0, m["retry-after-ms"])
		assert.Equal(t, "per-key", m["policy"])
		assert.Equal(t, "r1", m["revision"])
		assert.Equal(t, "GLOBAL_REDIS", m["source"])
		assert.Equal(t, "CERTAIN", m["certainty"])
		assert.NotContains(t, raw, secretKey, "the subject is never echoed")
	}
	// The fourth is denied: still HTTP 200, the body says so.
	code, m, raw := post(t, srv, fmt.Sprintf(body, 3))
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, "evaluated", m["kind"])
	assert.Equal(t, false, m["allowed"])
	assert.EqualValues(t, 0, m["remaining"])
	assert.Greater(t, m["retry-after-ms"], 0.0)
	reset, err := time.Parse(time.RFC3339Nano, m["reset"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(30*time.Second), reset, 31*time.Second)

	// Same evaluation id again: a dedup replay of the allowed decision.
	code, m, raw = post(t, srv, fmt.Sprintf(body, 0))
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, true, m["replayed"], raw)
	assert.Equal(t, true, m["allowed"], raw)

	// Another key has its own window; cost counts.
	code, m, raw = post(t, srv, `{"subject":{"api-key":"other"},"policy":"per-key","cost":2}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, true, m["allowed"])
	assert.EqualValues(t, 1, m["remaining"])
}

func TestEvaluateSelector(t *testing.T) {
	h := startHost(t)
	srv := httpapi.New(h, httpapi.Options{})
	// /orders selects edge then per-key (a hierarchy): the most restrictive
	// allowing decision is reported.
	for i := range 3 {
		code, m, raw := post(t, srv, `{"attributes":{"route":"/orders","method":"GET"},"subject":{"api-key":"k1"}}`)
		require.Equal(t, http.StatusOK, code, raw)
		assert.Equal(t, true, m["allowed"], raw)
		assert.Equal(t, "per-key", m["policy"])
		assert.EqualValues(t, 2-i, m["remaining"])
	}
	code, m, raw := post(t, srv, `{"attributes":{"route":"/orders","method":"GET"},"subject":{"api-key":"k1"}}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, false, m["allowed"])
	assert.Equal(t, "per-key", m["policy"])

	// A selection may fill a dimension from an attribute class.
	code, m, raw = post(t, srv, `{"attributes":{"route":"/by-plan","api-key-plan":"gold"}}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, true, m["allowed"])

	// No rule matches: nothing limits the request.
	code, m, raw = post(t, srv, `{"attributes":{"route":"/elsewhere","method":"GET"}}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, map[string]any{"kind": "not-limited", "allowed": true, "retry-after-ms": 0.0}, m)

	// The selected policy needs api-key and none was given.
	code, m, _ = post(t, srv, `{"attributes":{"route":"/orders","method":"GET"}}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "missing-subject", m["code"])
	assert.Equal(t, "subject.api-key", m["field"])
}

func TestEvaluateBadInput(t *testing.T) {
	h := startHost(t)
	srv := httpapi.New(h, httpapi.Options{})
	const secret = "do-not-echo-this-subject"
	cases := []struct {
		name, body string
		status     int
		code       string
	}{
		{"unknown field", `{"policy":"per-key","subject":{"api-key":"a"},"colour":"red"}`, 400, "bad-request"},
		{"unknown attribute", `{"attributes":{"tenant":"` + secret + `"}}`, 400, "bad-request"},
		{"trailing data", `{"policy":"per-key","subject":{"api-key":"a"}} {}`, 400, "bad-request"},
		{"not an object", `[1,2]`, 400, "bad-request"},
		{"empty", ``, 400, "bad-request"},
		{"wrong type", `{"cost":"` + secret + `"}`, 400, "bad-request"},
		{"negative cost", `{"policy":"per-key","subject":{"api-key":"a"},"cost":-1}`, 400, "invalid-field"},
		{"cost without policy", `{"attributes":{"route":"/orders"},"cost":3}`, 400, "invalid-field"},
		{"cost above max", `{"policy":"per-key","subject":{"api-key":"a"},"cost":3}`, 400, "invalid-request"},
		{"unknown policy", `{"policy":"nope","subject":{"api-key":"a"}}`, 400, "unknown-policy"},
		{"missing dimension", `{"policy":"per-key","subject":{"tenant":"` + secret + `"}}`, 400, "missing-subject"},
		{"bad dimension", `{"policy":"per-key","subject":{"colour":"` + secret + `"}}`, 400, "invalid-field"},
		{"global is not a value", `{"policy":"edge","subject":{"global":"x"}}`, 400, "invalid-field"},
		{"empty subject value", `{"policy":"per-key","subject":{"api-key":""}}`, 400, "invalid-field"},
		{"deadline too long", `{"policy":"per-key","subject":{"api-key":"a"},"deadline-ms":600000}`, 400, "invalid-field"},
		{"evaluation id too long", `{"policy":"per-key","subject":{"api-key":"a"},"evaluation-id":"` + strings.Repeat("e", 129) + `"}`, 400, "invalid-field"},
		{"too large", `{"policy":"per-key","subject":{"api-key":"` + strings.Repeat("a", httpapi.MaxEvaluateBodyBytes) + `"}}`, 413, "too-large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, m, raw := post(t, srv, c.body)
			assert.Equal(t, c.status, code, raw)
			assert.Equal(t, c.code, m["code"], raw)
			assert.NotEmpty(t, m["message"])
			assert.NotContains(t, raw, secret, "errors never echo request values")
		})
	}

	req := httptest.NewRequest(http.MethodPost, "/v1/ratelimit/evaluate", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code)
	assert.Contains(t, rec.Body.String(), `"code":"unsupported-media-type"`)

	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/ratelimit/evaluate", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, http.MethodPost, rec.Header().Get("Allow"))
	assert.Contains(t, rec.Body.String(), `"code":"method-not-allowed"`)

	rec = httptest.NewRecorder()
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

func TestEvaluateCapabilityDisabled(t *testing.T) {
	srv := httpapi.New(&fakeBackend{}, httpapi.Options{})
	code, m, _ := post(t, srv, `{"policy":"per-key","subject":{"api-key":"a"}}`)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "capability-disabled", m["code"])
	// Bad input is still reported as such.
	code, m, _ = post(t, srv, `{"bogus":1}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "bad-request", m["code"])
}
