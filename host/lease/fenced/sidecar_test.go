package fenced

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/lease"
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
	raw    string
	ok     SidecarResponse
	err    httpjson.ErrorBody
}

func post(t testing.TB, h http.Handler, op, body string) answer {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/fenced-lease/"+op, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	a := answer{status: w.Code, raw: w.Body.String()}
	if w.Code == http.StatusOK {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a.ok), a.raw)
	} else {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a.err), a.raw)
	}
	return a
}

// fields builds a request body for reg from base fields and overrides.
func fields(reg fence.Registration, kv ...any) string {
	m := map[string]any{"purpose": "ledger", "resource": reg.Resource, "resource-epoch": reg.Epoch,
		"registration-digest": reg.Digest.String(), "operation-id": "pay-1"}
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

// TestSidecarRoundTrip: a non-Go holder acquires over HTTP, writes to the
// protected store with the (resource-epoch, counter) it got, renews,
// releases; a second holder gets the next counter and the first holder's
// late write is rejected by the store. The server keeps no state between
// calls and reveals the owner token only to acquire.
func TestSidecarRoundTrip(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{})
	h := sidecar(w.c)
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")

	a := post(t, h, "acquire", fields(reg, "ttl-ms", 10000))
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, SidecarResponse{Operation: "acquire", Kind: "ACQUIRED", Held: true, OwnerToken: a.ok.OwnerToken,
		ResourceEpoch: int64(reg.Epoch), Counter: 1, ValidityMs: a.ok.ValidityMs, Certainty: "APPLIED", Attempts: 1}, a.ok)
	assert.Greater(t, a.ok.ValidityMs, int64(9000))
	own := a.ok.OwnerToken
	tokA := fence.Token{Epoch: uint64(a.ok.ResourceEpoch), Counter: a.ok.Counter}
	require.NoError(t, w.write(ctx, tokA, "A", 110))

	other := post(t, h, "acquire", fields(reg, "operation-id", "pay-2", "ttl-ms", 10000))
	require.Equal(t, http.StatusOK, other.status, "CONTENDED is an outcome, not an error")
	assert.Equal(t, "CONTENDED", other.ok.Kind)
	assert.False(t, other.ok.Held)
	assert.Zero(t, other.ok.Counter, "no token without a grant")
	assert.Greater(t, other.ok.RetryAfterMs, int64(5000))

	again := post(t, h, "acquire", fields(reg, "ttl-ms", 10000, "owner-token", own))
	assert.Equal(t, "REPLAYED_SAME_OPERATION", again.ok.Kind, "a repeat after a lost reply: same token, no increment")
	assert.Equal(t, int64(1), again.ok.Counter)

	in := post(t, h, "inspect", fields(reg, "owner-token", own))
	require.Equal(t, http.StatusOK, in.status, in.raw)
	assert.Equal(t, "REPLAYED_SAME_OPERATION", in.ok.Kind)
	assert.True(t, in.ok.Held)
	assert.Equal(t, int64(1), in.ok.Counter)
	assert.NotContains(t, in.raw, own, "only acquire reveals the owner token")

	rn := post(t, h, "renew", fields(reg, "owner-token", own, "counter", 1, "ttl-ms", 30000))
	require.Equal(t, http.StatusOK, rn.status, rn.raw)
	assert.Equal(t, "RENEWED", rn.ok.Kind)
	assert.True(t, rn.ok.Held)
	assert.Greater(t, rn.ok.ValidityMs, int64(29000))
	pttl, err := srv.Admin().PTTL(ctx, ownerKey(t, w, "acct-7")).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 25*time.Second, "the renew extended the server's TTL")

	wrong := post(t, h, "renew", fields(reg, "owner-token", own, "counter", 2, "ttl-ms", 30000))
	assert.Equal(t, "LOST", wrong.ok.Kind, "a counter that is not the holder's token renews nothing")
	assert.False(t, wrong.ok.Held)

	rel := post(t, h, "release", fields(reg, "owner-token", own, "counter", 1))
	require.Equal(t, http.StatusOK, rel.status, rel.raw)
	assert.Equal(t, "RELEASED", rel.ok.Kind)
	assert.False(t, rel.ok.Held)

	b := post(t, h, "acquire", fields(reg, "operation-id", "pay-2", "ttl-ms", 10000))
	require.Equal(t, "ACQUIRED", b.ok.Kind)
	assert.Equal(t, int64(2), b.ok.Counter)
	require.NoError(t, w.write(ctx, fence.Token{Epoch: reg.Epoch, Counter: b.ok.Counter}, "B", 120))
	assert.ErrorIs(t, w.write(ctx, tokA, "A-late", 1), fence.ErrStaleToken)
	bal, who := w.account(t)
	assert.Equal(t, 120, bal)
	assert.Equal(t, "B", who)

	stale := post(t, h, "release", fields(reg, "owner-token", own, "counter", 1))
	assert.Equal(t, "NOT_OWNER", stale.ok.Kind, "the old holder never frees the new holder's lease")
	still := post(t, h, "inspect", fields(reg, "operation-id", "pay-2", "owner-token", b.ok.OwnerToken))
	assert.True(t, still.ok.Held)
}

