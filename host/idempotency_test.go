package host_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
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
