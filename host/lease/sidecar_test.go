package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/internal/redistest"
)

// sidecar mounts c's sidecar on a mux as the daemon does.
func sidecar(c *Client) http.Handler {
	mux := http.NewServeMux()
	httpjson.Mount(mux, NewSidecar(c).Routes())
	return mux
}

type answer struct {
	status int
	header http.Header
	raw    string
	ok     SidecarResponse
	err    httpjson.ErrorBody
}

func post(t *testing.T, h http.Handler, op, body string) answer {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/lease/"+op, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	a := answer{status: w.Code, header: w.Header(), raw: w.Body.String()}
	if w.Code == http.StatusOK {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a.ok), a.raw)
	} else {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a.err), a.raw)
	}
	return a
}

func body(fields map[string]any) string {
	b, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestSidecarRoundTrip: acquire, contend, inspect, renew and release over
// HTTP, with the owner token returned only by acquire and the server
// keeping no state between calls.
func TestSidecarRoundTrip(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	h := sidecar(c)
	ctx := ctxT(t)
	base := map[string]any{"purpose": "nightly-cleanup", "resource": "orders/2026-12-05", "operation-id": "cleanup-1"}
	with := func(kv ...any) string {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return body(m)
	}

	a := post(t, h, "acquire", with("ttl-ms", 10000))
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, SidecarResponse{Operation: "acquire", Kind: "ACQUIRED", Held: true, OwnerToken: a.ok.OwnerToken,
		ValidityMs: a.ok.ValidityMs, Certainty: "APPLIED", Attempts: 1}, a.ok)
	tok := a.ok.OwnerToken
	_, err := owner.Parse(tok)
	require.NoError(t, err, "a host-minted token")
	assert.Greater(t, a.ok.ValidityMs, int64(9000))
	assert.LessOrEqual(t, a.ok.ValidityMs, (10*time.Second - DefaultDriftBudget).Milliseconds())

	other := post(t, h, "acquire", with("operation-id", "cleanup-2", "ttl-ms", 10000))
	require.Equal(t, http.StatusOK, other.status, "CONTENDED is an outcome, not an error")
	assert.Equal(t, "CONTENDED", other.ok.Kind)
	assert.False(t, other.ok.Held)
	assert.Greater(t, other.ok.RetryAfterMs, int64(5000))
	assert.NotEqual(t, tok, other.ok.OwnerToken)

	same := post(t, h, "acquire", with("operation-id", "another-op", "ttl-ms", 10000, "owner-token", tok))
	assert.Equal(t, "OWNER_OPERATION_CONFLICT", same.ok.Kind)
	assert.False(t, same.ok.Held)

	in := post(t, h, "inspect", with("owner-token", tok))
	require.Equal(t, http.StatusOK, in.status, in.raw)
	assert.Equal(t, "REPLAYED_SAME_OPERATION", in.ok.Kind)
	assert.True(t, in.ok.Held)
	assert.Empty(t, in.ok.OwnerToken, "only acquire reveals the token")
	assert.NotContains(t, in.raw, tok)

	rn := post(t, h, "renew", with("owner-token", tok, "ttl-ms", 30000))
	require.Equal(t, http.StatusOK, rn.status, rn.raw)
	assert.Equal(t, "RENEWED", rn.ok.Kind)
	assert.True(t, rn.ok.Held)
	assert.Greater(t, rn.ok.ValidityMs, int64(29000))
	assert.NotContains(t, rn.raw, tok)
	probe, err := c.Inspect(ctx, "nightly-cleanup", []byte("orders/2026-12-05"), mustResume(t, tok, "cleanup-1"), time.Second)
	require.NoError(t, err)
	pttl, err := srv.Admin().PTTL(ctx, probe.Handle.key.Redis()).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 25*time.Second, "the renew extended the server's TTL")

	notMine := post(t, h, "renew", with("owner-token", other.ok.OwnerToken, "operation-id", "cleanup-2", "ttl-ms", 30000))
	assert.Equal(t, "LOST", notMine.ok.Kind, "another attempt cannot extend the lease")
	rel := post(t, h, "release", with("owner-token", other.ok.OwnerToken, "operation-id", "cleanup-2"))
	assert.Equal(t, "NOT_OWNER", rel.ok.Kind, "nor delete it")

	rel = post(t, h, "release", with("owner-token", tok))
	require.Equal(t, http.StatusOK, rel.status, rel.raw)
	assert.Equal(t, SidecarResponse{Operation: "release", Kind: "RELEASED", Certainty: "APPLIED"}, rel.ok)
	rel = post(t, h, "release", with("owner-token", tok))
	assert.Equal(t, "ALREADY_ABSENT", rel.ok.Kind)
	in = post(t, h, "inspect", with("owner-token", tok))
	assert.Equal(t, "ABSENT", in.ok.Kind)
	assert.False(t, in.ok.Held)
	rn = post(t, h, "renew", with("owner-token", tok, "ttl-ms", 30000))
	assert.Equal(t, "LOST", rn.ok.Kind)
	assert.False(t, rn.ok.Held)
}