// ownerKey is the Redis key of resource's fenced lease.
func ownerKey(t *testing.T, w *world, resource string) string {
	t.Helper()
	k, _, err := w.c.keysOf("ledger", resource)
	require.NoError(t, err)
	return k.Redis()
}

// TestSidecarFenceRefusals: a registration the counter does not match is
// a typed outcome (HTTP 200, held false, no token), never a grant; a
// counter that was never provisioned is not created.
func TestSidecarFenceRefusals(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{})
	h := sidecar(w.c)
	reg := w.activate(t, "acct-7")

	otherDigest := reg
	otherDigest.Digest = fence.NewDigest()
	otherEpoch := reg
	otherEpoch.Epoch++
	missing := reg
	missing.Resource = "never-provisioned"
	for want, r := range map[string]fence.Registration{
		"REGISTRATION_CONFLICT": otherDigest,
		"EPOCH_MISMATCH":        otherEpoch,
		"FENCE_COUNTER_MISSING": missing,
	} {
		got := post(t, h, "acquire", fields(r, "ttl-ms", 10000))
		require.Equal(t, http.StatusOK, got.status, got.raw)
		assert.Equal(t, want, got.ok.Kind)
		assert.False(t, got.ok.Held)
		assert.Zero(t, got.ok.Counter)
		in := post(t, h, "inspect", fields(r, "owner-token", got.ok.OwnerToken))
		assert.Equal(t, want, in.ok.Kind)
	}
	n, err := srv.Admin().Exists(context.Background(), ownerKey(t, w, "never-provisioned")).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestSidecarRefusesHostileInput: every malformed or out-of-bounds body is
