package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/host/idempotency"
	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/internal/redistest"
)

// TestIdempotencyCapability: a configured idempotency block serves the
// sidecar through the daemon's HTTP API and the executor through
// Host.Idempotency (sharing the records), reports its descriptor
// (request-replay on the coordination role, fail-closed), counts on the
// host's /metrics, and refuses a response bound the deployment's budgets
// do not admit; without the block the routes answer 503
// capability-disabled.
func TestIdempotencyCapability(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg, err := capConfig(t, srv.Addr(), true, block("idempotency", "provider: redis\nredis-role: coordination\nroutes: [create-payment]"))
	require.NoError(t, err)
	h := newHost(t, cfg)
	api := httpapi.New(h, httpapi.Options{})

	sum := sha256.Sum256([]byte("POST /v1/payments {\"amount\":5}"))
	fp := hex.EncodeToString(sum[:])
	scope := `"route":"create-payment","principal":"tenant-7","key":"k-1","operation-id":"op-1"`
	code, got := postJSON(t, api, "/v1/idempotency/claim", `{`+scope+`,"fingerprint":"`+fp+`"}`)
	require.Equal(t, http.StatusOK, code, got)
	assert.Equal(t, "ACQUIRED", got["kind"])
	assert.Equal(t, true, got["owned"])
	tok, _ := got["owner-token"].(string)
	require.Len(t, tok, 32)
	with := `,"owner-token":"` + tok + `","attempt":1`
	code, got = postJSON(t, api, "/v1/idempotency/start", `{`+scope+with+`}`)
	require.Equal(t, http.StatusOK, code, got)
	assert.Equal(t, "STARTED", got["kind"])
	resp := base64.StdEncoding.EncodeToString([]byte(`{"id":42}`))
	code, got = postJSON(t, api, "/v1/idempotency/complete", `{`+scope+with+`,"response":"`+resp+`"}`)
	require.Equal(t, http.StatusOK, code, got)
	assert.Equal(t, "COMPLETED", got["kind"])

	e, err := h.Idempotency()
	require.NoError(t, err)
	a, err := owner.NewAttempt("go-retry")
	require.NoError(t, err)
	var fpb idempotency.Fingerprint
	copy(fpb[:], sum[:])
	ex, err := e.Execute(context.Background(), idempotency.Request{
		Scope:       idempotency.Scope{Route: "create-payment", Principal: []byte("tenant-7"), Key: "k-1"},
		Fingerprint: fpb, Attempt: a, CodecID: idempotency.SidecarCodec,
	}, func(context.Context) idempotency.Result {
		t.Error("a completed request never runs again")
		return idempotency.Result{}
	})
	require.NoError(t, err)
	assert.Equal(t, idempotency.Replayed, ex.Kind, "the Go executor and the sidecar share the records")
	assert.Equal(t, `{"id":42}`, string(ex.Response))

	code, got = postJSON(t, api, "/v1/idempotency/claim", `{"route":"other-route","principal":"p","key":"k","operation-id":"o","fingerprint":"`+fp+`"}`)
	assert.Equal(t, http.StatusBadRequest, code, "routes from the block bound the route")
	assert.Equal(t, "unknown-route", got["code"])

	st := statusOf(t, h, idempotency.CapabilityID)
	assert.Equal(t, capability.StateActive, st.State)
	require.NotNil(t, st.Descriptor)
	assert.Equal(t, capability.R1, st.Claimed)
	assert.Contains(t, st.Descriptor.Guarantees, capability.GuaranteeRequestReplay)
	assert.Contains(t, st.Descriptor.Guarantees, capability.GuaranteeAtMostOncePerAttempt)
	assert.Contains(t, st.Descriptor.NonGuarantees, capability.NonGuaranteeExactlyOnceEffects)
	assert.Equal(t, capability.FailClosed, st.Descriptor.FailureMode)
	assert.Equal(t, capability.ImpactRequired, st.Descriptor.Impact)

	status, body := get(t, api, "/metrics")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `caphost_idempotency_claims_total{result="acquired",route="create-payment"} 1`)
	assert.Contains(t, body, `caphost_idempotency_executions_total{kind="replayed",route="create-payment"} 1`)
	assert.NotContains(t, body, tok)
	assert.NotContains(t, body, "tenant-7")

	big, err := capConfig(t, srv.Addr(), true, block("idempotency", "provider: redis\nredis-role: coordination\nmax-response-bytes: 1048576"))
	require.NoError(t, err, "the bound is within the programs'; only the deployment's budgets refuse it")
	_, err = host.New(context.Background(), big, host.WithLogger(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "budgets.max-request-bytes")

	off, err := capConfig(t, srv.Addr(), true, block("idempotency", "provider: disabled"))
	require.NoError(t, err)
	hoff := newHost(t, off)
	_, err = hoff.Idempotency()
	assert.ErrorIs(t, err, host.ErrCapabilityDisabled)
	code, got = postJSON(t, httpapi.New(hoff, httpapi.Options{}), "/v1/idempotency/claim", `{}`)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "capability-disabled", got["code"])
}

