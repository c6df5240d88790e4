package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/internal/redistest"
)

// concConfig: two permits per tenant and route (30 s TTL), a rate policy
// next to it.
const concConfig = `redis:
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
      exports:
        revision: r1
        algorithm: concurrency
        limit: 2
        permit-ttl: 30s
        subject: [tenant, route]
      per-key:
        revision: r1
        algorithm: fixed-window
        limit: 3
        window: 1m
        subject: [api-key]
`

type concHost struct {
	h   *host.Host
	srv *redistest.Server
	api http.Handler
	log *syncBuffer
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startConcHost(t *testing.T) *concHost {
	t.Helper()
	srv := redistest.StartStandalone(t)
	path := filepath.Join(t.TempDir(), "caphost.yaml")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, concConfig, srv.Addr()), 0o600))
	env := func(k string) (string, bool) {
		if k == "HTTPAPI_TEST_KEY" {
			return hmacKey, true
		}
		return "", false
	}
	cfg, err := config.Load(context.Background(), path, config.WithEnv(env))
	require.NoError(t, err)
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := host.New(context.Background(), cfg, host.WithLogger(log))
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return &concHost{h: h, srv: srv, api: httpapi.New(h, httpapi.Options{Log: log}), log: logs}
}

func (c *concHost) call(t *testing.T, op, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/concurrency/"+op, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	c.api.ServeHTTP(rec, req)
	var m map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m), rec.Body.String())
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	return rec.Code, m
}

const subj = `"subject":{"tenant":"tenant-secret-acme","route":"/export"}`

