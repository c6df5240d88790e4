package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// sidecarPolicies: a per-api-key fixed window of 3 per minute (max cost 2,
// dedup), a global token bucket, and routes that select them.
const sidecarPolicies = `
policies:
  per-key:
    revision: r1
    algorithm: fixed-window
    limit: 3
    window: 720h # counted in the test: a window boundary must not fall between calls
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

// sidecarHost is a Sidecar over a real limiter, concurrency limiter and
// static selector on a private redis-server, mounted as the daemon does.
type sidecarHost struct {
	*fixture
	sc  *Sidecar
	mux *http.ServeMux
	log *logtest.Buffer
}

// newSidecarHost decodes block (a capabilities.rate-limit block) with
// Decode and serves it; with sel nil the configured routes select.
func newSidecarHost(t *testing.T, block string, sel Selector) *sidecarHost {
	t.Helper()
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(block), &raw))
	cfg, err := Decode(ProviderRedis, policy.RoleCoordination, raw)
	require.NoError(t, err)
	set, err := cfg.CompilePolicies()
	require.NoError(t, err)
	srv := redistest.StartStandalone(t)
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	rt := newRuntime(t, srv.Addr())
	l, err := New(rt, cfg, set, WithRegisterer(reg), WithLogger(log))
	require.NoError(t, err)
	conc, err := NewConcurrencyLimiter(l, WithRegisterer(reg), WithLogger(log))
	require.NoError(t, err)
	if sel == nil {
		sel = NewStaticSelector(cfg.Routes)
	}
	sc := NewSidecar(l, sel, conc, SidecarOptions{Log: log})
	mux := http.NewServeMux()
	httpjson.Mount(mux, sc.Routes())
	return &sidecarHost{fixture: &fixture{srv: srv, rt: rt, l: l, reg: reg}, sc: sc, mux: mux, log: logs}
}

// post sends body to path and decodes the JSON answer.
func (h *sidecarHost) post(t *testing.T, path, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.mux.ServeHTTP(rec, req)
	var m map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m), rec.Body.String())
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	return rec, m
}

func (h *sidecarHost) evaluate(t *testing.T, body string) (int, map[string]any, string) {
	t.Helper()
	rec, m := h.post(t, "/v1/ratelimit/evaluate", body)
	return rec.Code, m, rec.Body.String()
}

func TestSidecarEvaluateExplicitPolicy(t *testing.T) {
	h := newSidecarHost(t, sidecarPolicies, nil)
	const secretKey = "sk_live_very-secret-api-key"
	body := `{"attributes":{"route":"/x","method":"GET"},"subject":{"api-key":"` + secretKey + `"},"policy":"per-key","evaluation-id":"e-%d"}`
	for i := range 3 {
		code, m, raw := h.evaluate(t, fmt.Sprintf(body, i))
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
	code, m, raw := h.evaluate(t, fmt.Sprintf(body, 3))
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, "evaluated", m["kind"])
	assert.Equal(t, false, m["allowed"])
	assert.EqualValues(t, 0, m["remaining"])
	assert.Greater(t, m["retry-after-ms"], 0.0)
	reset, err := time.Parse(time.RFC3339Nano, m["reset"].(string))
	require.NoError(t, err)
	// The window is 720h aligned to the epoch: the reset is the window's end,
	// after now and at most one window away.
	now := time.Now()
	assert.True(t, reset.After(now), "reset %s is after now", reset)
	assert.False(t, reset.After(now.Add(720*time.Hour)), "reset %s is within one window", reset)
	assert.Zero(t, reset.UnixMilli()%(720*time.Hour).Milliseconds(), "a fixed window ends on its boundary")

	// Same evaluation id again: a dedup replay of the allowed decision.
	code, m, raw = h.evaluate(t, fmt.Sprintf(body, 0))
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, true, m["replayed"], raw)
	assert.Equal(t, true, m["allowed"], raw)

	// Another key has its own window; cost counts.
	code, m, raw = h.evaluate(t, `{"subject":{"api-key":"other"},"policy":"per-key","cost":2}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, true, m["allowed"])
	assert.EqualValues(t, 1, m["remaining"])
	assert.NotContains(t, h.log.String(), secretKey)
}