// idemFixture is a host whose coordination role reaches Redis through p,
// its executor, and a request builder for the create-payment route.
func idemFixture(t *testing.T, p *redistest.Proxy) (*idempotency.Executor, func(key string) idempotency.Request) {
	t.Helper()
	cfg, err := capConfig(t, p.Addr(), true, block("idempotency", "provider: redis\nredis-role: coordination\nroutes: [create-payment]"))
	require.NoError(t, err)
	e, err := newHost(t, cfg).Idempotency()
	require.NoError(t, err)
	return e, func(key string) idempotency.Request {
		a, err := owner.NewAttempt("op-" + key)
		require.NoError(t, err)
		return idempotency.Request{Scope: idempotency.Scope{Route: "create-payment", Principal: []byte("tenant-7"), Key: key},
			Fingerprint: idempotency.FingerprintOf("POST", "/v1/payments", "", []byte(key)), Attempt: a}
	}
}

// started claims and starts r, as a stateless caller does before its
// action; it returns the attempt number.
func started(t *testing.T, e *idempotency.Executor, r idempotency.Request) int64 {
	t.Helper()
	ctx := context.Background()
	c, err := e.Claim(ctx, r)
	require.NoError(t, err)
	require.Equal(t, "ACQUIRED", c.Status)
	s, err := e.Start(ctx, r.Scope, r.Attempt, c.Attempt)
	require.NoError(t, err)
	require.Equal(t, "STARTED", s.Status)
	return c.Attempt
}

// TestIdempotencyLostRepliesAreIndeterminate: through the host, a complete
// and a fail whose replies are lost after the send (and whose repeats'
// replies are lost too) are INDETERMINATE, owning nothing — never
// COMPLETED or FAILED — and an inspect with the same attempt reconciles
// what happened: the completion applied (the response replays), the
// failure applied (the record is ABANDONED). An executed action whose
// completion reply is lost is reported unrecorded, and inspect finds it
// completed.
func TestIdempotencyLostRepliesAreIndeterminate(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	e, request := idemFixture(t, p)
	ctx := context.Background()
	// Load every program first: a NOSCRIPT round trip under the stall
	// would make the stalled call one that never ran.
	w1, w2 := request("warm-1"), request("warm-2")
	n := started(t, e, w1)
	_, err := e.Complete(ctx, w1.Scope, w1.Attempt, n, []byte("ok"))
	require.NoError(t, err)
	n = started(t, e, w2)
	_, err = e.Fail(ctx, w2.Scope, w2.Attempt, n, false)
	require.NoError(t, err)
	_, err = e.Inspect(ctx, w2)
	require.NoError(t, err)

	r := request("pay-1")
	n = started(t, e, r)
	p.Stall()
	got, err := e.Complete(ctx, r.Scope, r.Attempt, n, []byte(`{"id":42}`))
	p.Passthrough()
	require.NoError(t, err)
	assert.Equal(t, idempotency.StatusIndeterminate, got.Status, "a lost completion reply is not a completion")
	assert.False(t, got.Owned)
	assert.Equal(t, "INDETERMINATE", got.Certainty.String())
	ins, err := e.Inspect(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, "COMPLETED_REPLAY", ins.Status, "inspect reconciles: the completion applied")
	assert.Equal(t, `{"id":42}`, string(ins.Response))

	f := request("pay-2")
	n = started(t, e, f)
	p.Stall()
	got, err = e.Fail(ctx, f.Scope, f.Attempt, n, false)
	p.Passthrough()
	require.NoError(t, err)
	assert.Equal(t, idempotency.StatusIndeterminate, got.Status, "a lost failure reply is not a recorded failure")
	assert.False(t, got.Owned)
	ins, err = e.Inspect(ctx, f)
	require.NoError(t, err)
	assert.Equal(t, "ABANDONED", ins.Status, "inspect reconciles: the failure applied")

	x := request("pay-3")
	var runs int
	ex, err := e.Execute(ctx, x, func(context.Context) idempotency.Result {
		runs++
		p.Stall() // the completion that follows is sent and its reply lost
		return idempotency.Committed([]byte(`{"id":43}`))
	})
	p.Passthrough()
	require.NoError(t, err)
	assert.Equal(t, 1, runs)
	assert.Equal(t, idempotency.Executed, ex.Kind)
	assert.False(t, ex.Recorded, "a completion whose reply was lost is never reported recorded")
	ins, err = e.Inspect(ctx, x)
	require.NoError(t, err)
	assert.Equal(t, "COMPLETED_REPLAY", ins.Status, "inspect reconciles the executor's unknown completion")
	again, err := e.Execute(ctx, x, func(context.Context) idempotency.Result {
		t.Error("a completed request never runs again")
		return idempotency.Result{}
	})
	require.NoError(t, err)
	assert.Equal(t, idempotency.Replayed, again.Kind)
}