func mustResume(t *testing.T, tok, op string) Attempt {
	t.Helper()
	o, err := owner.Parse(tok)
	require.NoError(t, err)
	a, err := ResumeAttempt(o, op)
	require.NoError(t, err)
	return a
}

// TestSidecarRepeatsALostAcquire: the acquire reaches Redis and no reply
// comes back (also not to the reconciling repeat): HTTP 200 INDETERMINATE,
// not held, with the owner token; repeating the acquire with that token
// finds the lease held by the attempt, never a second holder.
func TestSidecarRepeatsALostAcquire(t *testing.T) {
	srv := startRedis(t)
	p := redistest.NewProxy(t, srv.Addr())
	c := newClient(t, p.Addr())
	h := sidecar(c)
	warm := post(t, h, "acquire", body(map[string]any{"purpose": "warm-up", "resource": "x", "operation-id": "w", "ttl-ms": 1000}))
	require.Equal(t, "ACQUIRED", warm.ok.Kind, "the script is loaded before the stall")

	var repeats atomic.Int32
	c.beforeRepeat = func() { repeats.Add(1) }
	p.Stall()
	req := map[string]any{"purpose": "nightly-cleanup", "resource": "orders", "operation-id": "op", "ttl-ms": 10000}
	lost := post(t, h, "acquire", body(req))
	require.Equal(t, http.StatusOK, lost.status, lost.raw)
	assert.Equal(t, "INDETERMINATE", lost.ok.Kind)
	assert.Equal(t, "INDETERMINATE", lost.ok.Certainty)
	assert.False(t, lost.ok.Held, "never held on a guess")
	assert.Equal(t, int32(1), repeats.Load())
	require.NotEmpty(t, lost.ok.OwnerToken, "the token to repeat the attempt with")
	p.Passthrough()

	req["owner-token"] = lost.ok.OwnerToken
	again := post(t, h, "acquire", body(req))
	require.Equal(t, http.StatusOK, again.status, again.raw)
	assert.Equal(t, "REPLAYED_SAME_OPERATION", again.ok.Kind, "the stalled send applied; the repeat finds it")
	assert.True(t, again.ok.Held)
	assert.Equal(t, lost.ok.OwnerToken, again.ok.OwnerToken)
	other := post(t, h, "acquire", body(map[string]any{"purpose": "nightly-cleanup", "resource": "orders", "operation-id": "op", "ttl-ms": 10000}))
	assert.Equal(t, "CONTENDED", other.ok.Kind, "a fresh attempt is another owner")
}

// TestSidecarRedisDown: with Redis gone every operation answers 503
// unavailable with a Retry-After: nothing changed, repeating is safe.
func TestSidecarRedisDown(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	h := sidecar(c)
	a := post(t, h, "acquire", body(map[string]any{"purpose": "nightly-cleanup", "resource": "r", "operation-id": "op", "ttl-ms": 10000}))
	require.Equal(t, "ACQUIRED", a.ok.Kind)
	srv.Kill()
	for op, b := range map[string]map[string]any{
		"acquire": {"purpose": "nightly-cleanup", "resource": "r", "operation-id": "op2", "ttl-ms": 10000},
		"inspect": {"purpose": "nightly-cleanup", "resource": "r", "operation-id": "op", "owner-token": a.ok.OwnerToken},
		"renew":   {"purpose": "nightly-cleanup", "resource": "r", "operation-id": "op", "owner-token": a.ok.OwnerToken, "ttl-ms": 10000},
		"release": {"purpose": "nightly-cleanup", "resource": "r", "operation-id": "op", "owner-token": a.ok.OwnerToken},
	} {
		got := post(t, h, op, body(b))
		assert.Equal(t, http.StatusServiceUnavailable, got.status, "%s: %s", op, got.raw)
		assert.Equal(t, httpjson.CodeUnavailable, got.err.Code, op)
		assert.Equal(t, "1", got.header.Get("Retry-After"), op)
		assert.NotContains(t, got.raw, a.ok.OwnerToken, op)
	}
}