func TestSidecarEvaluateSelector(t *testing.T) {
	h := newSidecarHost(t, sidecarPolicies, nil)
	// /orders selects edge then per-key (a hierarchy): the most restrictive
	// allowing decision is reported.
	for i := range 3 {
		code, m, raw := h.evaluate(t, `{"attributes":{"route":"/orders","method":"GET"},"subject":{"api-key":"k1"}}`)
		require.Equal(t, http.StatusOK, code, raw)
		assert.Equal(t, true, m["allowed"], raw)
		assert.Equal(t, "per-key", m["policy"])
		assert.EqualValues(t, 2-i, m["remaining"])
	}
	code, m, raw := h.evaluate(t, `{"attributes":{"route":"/orders","method":"GET"},"subject":{"api-key":"k1"}}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, false, m["allowed"])
	assert.Equal(t, "per-key", m["policy"])

	// A selection may fill a dimension from an attribute class.
	code, m, raw = h.evaluate(t, `{"attributes":{"route":"/by-plan","api-key-plan":"gold"}}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, true, m["allowed"])

	// No rule matches: nothing limits the request.
	code, m, raw = h.evaluate(t, `{"attributes":{"route":"/elsewhere","method":"GET"}}`)
	require.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, map[string]any{"kind": "not-limited", "allowed": true, "retry-after-ms": 0.0}, m)

	// The selected policy needs api-key and none was given.
	code, m, _ = h.evaluate(t, `{"attributes":{"route":"/orders","method":"GET"}}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "missing-subject", m["code"])
	assert.Equal(t, "subject.api-key", m["field"])
}

// TestSidecarSelectorFailures: a failing selector or a selection that does
// not fit the set is a 503 selector-unavailable with Retry-After, never an
// allow; the log names only the kind, never the selector's message.
func TestSidecarSelectorFailures(t *testing.T) {
	for name, sel := range map[string]Selector{
		"failure": selectorFunc(func(ctx context.Context, _ Attributes) ([]Selection, error) {
			return nil, errors.New("guest trapped: do-not-log-this")
		}),
		"unknown policy": selectorFunc(func(ctx context.Context, _ Attributes) ([]Selection, error) {
			return []Selection{{Policy: "do-not-log-this", Cost: 1}}, nil
		}),
		"too many": selectorFunc(func(ctx context.Context, _ Attributes) ([]Selection, error) {
			return make([]Selection, MaxSelections+1), nil
		}),
	} {
		t.Run(name, func(t *testing.T) {
			h := newSidecarHost(t, sidecarPolicies, sel)
			rec, m := h.post(t, "/v1/ratelimit/evaluate", `{"attributes":{"route":"/orders"},"subject":{"api-key":"k"}}`)
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
			assert.Equal(t, "selector-unavailable", m["code"])
			assert.Equal(t, "1", rec.Header().Get("Retry-After"))
			assert.NotContains(t, h.log.String(), "do-not-log-this")
		})
	}
}

func TestSidecarEvaluateBadInput(t *testing.T) {
	h := newSidecarHost(t, sidecarPolicies, nil)
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
		{"derived id too long", `{"attributes":{"route":"/orders"},"subject":{"api-key":"a"},"evaluation-id":"` + strings.Repeat("e", 127) + `"}`, 400, "invalid-field"},
		{"too large", `{"policy":"per-key","subject":{"api-key":"` + strings.Repeat("a", MaxEvaluateBodyBytes) + `"}}`, 413, "too-large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, m, raw := h.evaluate(t, c.body)
			assert.Equal(t, c.status, code, raw)
			assert.Equal(t, c.code, m["code"], raw)
			assert.NotEmpty(t, m["message"])
			assert.NotContains(t, raw, secret, "errors never echo request values")
		})
	}
	assert.Zero(t, h.used(t, policyOf(t, h.l.Policies(), "per-key"), Subject{policy.DimAPIKey: []byte("a")}), "no refused request consumed quota")

	req := httptest.NewRequest(http.MethodPost, "/v1/ratelimit/evaluate", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	rec := httptest.NewRecorder()
	h.mux.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code)
	assert.Contains(t, rec.Body.String(), `"code":"unsupported-media-type"`)

	rec = httptest.NewRecorder()
	h.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/ratelimit/evaluate", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, http.MethodPost, rec.Header().Get("Allow"))
	assert.Contains(t, rec.Body.String(), `"code":"method-not-allowed"`)
}

// TestSidecarDisabled: the sidecar of a disabled capability still reports
// bad input as such, and answers every valid call 503 capability-disabled.
func TestSidecarDisabled(t *testing.T) {
	mux := http.NewServeMux()
	httpjson.Mount(mux, NewSidecar(nil, nil, nil, SidecarOptions{}).Routes())
	for _, c := range []struct{ path, body, code string }{
		{"/v1/ratelimit/evaluate", `{"policy":"per-key","subject":{"api-key":"a"}}`, "capability-disabled"},
		{"/v1/ratelimit/evaluate", `{"bogus":1}`, "bad-request"},
		{"/v1/concurrency/acquire", `{"policy":"exports","subject":{"tenant":"t"}}`, "capability-disabled"},
		{"/v1/concurrency/release", `{"policy":"exports"}`, "invalid-field"},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body)))
		var b httpjson.ErrorBody
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
		assert.Equal(t, c.code, string(b.Code), c.path+" "+c.body)
		if c.code == "capability-disabled" {
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		}
	}
	assert.ElementsMatch(t, []string{PatternEvaluate, PatternAcquire, PatternRenew, PatternRelease},
		keysOf(NewSidecar(nil, nil, nil, SidecarOptions{}).Routes()))
}

func keysOf(m map[string]http.Handler) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