// TestIdempotencyRefusedBeforeSendIsUnavailable: with the connection
// refused before anything is sent, claim, complete and fail are
// UNAVAILABLE with before-send certainty, Execute never runs the action,
// and nothing changed: the record is still EXECUTING for its owner.
func TestIdempotencyRefusedBeforeSendIsUnavailable(t *testing.T) {
	srv := redistest.StartStandalone(t)
	direct := redistest.NewProxy(t, srv.Addr())
	holder, request := idemFixture(t, direct)
	ctx := context.Background()
	r := request("pay-1")
	n := started(t, holder, r)

	p := redistest.NewProxy(t, srv.Addr())
	p.Refuse() // before the host ever connects: no pooled connection to break
	e, _ := idemFixture(t, p)
	c, err := e.Claim(ctx, request("pay-2"))
	require.NoError(t, err)
	assert.Equal(t, idempotency.StatusUnavailable, c.Status)
	assert.Equal(t, "UNAVAILABLE_BEFORE_SEND", c.Certainty.String())
	got, err := e.Complete(ctx, r.Scope, r.Attempt, n, []byte("x"))
	require.NoError(t, err)
	assert.Equal(t, idempotency.StatusUnavailable, got.Status)
	assert.Equal(t, "UNAVAILABLE_BEFORE_SEND", got.Certainty.String())
	got, err = e.Fail(ctx, r.Scope, r.Attempt, n, true)
	require.NoError(t, err)
	assert.Equal(t, idempotency.StatusUnavailable, got.Status)
	assert.Equal(t, "UNAVAILABLE_BEFORE_SEND", got.Certainty.String())
	ex, err := e.Execute(ctx, request("pay-3"), func(context.Context) idempotency.Result {
		t.Error("the action ran without a confirmed claim")
		return idempotency.Result{}
	})
	require.NoError(t, err)
	assert.Equal(t, idempotency.Unavailable, ex.Kind)

	ins, err := holder.Inspect(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, "EXECUTING_SAME_OPERATION", ins.Status, "nothing was sent: the record is as its owner left it")
}

// TestIdempotencyLostFailReplyIsUnrecorded: an action that reports no
// effect, or an unknown one, is marked in the record; when that mark's
// reply is lost (and its repeat's), the execution says the failure is not
// recorded — never a confirmed FAILED_RETRYABLE — and an inspect with the
// same attempt reconciles it.
func TestIdempotencyLostFailReplyIsUnrecorded(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	e, request := idemFixture(t, p)
	ctx := context.Background()
	ok, err := e.Execute(ctx, request("warm"), func(context.Context) idempotency.Result {
		return idempotency.RetryableNoEffect(errors.New("no effect"))
	})
	require.NoError(t, err)
	require.Equal(t, idempotency.FailedRetryable, ok.Kind)
	assert.True(t, ok.Recorded, "a confirmed mark is recorded")

	for _, c := range []struct {
		result func() idempotency.Result
		kind   idempotency.Kind
		state  string
	}{
		{func() idempotency.Result { return idempotency.RetryableNoEffect(errors.New("no effect")) }, idempotency.FailedRetryable, "FAILED_RETRYABLE"},
		{func() idempotency.Result { return idempotency.EffectUnknown(errors.New("unknown")) }, idempotency.Abandoned, "ABANDONED"},
	} {
		r := request("pay-" + c.state)
		ex, err := e.Execute(ctx, r, func(context.Context) idempotency.Result {
			p.Stall() // the mark that follows is sent and its reply lost
			return c.result()
		})
		p.Passthrough()
		require.NoError(t, err)
		assert.Equal(t, c.kind, ex.Kind)
		assert.False(t, ex.Recorded, "%s: a mark whose reply was lost is never reported recorded", c.state)
		ins, err := e.Inspect(ctx, r)
		require.NoError(t, err)
		assert.Equal(t, c.state, ins.Status, "inspect reconciles: the mark applied")
	}
}
