package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// sidecar mounts e's sidecar on a mux as the daemon does.
func sidecar(e *Executor) http.Handler {
	mux := http.NewServeMux()
	httpjson.Mount(mux, NewSidecar(e).Routes())
	return mux
}

type answer struct {
	status int
	header http.Header
	raw    string
	ok     SidecarResponse
	err    httpjson.ErrorBody
}

func sidePost(t *testing.T, h http.Handler, step, body string) answer {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/idempotency/"+step, strings.NewReader(body))
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

func fingerprint(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// body builds a JSON body from the base request and kv pairs (a nil value
// removes the field).
func body(base map[string]any, kv ...any) string {
	m := map[string]any{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(m, kv[i].(string))
			continue
		}
		m[kv[i].(string)] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func scopeOf(key string) map[string]any {
	return map[string]any{"route": "create-payment", "principal": "tenant-7", "key": key, "operation-id": "op-1"}
}

// TestSidecarRoundTrip: claim, a duplicate, inspect, start (and its
// repeat), renew, complete (and its repeat), then a retry replays the
// stored response and the same key with another request is refused; the
// owner token appears in claim's answers only and the server keeps no
// state between calls.
func TestSidecarRoundTrip(t *testing.T) {
	srv := redistest.StartStandalone(t)
	h := sidecar(newExecutor(t, srv.Addr(), Config{}))
	s := scopeOf("k-1")
	fp := fingerprint("POST /v1/payments amount=5")

	c := sidePost(t, h, "claim", body(s, "fingerprint", fp))
	require.Equal(t, http.StatusOK, c.status, c.raw)
	assert.Equal(t, SidecarResponse{Operation: "claim", Kind: "ACQUIRED", Owned: true, State: "CLAIMED", OwnerToken: c.ok.OwnerToken,
		Attempt: 1, RetryAfterMs: DefaultLease.Milliseconds(), Certainty: "APPLIED"}, c.ok)
	tok := c.ok.OwnerToken
	require.Len(t, tok, 32)

	dup := sidePost(t, h, "claim", body(s, "fingerprint", fp, "operation-id", "op-2"))
	require.Equal(t, http.StatusOK, dup.status, "IN_PROGRESS is an outcome, not an error")
	assert.Equal(t, "IN_PROGRESS", dup.ok.Kind)
	assert.False(t, dup.ok.Owned)
	assert.Positive(t, dup.ok.RetryAfterMs)
	assert.NotEqual(t, tok, dup.ok.OwnerToken)

	in := sidePost(t, h, "inspect", body(s, "fingerprint", fp, "owner-token", tok))
	require.Equal(t, http.StatusOK, in.status, in.raw)
	assert.Equal(t, "CLAIMED_SAME_OPERATION", in.ok.Kind)
	assert.True(t, in.ok.Owned)
	assert.NotContains(t, in.raw, tok, "only claim reveals the token")

	owner := []any{"owner-token", tok, "attempt", 1}
	st := sidePost(t, h, "start", body(s, owner...))
	require.Equal(t, http.StatusOK, st.status, st.raw)
	assert.Equal(t, "STARTED", st.ok.Kind)
	assert.Equal(t, "EXECUTING", st.ok.State)
	require.NotNil(t, st.ok.ValidForMs, "a started action gets its deadline")
	assert.LessOrEqual(t, *st.ok.ValidForMs, (DefaultLease - DefaultLease/10).Milliseconds())
	assert.Positive(t, *st.ok.ValidForMs)
	st = sidePost(t, h, "start", body(s, owner...))
	assert.Equal(t, "ALREADY_STARTED_SAME_OPERATION", st.ok.Kind, "a repeated start is recognised as the same")
	notMine := sidePost(t, h, "start", body(s, "owner-token", dup.ok.OwnerToken, "operation-id", "op-2", "attempt", 1))
	assert.Equal(t, "NOT_OWNER", notMine.ok.Kind)
	again := sidePost(t, h, "claim", body(s, "fingerprint", fp, "owner-token", tok))
	assert.Equal(t, "REPLAYED_ACQUIRE", again.ok.Kind)
	assert.Equal(t, "EXECUTING", again.ok.State, "the action started: never run it again on this alone")

	rn := sidePost(t, h, "renew", body(s, owner...))
	assert.Equal(t, "RENEWED", rn.ok.Kind)
	require.NotNil(t, rn.ok.ValidForMs)
	assert.Positive(t, *rn.ok.ValidForMs)
	assert.Nil(t, notMine.ok.ValidForMs, "no deadline without the lease")
	resp := base64.StdEncoding.EncodeToString([]byte(`{"id":42}`))
	cp := sidePost(t, h, "complete", body(s, append(owner, "response", resp)...))
	require.Equal(t, http.StatusOK, cp.status, cp.raw)
	assert.Equal(t, "COMPLETED", cp.ok.Kind)
	cp = sidePost(t, h, "complete", body(s, append(owner, "response", resp)...))
	assert.Equal(t, "ALREADY_COMPLETED_SAME_RESULT", cp.ok.Kind, "a repeated complete is recognised as the same")
	for _, a := range []answer{in, st, notMine, rn, cp} {
		assert.NotContains(t, a.raw, tok)
		assert.NotContains(t, a.raw, "tenant-7")
	}

	retry := sidePost(t, h, "claim", body(s, "fingerprint", fp, "operation-id", "retry"))
	require.Equal(t, http.StatusOK, retry.status, retry.raw)
	assert.Equal(t, "COMPLETED_REPLAY", retry.ok.Kind)
	assert.Equal(t, resp, retry.ok.Response)
	assert.False(t, retry.ok.Owned)
	other := sidePost(t, h, "claim", body(s, "fingerprint", fingerprint("POST /v1/payments amount=6"), "operation-id", "retry"))
	assert.Equal(t, "FINGERPRINT_MISMATCH", other.ok.Kind)
	codec := sidePost(t, h, "claim", body(s, "fingerprint", fp, "operation-id", "retry", "codec-id", "json-v2"))
	assert.Equal(t, "POLICY_MISMATCH", codec.ok.Kind, "a response is replayed only to its codec")
}

// TestSidecarFailAndRelease: release before start gives the record back;
// a retryable failure is taken over by the next claim with attempt 2; an
// abandoned one makes every later claim RECOVERY_REQUIRED; release after
// start is refused.
func TestSidecarFailAndRelease(t *testing.T) {
	srv := redistest.StartStandalone(t)
	h := sidecar(newExecutor(t, srv.Addr(), Config{}))
	s := scopeOf("k-2")
	fp := fingerprint("r")
	claim := func(op string) SidecarResponse {
		a := sidePost(t, h, "claim", body(s, "fingerprint", fp, "operation-id", op))
		require.Equal(t, http.StatusOK, a.status, a.raw)
		return a.ok
	}
	step := func(name string, c SidecarResponse, op string, kv ...any) SidecarResponse {
		a := sidePost(t, h, name, body(s, append([]any{"owner-token", c.OwnerToken, "operation-id", op, "attempt", c.Attempt}, kv...)...))
		require.Equal(t, http.StatusOK, a.status, a.raw)
		return a.ok
	}

	c := claim("a")
	require.True(t, c.Owned)
	assert.Equal(t, "RELEASED_BEFORE_EXECUTION", step("release", c, "a").Kind)
	assert.Equal(t, "ALREADY_RELEASED_SAME_OPERATION", step("release", c, "a").Kind)

	c = claim("b")
	require.True(t, c.Owned, c.Kind)
	assert.Equal(t, "STARTED", step("start", c, "b").Kind)
	assert.Equal(t, "EXECUTION_ALREADY_STARTED", step("release", c, "b").Kind, "a started record stays")
	assert.Equal(t, "MARKED_RETRYABLE", step("fail", c, "b", "disposition", "retryable").Kind)

	c2 := claim("c")
	assert.Equal(t, "TAKEN_OVER_CLAIMED", c2.Kind)
	assert.Equal(t, int64(c.Attempt+1), c2.Attempt)
	assert.Equal(t, "NOT_OWNER", step("start", c, "b").Kind, "the old attempt cannot start the new one's record")
	assert.Equal(t, "STARTED", step("start", c2, "c").Kind)
	assert.Equal(t, "MARKED_ABANDONED", step("fail", c2, "c", "disposition", "abandon").Kind)
	assert.Equal(t, "ALREADY_MARKED_SAME_OPERATION", step("fail", c2, "c", "disposition", "abandon").Kind)
	assert.Equal(t, "RECOVERY_REQUIRED", claim("d").Kind, "an unknown effect is never run again")
}

// TestSidecarRepeatsALostClaim: the claim reaches Redis and no reply comes
// back (also not to the repeat and the inspection): HTTP 200 INDETERMINATE,
// not owned, with the owner token; repeating the claim with that token
// finds the record this attempt's, never a second owner.
func TestSidecarRepeatsALostClaim(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	e := newExecutor(t, p.Addr(), Config{})
	h := sidecar(e)
	fp := fingerprint("r")
	warm := sidePost(t, h, "claim", body(scopeOf("warm"), "fingerprint", fp))
	require.Equal(t, "ACQUIRED", warm.ok.Kind, "the scripts are loaded before the stall")
	warmIn := sidePost(t, h, "inspect", body(scopeOf("warm"), "fingerprint", fp, "owner-token", warm.ok.OwnerToken))
	require.Equal(t, "CLAIMED_SAME_OPERATION", warmIn.ok.Kind)

	var repeats atomic.Int32
	e.beforeRepeat = func(string) { repeats.Add(1) }
	p.Stall()
	s := scopeOf("lost")
	lost := sidePost(t, h, "claim", body(s, "fingerprint", fp))
	require.Equal(t, http.StatusOK, lost.status, lost.raw)
	assert.Equal(t, "INDETERMINATE", lost.ok.Kind)
	assert.Equal(t, "INDETERMINATE", lost.ok.Certainty)
	assert.False(t, lost.ok.Owned, "never owned on a guess")
	assert.Equal(t, int32(1), repeats.Load())
	require.NotEmpty(t, lost.ok.OwnerToken, "the token to repeat the attempt with")
	p.Passthrough()

	again := sidePost(t, h, "claim", body(s, "fingerprint", fp, "owner-token", lost.ok.OwnerToken))
	require.Equal(t, http.StatusOK, again.status, again.raw)
	assert.Equal(t, "REPLAYED_ACQUIRE", again.ok.Kind, "the stalled send applied; the repeat finds it")
	assert.True(t, again.ok.Owned)
	assert.Equal(t, "CLAIMED", again.ok.State)
	assert.Equal(t, lost.ok.OwnerToken, again.ok.OwnerToken)
	other := sidePost(t, h, "claim", body(s, "fingerprint", fp, "operation-id", "another"))
	assert.Equal(t, "IN_PROGRESS", other.ok.Kind, "a fresh attempt is another owner")
}

// TestSidecarRedisDown: with Redis gone every step answers 503 unavailable
// with a Retry-After (nothing was sent) or, when a pooled connection broke
// under the send, 200 INDETERMINATE; never a success.
func TestSidecarRedisDown(t *testing.T) {
	srv := redistest.StartStandalone(t)
	h := sidecar(newExecutor(t, srv.Addr(), Config{}))
	s := scopeOf("down")
	fp := fingerprint("r")
	c := sidePost(t, h, "claim", body(s, "fingerprint", fp))
	require.Equal(t, "ACQUIRED", c.ok.Kind)
	srv.Kill()
	owner := []any{"owner-token", c.ok.OwnerToken, "attempt", 1}
	for step, b := range map[string]string{
		"claim":    body(s, "fingerprint", fp, "operation-id", "op-2"),
		"inspect":  body(s, "fingerprint", fp, "owner-token", c.ok.OwnerToken),
		"start":    body(s, owner...),
		"renew":    body(s, owner...),
		"complete": body(s, append(owner, "response", "eA==")...),
		"fail":     body(s, append(owner, "disposition", "retryable")...),
		"release":  body(s, owner...),
	} {
		for range 2 {
			got := sidePost(t, h, step, b)
			if got.status == http.StatusOK {
				assert.Equal(t, "INDETERMINATE", got.ok.Kind, "%s: %s", step, got.raw)
				continue
			}
			assert.Equal(t, http.StatusServiceUnavailable, got.status, "%s: %s", step, got.raw)
			assert.Equal(t, httpjson.CodeUnavailable, got.err.Code, step)
			assert.Equal(t, "1", got.header.Get("Retry-After"), step)
			assert.NotContains(t, got.raw, c.ok.OwnerToken, step)
		}
	}
}

// TestSidecarRefusesHostileInput: every malformed, oversized or ambiguous
// body is refused with a stable code before anything reaches Redis, and no
// answer echoes a token or a value.
func TestSidecarRefusesHostileInput(t *testing.T) {
	srv := redistest.StartStandalone(t)
	h := sidecar(newExecutor(t, srv.Addr(), Config{MaxResponseBytes: 16}))
	ha := sidecar(newExecutor(t, srv.Addr(), Config{Routes: []string{"create-payment"}}))
	ctx := ctxT(t)
	before, err := srv.Admin().DBSize(ctx).Result()
	require.NoError(t, err)

	const tok = "0123456789abcdef0123456789abcdef"
	fp := fingerprint("r")
	good := `"route":"create-payment","principal":"tenant-secret","key":"k","operation-id":"op"`
	own := `,"owner-token":"` + tok + `","attempt":1`
	cases := []struct {
		name, step, body string
		h                http.Handler
		status           int
		code             httpjson.Code
		field            string
	}{
		{"duplicate member", "claim", `{` + good + `,"fingerprint":"` + fp + `","key":"k2"}`, h, 400, httpjson.CodeBadRequest, ""},
		{"case variant", "claim", `{"Route":"create-payment","principal":"p","key":"k","operation-id":"op","fingerprint":"` + fp + `"}`, h, 400, httpjson.CodeBadRequest, ""},
		{"unknown member", "claim", `{` + good + `,"fingerprint":"` + fp + `","lease-ms":1}`, h, 400, httpjson.CodeBadRequest, ""},
		{"invalid UTF-8", "claim", "{\"route\":\"create-payment\",\"principal\":\"\xff\xfe\",\"key\":\"k\",\"operation-id\":\"op\",\"fingerprint\":\"" + fp + "\"}", h, 400, httpjson.CodeBadRequest, ""},
		{"lone surrogate", "claim", `{"route":"create-payment","principal":"p","key":"\ud800","operation-id":"op","fingerprint":"` + fp + `"}`, h, 400, httpjson.CodeBadRequest, ""},
		{"null", "claim", `{"route":null,"principal":"p","key":"k","operation-id":"op","fingerprint":"` + fp + `"}`, h, 400, httpjson.CodeBadRequest, ""},
		{"trailing data", "claim", `{` + good + `,"fingerprint":"` + fp + `"}{}`, h, 400, httpjson.CodeBadRequest, ""},
		{"string attempt", "start", `{` + good + `,"owner-token":"` + tok + `","attempt":"1"}`, h, 400, httpjson.CodeBadRequest, ""},
		{"oversized body", "claim", `{"principal":"` + strings.Repeat("a", MaxBodyBytes(16)) + `"}`, h, 413, httpjson.CodeTooLarge, ""},
		{"oversized response", "complete", `{` + good + own + `,"response":"` + base64.StdEncoding.EncodeToString(make([]byte, 17)) + `"}`, h, 413, CodeResponseTooLarge, ""},
		{"response not base64", "complete", `{` + good + own + `,"response":"not base64!"}`, h, 400, httpjson.CodeInvalidField, "response"},
		{"oversized principal", "claim", `{"route":"create-payment","principal":"` + strings.Repeat("p", MaxPrincipalBytes+1) + `","key":"k","operation-id":"op","fingerprint":"` + fp + `"}`, h, 400, httpjson.CodeInvalidField, "principal"},
		{"oversized key", "claim", `{"route":"create-payment","principal":"p","key":"` + strings.Repeat("k", MaxKeyBytes+1) + `","operation-id":"op","fingerprint":"` + fp + `"}`, h, 400, httpjson.CodeInvalidField, "key"},
		{"no operation id", "claim", `{"route":"create-payment","principal":"p","key":"k","fingerprint":"` + fp + `"}`, h, 400, httpjson.CodeInvalidField, "operation-id"},
		{"bad route", "claim", `{"route":"Create Payment","principal":"p","key":"k","operation-id":"op","fingerprint":"` + fp + `"}`, h, 400, httpjson.CodeInvalidField, "route"},
		{"no fingerprint", "claim", `{` + good + `}`, h, 400, httpjson.CodeInvalidField, "fingerprint"},
		{"upper-case fingerprint", "claim", `{` + good + `,"fingerprint":"` + strings.ToUpper(fp) + `"}`, h, 400, httpjson.CodeInvalidField, "fingerprint"},
		{"short fingerprint", "claim", `{` + good + `,"fingerprint":"abcd"}`, h, 400, httpjson.CodeInvalidField, "fingerprint"},
		{"fingerprint on start", "start", `{` + good + own + `,"fingerprint":"` + fp + `"}`, h, 400, httpjson.CodeInvalidField, "fingerprint"},
		{"bad owner token", "claim", `{` + good + `,"fingerprint":"` + fp + `","owner-token":"0123456789ABCDEF0123456789abcdef"}`, h, 400, httpjson.CodeInvalidField, "owner-token"},
		{"short owner token", "start", `{` + good + `,"owner-token":"0123456789abcdef","attempt":1}`, h, 400, httpjson.CodeInvalidField, "owner-token"},
		{"no owner token", "release", `{` + good + `,"attempt":1}`, h, 400, httpjson.CodeInvalidField, "owner-token"},
		{"no owner token to inspect", "inspect", `{` + good + `,"fingerprint":"` + fp + `"}`, h, 400, httpjson.CodeInvalidField, "owner-token"},
		{"no attempt", "start", `{` + good + `,"owner-token":"` + tok + `"}`, h, 400, httpjson.CodeInvalidField, "attempt"},
		{"negative attempt", "start", `{` + good + `,"owner-token":"` + tok + `","attempt":-1}`, h, 400, httpjson.CodeInvalidField, "attempt"},
		{"attempt on claim", "claim", `{` + good + `,"fingerprint":"` + fp + `","attempt":1}`, h, 400, httpjson.CodeInvalidField, "attempt"},
		{"no disposition", "fail", `{` + good + own + `}`, h, 400, httpjson.CodeInvalidField, "disposition"},
		{"bad disposition", "fail", `{` + good + own + `,"disposition":"retry"}`, h, 400, httpjson.CodeInvalidField, "disposition"},
		{"disposition on release", "release", `{` + good + own + `,"disposition":"abandon"}`, h, 400, httpjson.CodeInvalidField, "disposition"},
		{"response on start", "start", `{` + good + own + `,"response":"eA=="}`, h, 400, httpjson.CodeInvalidField, "response"},
		{"route not allowed", "claim", `{"route":"other-route","principal":"p","key":"k","operation-id":"op","fingerprint":"` + fp + `"}`, ha, 400, CodeUnknownRoute, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := sidePost(t, tc.h, tc.step, tc.body)
			assert.Equal(t, tc.status, got.status, got.raw)
			assert.Equal(t, tc.code, got.err.Code, got.raw)
			assert.Equal(t, tc.field, got.err.Field)
			assert.NotContains(t, got.raw, "0123456789", "no token is echoed")
			assert.NotContains(t, got.raw, "tenant-secret", "no value is echoed")
			assert.NotContains(t, got.raw, "Create Payment", "no value is echoed")
		})
	}

	r := httptest.NewRequest(http.MethodPost, "/v1/idempotency/claim", bytes.NewReader([]byte(`{`+good+`,"fingerprint":"`+fp+`"}`)))
	r.Header.Set("Content-Type", "text/plain")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusUnsupportedMediaType, w.Code)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/idempotency/claim", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
	assert.Equal(t, "POST", w.Header().Get("Allow"))

	after, err := srv.Admin().DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Equal(t, before, after, "nothing reached Redis")
}

// TestSidecarValuesNeverPrintTheToken: a decoded request or an answer that
// reaches fmt or slog (text or JSON) shows neither the owner token nor the
// principal, the key or the response; the claim answer's JSON body still
// carries the token on purpose.
func TestSidecarValuesNeverPrintTheToken(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	req, err := DecodeRequest(StepComplete, []byte(`{"route":"create-payment","principal":"tenant-secret-42","key":"key-secret","operation-id":"op","owner-token":"`+tok+`","attempt":1,"response":"c2VjcmV0LXJlc3BvbnNl"}`),
		Limits{MaxResponseBytes: DefaultMaxResponseBytes})
	require.NoError(t, err)
	resp := SidecarResponse{Operation: "claim", Kind: "COMPLETED_REPLAY", OwnerToken: tok, Response: "c2VjcmV0LXJlc3BvbnNl"}
	var buf bytes.Buffer
	for _, h := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		slog.New(h).Info("call", "request", req, "answer", resp)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		buf.WriteString(fmt.Sprintf(verb, req) + fmt.Sprintf(verb, resp) + fmt.Sprintf(verb, &req) + fmt.Sprintf(verb, &resp))
	}
	out := buf.String()
	for _, secret := range []string{tok, "tenant-secret-42", "key-secret", "c2VjcmV0LXJlc3BvbnNl"} {
		assert.NotContains(t, out, secret)
	}
	assert.Contains(t, out, "OwnerToken:***")
	assert.Contains(t, out, "Principal:(16 bytes)")
	b, err := json.Marshal(resp)
	require.NoError(t, err)
	assert.Contains(t, string(b), tok, "the claim answer itself carries the token")
}

// TestBudgetsBoundTheResponse: an executor whose response bound the
// deployment's request or reply budget would not let through is refused
// at construction, naming the budget; one that fits is built.
func TestBudgetsBoundTheResponse(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg := redistest.ExampleConfig(srv.Addr(), policy.RoleCoordination)
	dep := cfg.Deployments["main"]
	dep.Budgets = policy.Budgets{MaxRequestBytes: 32 << 10, MaxReplyBytes: 16 << 10}
	cfg.Deployments["main"] = dep
	rt := newRuntimeFrom(t, cfg)
	_, err := New(rt, Config{})
	require.ErrorIs(t, err, ErrInvalidRequest)
	assert.Contains(t, err.Error(), "budgets.max-request-bytes")
	assert.Contains(t, err.Error(), "budgets.max-reply-bytes")
	_, err = New(rt, Config{MaxResponseBytes: 16<<10 - budgetOverhead})
	assert.NoError(t, err)
	_, err = New(rt, Config{MaxResponseBytes: 16<<10 - budgetOverhead + 1})
	assert.ErrorIs(t, err, ErrInvalidRequest)
}