// a 4xx JSON error naming the field, never echoing a value, and nothing
// reaches Redis.
func TestSidecarRefusesHostileInput(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{Purposes: []string{"ledger"}, MaxTTL: time.Minute, MaxWait: time.Second})
	h := sidecar(w.c)
	reg := fence.Registration{Resource: "acct-7", Epoch: 42, Digest: fence.NewDigest()}
	own := "0123456789abcdef0123456789abcdef"
	calls := srv.CommandCalls(t, "evalsha")
	type want struct {
		status int
		code   httpjson.Code
		field  string
	}
	for name, c := range map[string]struct {
		op, body string
		want     want
	}{
		"unknown member":     {"acquire", `{"purpose":"ledger","extra":1}`, want{400, httpjson.CodeBadRequest, ""}},
		"duplicate member":   {"acquire", `{"purpose":"ledger","purpose":"x"}`, want{400, httpjson.CodeBadRequest, ""}},
		"case variant":       {"acquire", `{"Purpose":"ledger"}`, want{400, httpjson.CodeBadRequest, ""}},
		"null":               {"acquire", `null`, want{400, httpjson.CodeBadRequest, ""}},
		"trailing":           {"acquire", fields(reg, "ttl-ms", 1000) + `{}`, want{400, httpjson.CodeBadRequest, ""}},
		"invalid utf-8":      {"acquire", "{\"purpose\":\"ledger\",\"resource\":\"\xff\"}", want{400, httpjson.CodeBadRequest, ""}},
		"lone surrogate":     {"acquire", `{"purpose":"ledger","resource":"\ud800"}`, want{400, httpjson.CodeBadRequest, ""}},
		"fractional epoch":   {"acquire", strings.Replace(fields(reg, "ttl-ms", 1000), `"resource-epoch":42`, `"resource-epoch":42.5`, 1), want{400, httpjson.CodeBadRequest, ""}},
		"epoch as string":    {"acquire", strings.Replace(fields(reg, "ttl-ms", 1000), `"resource-epoch":42`, `"resource-epoch":"42"`, 1), want{400, httpjson.CodeBadRequest, ""}},
		"epoch 0":            {"acquire", fields(reg, "resource-epoch", 0, "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "resource-epoch"}},
		"epoch 2^53":         {"acquire", fields(reg, "resource-epoch", int64(1)<<53, "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "resource-epoch"}},
		"negative epoch":     {"acquire", fields(reg, "resource-epoch", -1, "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "resource-epoch"}},
		"no digest":          {"acquire", fields(reg, "registration-digest", nil, "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "registration-digest"}},
		"upper-case digest":  {"acquire", fields(reg, "registration-digest", strings.ToUpper(reg.Digest.String()), "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "registration-digest"}},
		"no resource":        {"acquire", fields(reg, "resource", "", "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "resource"}},
		"long resource":      {"acquire", fields(reg, "resource", strings.Repeat("r", fence.MaxResourceLen+1), "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "resource"}},
		"bad purpose":        {"acquire", fields(reg, "purpose", "Ledger", "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "purpose"}},
		"unlisted purpose":   {"acquire", fields(reg, "purpose", "payroll", "ttl-ms", 1000), want{400, CodeUnknownPurpose, ""}},
		"no operation":       {"acquire", fields(reg, "operation-id", "", "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "operation-id"}},
		"no ttl":             {"acquire", fields(reg), want{400, httpjson.CodeInvalidField, "ttl-ms"}},
		"ttl at drift":       {"acquire", fields(reg, "ttl-ms", lease.DefaultDriftBudget.Milliseconds()), want{400, httpjson.CodeInvalidField, "ttl-ms"}},
		"ttl over max":       {"acquire", fields(reg, "ttl-ms", 60001), want{400, httpjson.CodeInvalidField, "ttl-ms"}},
		"wait over max":      {"acquire", fields(reg, "ttl-ms", 1000, "wait-ms", 1001), want{400, httpjson.CodeInvalidField, "wait-ms"}},
		"counter on acquire": {"acquire", fields(reg, "ttl-ms", 1000, "counter", 1), want{400, httpjson.CodeInvalidField, "counter"}},
		"bad owner token":    {"acquire", fields(reg, "ttl-ms", 1000, "owner-token", "secret-near-miss"), want{400, httpjson.CodeInvalidField, "owner-token"}},
		"inspect no owner":   {"inspect", fields(reg), want{400, httpjson.CodeInvalidField, "owner-token"}},
		"inspect with ttl":   {"inspect", fields(reg, "owner-token", own, "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "ttl-ms"}},
		"renew no counter":   {"renew", fields(reg, "owner-token", own, "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "counter"}},
		"renew counter 2^53": {"renew", fields(reg, "owner-token", own, "ttl-ms", 1000, "counter", int64(1)<<53), want{400, httpjson.CodeInvalidField, "counter"}},
		"renew with wait":    {"renew", fields(reg, "owner-token", own, "ttl-ms", 1000, "counter", 1, "wait-ms", 5), want{400, httpjson.CodeInvalidField, "wait-ms"}},
		"release no counter": {"release", fields(reg, "owner-token", own), want{400, httpjson.CodeInvalidField, "counter"}},
		"release with ttl":   {"release", fields(reg, "owner-token", own, "counter", 1, "ttl-ms", 1000), want{400, httpjson.CodeInvalidField, "ttl-ms"}},
		"too large":          {"acquire", `{"purpose":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, want{413, httpjson.CodeTooLarge, ""}},
	} {
		t.Run(name, func(t *testing.T) {
			got := post(t, h, c.op, c.body)
			assert.Equal(t, c.want.status, got.status, got.raw)
			assert.Equal(t, c.want.code, got.err.Code, got.raw)
			assert.Equal(t, c.want.field, got.err.Field)
			assert.NotContains(t, got.raw, "secret-near-miss")
			assert.NotContains(t, got.raw, reg.Digest.String())
		})
	}
	r := httptest.NewRequest(http.MethodGet, "/v1/fenced-lease/acquire", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	r = httptest.NewRequest(http.MethodPost, "/v1/fenced-lease/acquire", strings.NewReader(fields(reg, "ttl-ms", 1000)))
	r.Header.Set("Content-Type", "text/plain")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code)
	assert.Equal(t, calls, srv.CommandCalls(t, "evalsha"), "nothing reached Redis")
}

// TestSidecarRedisDown: with Redis gone, every operation is a 503
// unavailable (nothing was sent) or, for a pooled connection that broke
// under the send, a 200 INDETERMINATE — never a grant, never a 500.
func TestSidecarRedisDown(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{})
	h := sidecar(w.c)
	reg := w.activate(t, "acct-7")
	a := post(t, h, "acquire", fields(reg, "ttl-ms", 10000))
	require.True(t, a.ok.Held)
	srv.Kill()
	own := a.ok.OwnerToken
	for _, c := range []struct{ op, body string }{
		{"acquire", fields(reg, "operation-id", "pay-2", "ttl-ms", 10000)},
		{"inspect", fields(reg, "owner-token", own)},
		{"renew", fields(reg, "owner-token", own, "counter", 1, "ttl-ms", 10000)},
		{"release", fields(reg, "owner-token", own, "counter", 1)},
	} {
		for range 2 {
			got := post(t, h, c.op, c.body)
			if got.status == http.StatusOK {
				assert.Equal(t, "INDETERMINATE", got.ok.Kind, "%s: %s", c.op, got.raw)
				assert.False(t, got.ok.Held)
				continue
			}
			assert.Equal(t, http.StatusServiceUnavailable, got.status, "%s: %s", c.op, got.raw)
			assert.Equal(t, httpjson.CodeUnavailable, got.err.Code)
		}
	}
}

// TestMetricsCountOutcomes: acquires, renews, releases and handle losses
// are counted by purpose and outcome; issued tokens and Redis-side
// regressions have their own counters; an unlisted purpose never becomes
// a label.
func TestMetricsCountOutcomes(t *testing.T) {
	srv := redistest.StartStandalone(t)
	reg := prometheus.NewRegistry()
	c, err := New(newRuntime(t, srv.Addr()), Config{}, WithRegisterer(reg))
	require.NoError(t, err)
	w := newWorld(t, srv.Addr(), srv, Config{})
	w.c = c
	ctx := ctxT(t)
	r := w.activate(t, "acct-7")
	a, err := c.Acquire(ctx, Request{Purpose: "ledger", Registration: r, TTL: 10 * time.Second, Attempt: attempt(t, "a")})
	require.NoError(t, err)
	_, err = c.Acquire(ctx, Request{Purpose: "ledger", Registration: r, TTL: 10 * time.Second, Attempt: attempt(t, "b")})
	require.NoError(t, err)
	_, err = a.Handle.Renew(ctx)
	require.NoError(t, err)
	// Lower the counter behind the lease's back: Redis lost increments.
	_, counter, err := c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	require.NoError(t, srv.Admin().Set(ctx, counter.Redis(), fmt.Sprintf("C1:%d:0:%s", r.Epoch, r.Digest), 0).Err())
	kind, err := a.Handle.Renew(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.RenewLost, kind)
	assert.ErrorIs(t, a.Handle.Cause(), ErrFenceBroken)
	_, err = c.Acquire(ctx, Request{Purpose: "unlisted-" + "x", Registration: r, TTL: 10 * time.Second, Attempt: attempt(t, "c")})
	require.NoError(t, err)
	out, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range out {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetCounter().GetValue()
		}
	}
	assert.Equal(t, 1.0, got["caphost_fenced_lease_acquires_total,purpose=ledger,result=acquired"], "%v", got)
	assert.Equal(t, 1.0, got["caphost_fenced_lease_acquires_total,purpose=ledger,result=contended"])
	assert.Equal(t, 1.0, got["caphost_fenced_lease_renews_total,purpose=ledger,result=renewed"])
	assert.Equal(t, 1.0, got["caphost_fenced_lease_renews_total,purpose=ledger,result=lost"])
	assert.Equal(t, 1.0, got["caphost_fence_issued_total,purpose=ledger"])
	assert.Equal(t, 1.0, got["caphost_fence_regressions_total,operation=renew,purpose=ledger"])
	assert.Equal(t, 1.0, got["caphost_fenced_lease_lost_total,cause=fence_broken,purpose=ledger"])
	// The regressed counter refuses the next grant too (any purpose: the
	// counter is per purpose and resource, so this one is missing).
	assert.Equal(t, 1.0, got["caphost_fenced_lease_acquires_total,purpose=unlisted-x,result=fence_counter_missing"])
}

// TestMetricLabelsAreBounded: with an allowlist, an unlisted purpose is
// refused before any label is made; without one, purposes past
// lease.MaxPurposes share the label "other".
func TestMetricLabelsAreBounded(t *testing.T) {
	m, err := newMetrics(nil, []string{"ledger"})
	require.NoError(t, err)
	assert.Equal(t, "ledger", m.purpose("ledger"))
	assert.Equal(t, otherPurpose, m.purpose("payroll"))
	open, err := newMetrics(nil, nil)
	require.NoError(t, err)
	for i := range lease.MaxPurposes {
		assert.Equal(t, fmt.Sprintf("p%d", i), open.purpose(fmt.Sprintf("p%d", i)))
	}
	assert.Equal(t, otherPurpose, open.purpose("one-too-many"))
	assert.Equal(t, "p0", open.purpose("p0"))
}

// TestDecisionMetricsCountTheGuard: the protected side's decisions reach
// caphost_fence_decisions_total through fence.WithObserver, every outcome
// series present from the start.
func TestDecisionMetricsCountTheGuard(t *testing.T) {
	reg := prometheus.NewRegistry()
	dm, err := NewDecisionMetrics(reg)
	require.NoError(t, err)
	g, err := fence.NewGuard(7, 0, fence.Strict, fence.WithObserver(dm.Observer()))
	require.NoError(t, err)
	g.Admit(fence.Token{Epoch: 7, Counter: 2})
	g.Admit(fence.Token{Epoch: 7, Counter: 1})
	g.Admit(fence.Token{Epoch: 7, Counter: 2})
	g.Admit(fence.Token{Epoch: 6, Counter: 9})
	out, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, out, 1)
	got := map[string]float64{}
	for _, m := range out[0].GetMetric() {
		got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	assert.Equal(t, map[string]float64{"admitted": 1, "readmitted": 0, "stale": 2, "epoch_retired": 1,
		"epoch_unregistered": 0, "not_active": 0, "unknown_resource": 0, "invalid": 0}, got)
	_, err = NewDecisionMetrics(reg)
	assert.Error(t, err, "one per registry")
}