// TestSidecarRefusesHostileInput: every malformed, oversized or ambiguous
// body is refused with a stable code before anything reaches Redis, and no
// answer echoes a token or a value.
func TestSidecarRefusesHostileInput(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	h := sidecar(c)
	allow, err := New(newRuntime(t, srv.Addr()), Config{Purposes: []string{"nightly-cleanup"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = allow.Close(context.Background()) })
	ha := sidecar(allow)
	ctx := ctxT(t)
	before, err := srv.Admin().DBSize(ctx).Result()
	require.NoError(t, err)

	const tok = "0123456789abcdef0123456789abcdef"
	good := `"purpose":"nightly-cleanup","resource":"r","operation-id":"op"`
	long := strings.Repeat("a", MaxResourceBytes+1)
	cases := []struct {
		name, op, body string
		h              http.Handler
		status         int
		code           httpjson.Code
		field          string
	}{
		{"duplicate member", "acquire", `{` + good + `,"ttl-ms":1000,"ttl-ms":2000}`, h, 400, httpjson.CodeBadRequest, ""},
		{"duplicate purpose", "acquire", `{` + good + `,"purpose":"other","ttl-ms":1000}`, h, 400, httpjson.CodeBadRequest, ""},
		{"case variant", "acquire", `{"Purpose":"nightly-cleanup","resource":"r","operation-id":"op","ttl-ms":1000}`, h, 400, httpjson.CodeBadRequest, ""},
		{"unknown member", "acquire", `{` + good + `,"ttl-ms":1000,"ttl":1}`, h, 400, httpjson.CodeBadRequest, ""},
		{"invalid UTF-8", "acquire", "{\"purpose\":\"nightly-cleanup\",\"resource\":\"\xff\xfe\",\"operation-id\":\"op\",\"ttl-ms\":1000}", h, 400, httpjson.CodeBadRequest, ""},
		{"lone surrogate", "acquire", `{"purpose":"nightly-cleanup","resource":"\ud800","operation-id":"op","ttl-ms":1000}`, h, 400, httpjson.CodeBadRequest, ""},
		{"null", "acquire", `{"purpose":null,"resource":"r","operation-id":"op","ttl-ms":1000}`, h, 400, httpjson.CodeBadRequest, ""},
		{"trailing data", "acquire", `{` + good + `,"ttl-ms":1000}{}`, h, 400, httpjson.CodeBadRequest, ""},
		{"not an object", "acquire", `[1]`, h, 400, httpjson.CodeBadRequest, ""},
		{"string ttl", "acquire", `{` + good + `,"ttl-ms":"1000"}`, h, 400, httpjson.CodeBadRequest, ""},
		{"fractional ttl", "acquire", `{` + good + `,"ttl-ms":1000.5}`, h, 400, httpjson.CodeBadRequest, ""},
		{"oversized body", "acquire", `{"resource":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, h, 413, httpjson.CodeTooLarge, ""},
		{"oversized resource", "acquire", `{"purpose":"nightly-cleanup","resource":"` + long + `","operation-id":"op","ttl-ms":1000}`, h, 400, httpjson.CodeInvalidField, "resource"},
		{"empty resource", "acquire", `{"purpose":"nightly-cleanup","resource":"","operation-id":"op","ttl-ms":1000}`, h, 400, httpjson.CodeInvalidField, "resource"},
		{"long operation id", "acquire", `{"purpose":"nightly-cleanup","resource":"r","operation-id":"` + strings.Repeat("o", MaxOperationIDBytes+1) + `","ttl-ms":1000}`, h, 400, httpjson.CodeInvalidField, "operation-id"},
		{"no operation id", "acquire", `{"purpose":"nightly-cleanup","resource":"r","ttl-ms":1000}`, h, 400, httpjson.CodeInvalidField, "operation-id"},
		{"bad purpose", "acquire", `{"purpose":"Nightly Cleanup","resource":"r","operation-id":"op","ttl-ms":1000}`, h, 400, httpjson.CodeInvalidField, "purpose"},
		{"no ttl", "acquire", `{` + good + `}`, h, 400, httpjson.CodeInvalidField, "ttl-ms"},
		{"ttl within the drift", "acquire", `{` + good + `,"ttl-ms":50}`, h, 400, httpjson.CodeInvalidField, "ttl-ms"},
		{"ttl over max", "acquire", `{` + good + `,"ttl-ms":2592000001}`, h, 400, httpjson.CodeInvalidField, "ttl-ms"},
		{"negative wait", "acquire", `{` + good + `,"ttl-ms":1000,"wait-ms":-1}`, h, 400, httpjson.CodeInvalidField, "wait-ms"},
		{"wait over max", "acquire", `{` + good + `,"ttl-ms":1000,"wait-ms":600001}`, h, 400, httpjson.CodeInvalidField, "wait-ms"},
		{"bad owner token", "acquire", `{` + good + `,"ttl-ms":1000,"owner-token":"0123456789ABCDEF0123456789abcdef"}`, h, 400, httpjson.CodeInvalidField, "owner-token"},
		{"short owner token", "renew", `{` + good + `,"ttl-ms":1000,"owner-token":"0123456789abcdef"}`, h, 400, httpjson.CodeInvalidField, "owner-token"},
		{"no owner token", "release", `{` + good + `}`, h, 400, httpjson.CodeInvalidField, "owner-token"},
		{"no owner token to inspect", "inspect", `{` + good + `}`, h, 400, httpjson.CodeInvalidField, "owner-token"},
		{"ttl on release", "release", `{` + good + `,"owner-token":"` + tok + `","ttl-ms":1000}`, h, 400, httpjson.CodeInvalidField, "ttl-ms"},
		{"ttl on inspect", "inspect", `{` + good + `,"owner-token":"` + tok + `","ttl-ms":1000}`, h, 400, httpjson.CodeInvalidField, "ttl-ms"},
		{"wait on renew", "renew", `{` + good + `,"owner-token":"` + tok + `","ttl-ms":1000,"wait-ms":5}`, h, 400, httpjson.CodeInvalidField, "wait-ms"},
		{"no ttl on renew", "renew", `{` + good + `,"owner-token":"` + tok + `"}`, h, 400, httpjson.CodeInvalidField, "ttl-ms"},
		{"purpose not allowed", "acquire", `{"purpose":"other-job","resource":"r","operation-id":"op","ttl-ms":1000}`, ha, 400, CodeUnknownPurpose, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := post(t, tc.h, tc.op, tc.body)
			assert.Equal(t, tc.status, got.status, got.raw)
			assert.Equal(t, tc.code, got.err.Code, got.raw)
			assert.Equal(t, tc.field, got.err.Field)
			assert.NotContains(t, got.raw, "0123456789", "no token is echoed")
			assert.NotContains(t, got.raw, "Nightly Cleanup", "no value is echoed")
		})
	}

	r := httptest.NewRequest(http.MethodPost, "/v1/lease/acquire", bytes.NewReader([]byte(`{`+good+`,"ttl-ms":1000}`)))
	r.Header.Set("Content-Type", "text/plain")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusUnsupportedMediaType, w.Code)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/lease/acquire", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
	assert.Equal(t, "POST", w.Header().Get("Allow"))

	after, err := srv.Admin().DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Equal(t, before, after, "nothing reached Redis")
}

// TestSidecarValuesNeverPrintTheToken: a decoded request or an answer that
// reaches fmt or slog (text or JSON) shows neither the owner token nor the
// resource; the answer's JSON body still carries the token on purpose.
func TestSidecarValuesNeverPrintTheToken(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	req, err := DecodeRequest(OpRenew, []byte(`{"purpose":"nightly-cleanup","resource":"tenant-secret-42","operation-id":"op","ttl-ms":1000,"owner-token":"`+tok+`"}`),
		Limits{DriftBudget: DefaultDriftBudget, MaxTTL: time.Hour, MaxWait: time.Minute})
	require.NoError(t, err)
	resp := SidecarResponse{Operation: "acquire", Kind: "ACQUIRED", Held: true, OwnerToken: tok}
	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		slog.New(h).Info("call", "request", req, "answer", resp)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		buf.WriteString(fmt.Sprintf(verb, req) + fmt.Sprintf(verb, resp) + fmt.Sprintf(verb, &req))
	}
	out := buf.String()
	assert.NotContains(t, out, tok)
	assert.NotContains(t, out, "tenant-secret-42")
	assert.Contains(t, out, "OwnerToken:***")
	assert.Contains(t, out, "Resource:(16 bytes)")
	b, err := json.Marshal(resp)
	require.NoError(t, err)
	assert.Contains(t, string(b), tok, "the acquire answer itself carries the token")
}
