package ratelimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/httpjson"
)

// permitPolicies: two permits per tenant and route (30 s TTL), a rate
// policy next to it.
const permitPolicies = `
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
    window: 720h # counted: no window boundary between calls
    subject: [api-key]
`

const permitSubject = `"subject":{"tenant":"tenant-secret-acme","route":"/export"}`

func (h *sidecarHost) permit(t *testing.T, op, body string) (int, map[string]any) {
	t.Helper()
	rec, m := h.post(t, "/v1/concurrency/"+op, body)
	return rec.Code, m
}

func TestSidecarPermitAcquireRenewRelease(t *testing.T) {
	h := newSidecarHost(t, permitPolicies, nil)
	code, a := h.permit(t, "acquire", `{"policy":"exports",`+permitSubject+`,"ttl-ms":5000}`)
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

	_, b := h.permit(t, "acquire", `{"policy":"exports",`+permitSubject+`}`)
	require.Equal(t, true, b["ok"])
	assert.Equal(t, 30000.0, b["ttl-ms"], "the policy's permit-ttl by default")
	_, full := h.permit(t, "acquire", `{"policy":"exports",`+permitSubject+`}`)
	assert.Equal(t, false, full["ok"])
	assert.Equal(t, "contended", full["status"])
	assert.Equal(t, "CONFLICT", full["certainty"])
	assert.Nil(t, full["owner"], "no permit, no token")
	assert.Positive(t, full["retry-after-ms"])
	_, other := h.permit(t, "acquire", `{"policy":"exports","subject":{"tenant":"tenant-secret-acme","route":"/other"}}`)
	assert.Equal(t, true, other["ok"], "the route is part of the subject")

	code, rn := h.permit(t, "renew", fmt.Sprintf(`{"policy":"exports","revision":"r1",%s,"owner":%q,"ttl-ms":20000}`, permitSubject, owner))
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
	_, rel := h.permit(t, "release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, permitSubject, wrong))
	assert.Equal(t, false, rel["ok"])
	assert.Equal(t, "not-held", rel["status"])
	assert.Equal(t, "NOT_APPLIED", rel["certainty"])
	_, rel = h.permit(t, "release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, permitSubject, owner))
	assert.Equal(t, true, rel["ok"])
	assert.Equal(t, "released", rel["status"])
	assert.Equal(t, 1.0, rel["in-use"])
	_, rel = h.permit(t, "release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, permitSubject, owner))
	assert.Equal(t, "not-held", rel["status"], "a second release is reported as not held")
	_, again := h.permit(t, "acquire", `{"policy":"exports",`+permitSubject+`}`)
	assert.Equal(t, true, again["ok"], "the released slot is free")

	// Neither the subject nor any token reached the logs.
	for _, secret := range []string{"tenant-secret-acme", owner, b["owner"].(string), again["owner"].(string)} {
		assert.NotContains(t, h.log.String(), secret)
	}
	assert.Equal(t, 4.0, counter(t, h.reg, "caphost_rate_concurrency_operations_total",
		map[string]string{"policy": "exports", "operation": "acquire", "result": "acquired", "category": "none"}))
	assert.Equal(t, 2.0, counter(t, h.reg, "caphost_rate_concurrency_operations_total",
		map[string]string{"policy": "exports", "operation": "release", "result": "not-held", "category": "none"}))
}

// TestSidecarPermitExactUnderLoad: the limit is reachable and never
// exceeded over HTTP. Reachability is proven with held permits (two held,
// the third contended, one released, one more admitted), not by hoping a
// loaded machine overlaps the clients; the stress part then only checks
// that parallel clients never hold more permits than the limit.
func TestSidecarPermitExactUnderLoad(t *testing.T) {
	h := newSidecarHost(t, permitPolicies, nil)
	srv := httptest.NewServer(h.mux)
	defer srv.Close()
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
	acquire := `{"policy":"exports",` + permitSubject + `}`
	release := func(owner any) map[string]any {
		return post("release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, permitSubject, owner))
	}
	first, second := post("acquire", acquire), post("acquire", acquire)
	require.Equal(t, true, first["ok"])
	require.Equal(t, true, second["ok"])
	assert.Equal(t, "contended", post("acquire", acquire)["status"], "the limit is reached")
	assert.Equal(t, "released", release(first["owner"])["status"])
	third := post("acquire", acquire)
	require.Equal(t, true, third["ok"], "a released slot is admitted again")
	assert.Equal(t, "released", release(second["owner"])["status"])
	assert.Equal(t, "released", release(third["owner"])["status"])

	var holders, peak atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				a := post("acquire", acquire)
				if a == nil || a["ok"] != true {
					continue
				}
				n := holders.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				holders.Add(-1)
				assert.Equal(t, "released", release(a["owner"])["status"])
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, peak.Load(), int64(2), "never more holders than permits")
}

func TestSidecarPermitRejectsBadRequests(t *testing.T) {
	h := newSidecarHost(t, permitPolicies, nil)
	tok := strings.Repeat("a", 32)
	cases := []struct {
		op, body, code, field string
		status                int
	}{
		{"acquire", `{"policy":"exports",` + permitSubject + `,"bogus":1}`, "bad-request", "", 400},
		{"acquire", `{"policy":"exports",` + permitSubject + `} {}`, "bad-request", "", 400},
		{"acquire", `{"policy":"exports",` + permitSubject + `,"owner":"` + tok + `"}`, "invalid-field", "owner", 400},
		{"acquire", `{"policy":"exports",` + permitSubject + `,"revision":"r1"}`, "invalid-field", "revision", 400},
		{"acquire", `{` + permitSubject + `}`, "invalid-field", "policy", 400},
		{"acquire", `{"policy":"exports",` + permitSubject + `,"ttl-ms":-1}`, "invalid-field", "ttl-ms", 400},
		{"acquire", `{"policy":"exports",` + permitSubject + `,"ttl-ms":86400001}`, "invalid-field", "ttl-ms", 400},
		{"acquire", `{"policy":"exports",` + permitSubject + `,"ttl-ms":30001}`, "invalid-request", "", 400},
		{"acquire", `{"policy":"exports",` + permitSubject + `,"ttl-ms":5}`, "invalid-request", "", 400},
		{"acquire", `{"policy":"exports",` + permitSubject + `,"deadline-ms":10001}`, "invalid-field", "deadline-ms", 400},
		{"acquire", `{"policy":"exports","subject":{"tenant":"a"}}`, "missing-subject", "subject.route", 400},
		{"acquire", `{"policy":"exports","subject":{"ssn":"a"}}`, "invalid-field", "subject", 400},
		{"acquire", `{"policy":"exports","subject":{"tenant":""}}`, "invalid-field", "subject.tenant", 400},
		{"acquire", `{"policy":"nope",` + permitSubject + `}`, "unknown-policy", "", 400},
		{"acquire", `{"policy":"per-key","subject":{"api-key":"k"}}`, "invalid-field", "policy", 400},
		{"renew", `{"policy":"exports",` + permitSubject + `}`, "invalid-field", "owner", 400},
		{"renew", `{"policy":"exports",` + permitSubject + `,"owner":"short"}`, "invalid-field", "owner", 400},
		{"renew", `{"policy":"exports",` + permitSubject + `,"owner":"` + strings.ToUpper(tok) + `"}`, "invalid-field", "owner", 400},
		{"renew", `{"policy":"exports",` + permitSubject + `,"owner":"` + tok + `","revision":"Bad--rev"}`, "invalid-request", "", 400},
		{"release", `{"policy":"exports",` + permitSubject + `,"owner":"` + tok + `","ttl-ms":1000}`, "invalid-field", "ttl-ms", 400},
		{"release", `{"policy":"exports",` + permitSubject + `,"owner":"` + tok + `","revision":"` + strings.Repeat("r", 25) + `"}`, "invalid-field", "revision", 400},
		{"release", `{"policy":"exports","subject":{"tenant":"` + strings.Repeat("x", MaxPermitBodyBytes) + `"}}`, "too-large", "", 413},
	}
	for i, tc := range cases {
		code, m := h.permit(t, tc.op, tc.body)
		assert.Equal(t, tc.status, code, "case %d: %v", i, m)
		assert.Equal(t, tc.code, m["code"], "case %d: %v", i, m)
		if tc.field != "" {
			assert.Equal(t, tc.field, m["field"], "case %d", i)
		}
		raw, _ := json.Marshal(m)
		assert.NotContains(t, string(raw), "tenant-secret", "case %d: the subject is never echoed", i)
		assert.NotContains(t, string(raw), tok, "case %d: a token is never echoed", i)
	}

	rec := httptest.NewRecorder()
	h.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/concurrency/acquire", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Contains(t, rec.Body.String(), `"code":"method-not-allowed"`)
	req := httptest.NewRequest(http.MethodPost, "/v1/concurrency/acquire", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	rec = httptest.NewRecorder()
	h.mux.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code)
}

// TestSidecarPermitRedisDown: the limiter fails closed — 200 with
// ok=false, kind unavailable, nothing sent.
func TestSidecarPermitRedisDown(t *testing.T) {
	h := newSidecarHost(t, permitPolicies, nil)
	_, a := h.permit(t, "acquire", `{"policy":"exports",`+permitSubject+`}`)
	require.Equal(t, true, a["ok"])
	h.srv.Kill()
	code, o := h.permit(t, "acquire", `{"policy":"exports",`+permitSubject+`}`)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, false, o["ok"])
	assert.Equal(t, "unavailable", o["kind"])
	assert.Equal(t, "redis-unavailable", o["category"])
	assert.Equal(t, "UNAVAILABLE_BEFORE_SEND", o["certainty"])
	assert.Equal(t, 1000.0, o["retry-after-ms"])
	assert.Nil(t, o["owner"])
	_, r := h.permit(t, "release", fmt.Sprintf(`{"policy":"exports",%s,"owner":%q}`, permitSubject, a["owner"]))
	assert.Equal(t, false, r["ok"])
	assert.Equal(t, "unavailable", r["kind"])
}

func TestDecodePermitRequest(t *testing.T) {
	r, err := DecodePermitRequest(OpRenew, []byte(`{"policy":"p","revision":"r2","subject":{"tenant":"t"},"owner":"`+strings.Repeat("f", 32)+`","ttl-ms":100,"deadline-ms":50}`))
	require.NoError(t, err)
	assert.Equal(t, PermitRequest{Policy: "p", Revision: "r2", Subject: map[string]string{"tenant": "t"},
		Owner: strings.Repeat("f", 32), TTLMs: 100, DeadlineMs: 50}, r)
	_, err = DecodePermitRequest(OpAcquire, []byte(strings.Repeat(" ", MaxPermitBodyBytes+1)))
	var e *httpjson.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, httpjson.CodeTooLarge, e.Code())
}