func TestConcurrencyAPIAcquireRenewRelease(t *testing.T) {
	c := startConcHost(t)
	code, a := c.call(t, "acquire", `{"policy":"exports",`+subj+`,"ttl-ms":5000}`)
	require.Equal(t, http.StatusOK, code, "%v", a)
	assert.Equal(t, "acquire", a["operation"])
	assert.Equal(t, "evaluated", a["kind"])
	assert.Equal(t, true, a["ok"])
	assert.Equal(t, "acquired", a["status"])
	assert.Equal(t, "exports", a["policy"])
	assert.Equal(t, "r1", a["revision"])
	assert.Equal(t, 5000.0, a["ttl-ms"])
	assert.Equal(t, 2.0, a["limit"])
	assert.Equal(t, 1.0, a["in-use"])
	assert.Equal(t, "APPLIED", a["certainty"])
	owner, _ := a["owner"].(string)
	require.Len(t, owner, 32)
	exp, err := time.Parse(time.RFC3339Nano, a["expires-at"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(5*time.Second), exp, 3*time.Second)

	_, b := c.call(t, "acquire", `{"policy":"exports",`+subj+`}`)
	require.Equal(t, true, b["ok"])
	assert.Equal(t, 30000.0, b["ttl-ms"], "the policy's permit-ttl by default")
	_, full := c.call(t, "acquire", `{"policy":"exports",`+subj+`}`)
	assert.Equal(t, false, full["ok"])
	assert.Equal(t, "contended", full["status"])
	assert.Equal(t, "CONFLICT", full["certainty"])
	assert.Nil(t, full["owner"], "no permit, no token")
	assert.Positive(t, full["retry-after-ms"])
	_, other := c.call(t, "acquire", `{"policy":"exports","subject":{"tenant":"tenant-secret-acme","route":"/other"}}`)
	assert.Equal(t, true, other["ok"], "the route is part of the subject")

	code, rn := c.call(t, "renew", fmt.Sprintf(`{"policy":"exports","revision":"r1",%s,"owner":%q,"ttl-ms":20000}`, subj, owner))
	require.Equal(t, http.StatusOK, code, "%v", rn)
	assert.Equal(t, true, rn["ok"])
	assert.Equal(t, "renewed", rn["status"])
	assert.Equal(t, 20000.0, rn["ttl-ms"])
	assert.Nil(t, rn["owner"], "the token is only in the acquire's answer")
	exp2, err := time.Parse(time.RFC3339Nano, rn["expires-at"].(string))
	require.NoError(t, err)
	assert.True(t, exp2.After(exp))

	// Another token cannot release this permit; its own can, once.
	wrong := strings.Repeat("0", 32)
	_, rel := c.call(t, "release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, subj, wrong))
	assert.Equal(t, false, rel["ok"])
	assert.Equal(t, "not-held", rel["status"])
	assert.Equal(t, "NOT_APPLIED", rel["certainty"])
	_, rel = c.call(t, "release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, subj, owner))
	assert.Equal(t, true, rel["ok"])
	assert.Equal(t, "released", rel["status"])
	assert.Equal(t, 1.0, rel["in-use"])
	_, rel = c.call(t, "release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, subj, owner))
	assert.Equal(t, "not-held", rel["status"], "a second release is reported as not held")
	_, again := c.call(t, "acquire", `{"policy":"exports",`+subj+`}`)
	assert.Equal(t, true, again["ok"], "the released slot is free")

	// Neither the subject nor any token reached the logs.
	for _, secret := range []string{"tenant-secret-acme", owner, b["owner"].(string), again["owner"].(string)} {
		assert.NotContains(t, c.log.String(), secret)
	}
	// Metrics: counted, without subjects or tokens.
	rec := httptest.NewRecorder()
	c.api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	metrics := rec.Body.String()
	assert.Contains(t, metrics, `caphost_rate_concurrency_operations_total{category="none",operation="acquire",policy="exports",result="acquired"} 4`)
	assert.Contains(t, metrics, `caphost_rate_concurrency_operations_total{category="none",operation="release",policy="exports",result="not-held"} 2`)
	assert.NotContains(t, metrics, "tenant-secret")
	assert.NotContains(t, metrics, owner)
}

// TestConcurrencyAPIExactUnderLoad: parallel HTTP clients never hold more
// permits than the policy allows.
func TestConcurrencyAPIExactUnderLoad(t *testing.T) {
	c := startConcHost(t)
	srv := httptest.NewServer(c.api)
	defer srv.Close()
	var holders, peak, acquired atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post := func(op, body string) map[string]any {
				resp, err := http.Post(srv.URL+"/v1/concurrency/"+op, "application/json", strings.NewReader(body))
				if !assert.NoError(t, err) {
					return nil
				}
				defer resp.Body.Close()
				var m map[string]any
				assert.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
				return m
			}
			for time.Now().Before(stop) {
				a := post("acquire", `{"policy":"exports",`+subj+`}`)
				if a == nil || a["ok"] != true {
					time.Sleep(time.Millisecond)
					continue
				}
				acquired.Add(1)
				n := holders.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				holders.Add(-1)
				r := post("release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, subj, a["owner"]))
				assert.Equal(t, "released", r["status"])
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(2), peak.Load(), "never more than the limit, and the limit is reached")
	assert.Greater(t, acquired.Load(), int64(4))
}

func TestConcurrencyAPIRejectsBadRequests(t *testing.T) {
	c := startConcHost(t)
	tok := strings.Repeat("a", 32)
	cases := []struct {
		op, body, code, field string
		status                int
	}{
		{"acquire", `{"policy":"exports",` + subj + `,"bogus":1}`, "bad-request", "", 400},
		{"acquire", `{"policy":"exports",` + subj + `} {}`, "bad-request", "", 400},
		{"acquire", `{"policy":"exports",` + subj + `,"owner":"` + tok + `"}`, "invalid-field", "owner", 400},
		{"acquire", `{"policy":"exports",` + subj + `,"revision":"r1"}`, "invalid-field", "revision", 400},
		{"acquire", `{` + subj + `}`, "invalid-field", "policy", 400},
		{"acquire", `{"policy":"exports",` + subj + `,"ttl-ms":-1}`, "invalid-field", "ttl-ms", 400},
		{"acquire", `{"policy":"exports",` + subj + `,"ttl-ms":86400001}`, "invalid-field", "ttl-ms", 400},
		{"acquire", `{"policy":"exports",` + subj + `,"ttl-ms":30001}`, "invalid-request", "", 400},
		{"acquire", `{"policy":"exports",` + subj + `,"ttl-ms":5}`, "invalid-request", "", 400},
		{"acquire", `{"policy":"exports",` + subj + `,"deadline-ms":10001}`, "invalid-field", "deadline-ms", 400},
		{"acquire", `{"policy":"exports","subject":{"tenant":"a"}}`, "missing-subject", "subject.route", 400},
		{"acquire", `{"policy":"exports","subject":{"ssn":"a"}}`, "invalid-field", "subject", 400},
		{"acquire", `{"policy":"exports","subject":{"tenant":""}}`, "invalid-field", "subject.tenant", 400},
		{"acquire", `{"policy":"nope",` + subj + `}`, "unknown-policy", "", 400},
		{"acquire", `{"policy":"per-key","subject":{"api-key":"k"}}`, "invalid-field", "policy", 400},
		{"renew", `{"policy":"exports",` + subj + `}`, "invalid-field", "owner", 400},
		{"renew", `{"policy":"exports",` + subj + `,"owner":"short"}`, "invalid-field", "owner", 400},
		{"renew", `{"policy":"exports",` + subj + `,"owner":"` + strings.ToUpper(tok) + `"}`, "invalid-field", "owner", 400},
		{"renew", `{"policy":"exports",` + subj + `,"owner":"` + tok + `","revision":"Bad--rev"}`, "invalid-request", "", 400},
		{"release", `{"policy":"exports",` + subj + `,"owner":"` + tok + `","ttl-ms":1000}`, "invalid-field", "ttl-ms", 400},
		{"release", `{"policy":"exports",` + subj + `,"owner":"` + tok + `","revision":"` + strings.Repeat("r", 25) + `"}`, "invalid-field", "revision", 400},
		{"release", `{"policy":"exports","subject":{"tenant":"` + strings.Repeat("x", httpapi.MaxConcurrencyBodyBytes) + `"}}`, "too-large", "", 413},
	}
	for i, tc := range cases {
		code, m := c.call(t, tc.op, tc.body)
		assert.Equal(t, tc.status, code, "case %d: %v", i, m)
		assert.Equal(t, tc.code, m["code"], "case %d: %v", i, m)
		if tc.field != "" {
			assert.Equal(t, tc.field, m["field"], "case %d", i)
		}
		raw, _ := json.Marshal(m)
		assert.NotContains(t, string(raw), "tenant-secret", "case %d: the subject is never echoed", i)
		assert.NotContains(t, string(raw), tok, "case %d: a token is never echoed", i)
	}

	req := httptest.NewRequest(http.MethodGet, "/v1/concurrency/acquire", nil)
	rec := httptest.NewRecorder()
	c.api.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	req = httptest.NewRequest(http.MethodPost, "/v1/concurrency/acquire", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	rec = httptest.NewRecorder()
	c.api.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code)
}

// TestConcurrencyAPIRedisDown: the limiter fails closed — 200 with
// ok=false, kind unavailable, nothing sent.
func TestConcurrencyAPIRedisDown(t *testing.T) {
	c := startConcHost(t)
	_, a := c.call(t, "acquire", `{"policy":"exports",`+subj+`}`)
	require.Equal(t, true, a["ok"])
	c.srv.Kill()
	code, o := c.call(t, "acquire", `{"policy":"exports",`+subj+`}`)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, false, o["ok"])
	assert.Equal(t, "unavailable", o["kind"])
	assert.Equal(t, "redis-unavailable", o["category"])
	assert.Equal(t, "UNAVAILABLE_BEFORE_SEND", o["certainty"])
	assert.Equal(t, 1000.0, o["retry-after-ms"])
	assert.Nil(t, o["owner"])
	_, r := c.call(t, "release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, subj, a["owner"]))
	assert.Equal(t, false, r["ok"])
	assert.Equal(t, "unavailable", r["kind"])
}

func TestConcurrencyAPICapabilityDisabled(t *testing.T) {
	srv := httpapi.New(&fakeBackend{}, httpapi.Options{})
	req := httptest.NewRequest(http.MethodPost, "/v1/concurrency/acquire", strings.NewReader(`{"policy":"exports",`+subj+`}`))
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), `"capability-disabled"`)
}

func TestDecodeConcurrencyRequest(t *testing.T) {
	r, err := httpapi.DecodeConcurrencyRequest("renew", []byte(`{"policy":"p","revision":"r2","subject":{"tenant":"t"},"owner":"`+strings.Repeat("f", 32)+`","ttl-ms":100,"deadline-ms":50}`))
	require.NoError(t, err)
	assert.Equal(t, httpapi.ConcurrencyRequest{Policy: "p", Revision: "r2", Subject: map[string]string{"tenant": "t"},
		Owner: strings.Repeat("f", 32), TTLMs: 100, DeadlineMs: 50}, r)
	_, err = httpapi.DecodeConcurrencyRequest("acquire", []byte(strings.Repeat(" ", httpapi.MaxConcurrencyBodyBytes+1)))
	var e *httpapi.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, httpapi.CodeTooLarge, e.Code())
}
