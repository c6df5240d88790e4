package host_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/internal/redistest"
)

func postJSON(t *testing.T, h http.Handler, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, r)
	var out map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	return rec.Code, out
}

// TestLeaseCapability: a configured lease block serves the sidecar through
// the daemon's HTTP API and the Go client through Host.Lease, reports its
// descriptor (EFFICIENCY_ONLY on the coordination role, fail-closed), and
// counts on the host's /metrics; without the block the routes answer 503
// capability-disabled.
func TestLeaseCapability(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg, err := capConfig(t, srv.Addr(), true, block("lease", "provider: redis\nredis-role: coordination\nmax-wait: 2s\npurposes: [nightly-cleanup]"))
	require.NoError(t, err)
	h := newHost(t, cfg)
	api := httpapi.New(h, httpapi.Options{})

	code, got := postJSON(t, api, "/v1/lease/acquire",
		`{"purpose":"nightly-cleanup","resource":"orders","operation-id":"op-1","ttl-ms":10000}`)
	require.Equal(t, http.StatusOK, code, got)
	assert.Equal(t, "ACQUIRED", got["kind"])
	assert.Equal(t, true, got["held"])
	tok, _ := got["owner-token"].(string)
	require.Len(t, tok, 32)

	c, err := h.Lease()
	require.NoError(t, err)
	theirs, err := lease.NewAttempt("op-2")
	require.NoError(t, err)
	ctx := context.Background()
	other, err := c.Acquire(ctx, lease.Request{Purpose: "nightly-cleanup", Resource: []byte("orders"), TTL: 10 * time.Second, Attempt: theirs})
	require.NoError(t, err)
	assert.Equal(t, lease.Contended, other.Kind, "the Go client and the sidecar share the leases")
	assert.Equal(t, 2*time.Second, c.MaxWait())

	code, got = postJSON(t, api, "/v1/lease/acquire",
		`{"purpose":"nightly-cleanup","resource":"orders","operation-id":"op-3","ttl-ms":10000,"wait-ms":2001}`)
	assert.Equal(t, http.StatusBadRequest, code, "max-wait from the block bounds wait-ms")
	assert.Equal(t, "wait-ms", got["field"])
	code, got = postJSON(t, api, "/v1/lease/release",
		`{"purpose":"nightly-cleanup","resource":"orders","operation-id":"op-1","owner-token":"`+tok+`"}`)
	require.Equal(t, http.StatusOK, code, got)
	assert.Equal(t, "RELEASED", got["kind"])

	st := statusOf(t, h, lease.CapabilityID)
	assert.Equal(t, capability.StateActive, st.State)
	require.NotNil(t, st.Descriptor)
	assert.Equal(t, capability.R1, st.Claimed)
	assert.Contains(t, st.Descriptor.Guarantees, capability.GuaranteeEfficiencyOnly)
	assert.Contains(t, st.Descriptor.NonGuarantees, capability.NonGuaranteeStrictCoordination)
	assert.Equal(t, capability.FailClosed, st.Descriptor.FailureMode)
	assert.Equal(t, capability.ImpactRequired, st.Descriptor.Impact)

	status, body := get(t, api, "/metrics")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `caphost_lease_acquires_total{purpose="nightly-cleanup",result="acquired"} 1`)
	assert.Contains(t, body, `caphost_lease_releases_total{purpose="nightly-cleanup",result="released"} 1`)
	assert.NotContains(t, body, tok)

	off, err := capConfig(t, srv.Addr(), true, block("lease", "provider: disabled"))
	require.NoError(t, err)
	hoff := newHost(t, off)
	_, err = hoff.Lease()
	assert.ErrorIs(t, err, host.ErrCapabilityDisabled)
	code, got = postJSON(t, httpapi.New(hoff, httpapi.Options{}), "/v1/lease/acquire", `{}`)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "capability-disabled", got["code"])
}
