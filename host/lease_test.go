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
	"github.com/caphost/caphost/host/config"
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

// faultHost starts a host whose coordination role reaches srv through p.
func faultHost(t *testing.T, p *redistest.Proxy, caps string) *host.Host {
	t.Helper()
	cfg, err := capConfig(t, p.Addr(), true, caps)
	require.NoError(t, err)
	return newHost(t, cfg)
}

// TestLeaseLostRepliesAreIndeterminate: through the host, a renew and a
// release whose replies are lost after the send (the proxy forwards the
// write and holds the answer) are INDETERMINATE and leave the handle
// UNKNOWN — never RENEWED or RELEASED — and an inspect with the same
// attempt then reconciles what happened: the renew applied (still held),
// the release applied (absent).
func TestLeaseLostRepliesAreIndeterminate(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	h := faultHost(t, p, block("lease", "provider: redis\nredis-role: coordination\npurposes: [nightly-cleanup]"))
	c, err := h.Lease()
	require.NoError(t, err)
	ctx := context.Background()
	req := func(resource, op string) lease.Request {
		a, err := lease.NewAttempt(op)
		require.NoError(t, err)
		return lease.Request{Purpose: "nightly-cleanup", Resource: []byte(resource), TTL: 10 * time.Second, Attempt: a}
	}
	// Load every program first: a NOSCRIPT round trip under the stall
	// would make the stalled call one that never ran.
	warm, err := c.Acquire(ctx, req("warm", "w"))
	require.NoError(t, err)
	_, err = warm.Handle.Renew(ctx)
	require.NoError(t, err)
	_, err = warm.Handle.Release(ctx)
	require.NoError(t, err)

	r := req("orders", "op-1")
	acq, err := c.Acquire(ctx, r)
	require.NoError(t, err)
	require.Equal(t, lease.Acquired, acq.Kind)

	p.Stall()
	kind, err := acq.Handle.Renew(ctx)
	p.Passthrough()
	require.NoError(t, err)
	assert.Equal(t, lease.RenewIndeterminate, kind, "a lost renew reply is not a renewal")
	assert.Equal(t, lease.Unknown, acq.Handle.State())
	assert.Zero(t, acq.Handle.Remaining(), "an UNKNOWN handle has no validity")
	assert.False(t, acq.Handle.UsableFor(time.Millisecond))
	_, err = acq.Handle.Renew(ctx)
	assert.ErrorIs(t, err, lease.ErrNotActive, "never resent")

	ins, err := c.Inspect(ctx, r.Purpose, r.Resource, r.Attempt, r.TTL)
	require.NoError(t, err)
	require.Equal(t, lease.ReplayedSameOperation, ins.Kind, "inspect reconciles: the renew applied, the attempt still holds it")
	assert.Greater(t, ins.Handle.Remaining(), 5*time.Second)

	p.Stall()
	rel, err := ins.Handle.Release(ctx)
	p.Passthrough()
	require.NoError(t, err)
	assert.Equal(t, lease.ReleaseIndeterminate, rel, "a lost release reply (and its lost repeat) is not a release")
	assert.Equal(t, lease.Unknown, ins.Handle.State())
	after, err := c.Inspect(ctx, r.Purpose, r.Resource, r.Attempt, r.TTL)
	require.NoError(t, err)
	assert.Equal(t, lease.Absent, after.Kind, "inspect reconciles: the release applied")
	assert.Nil(t, after.Handle)
}

// TestLeaseRefusedBeforeSendIsUnavailable: with the connection refused
// before anything is sent, acquire, renew and release are UNAVAILABLE
// with before-send certainty, and nothing changed: the lease is still
// held once Redis is reachable again.
func TestLeaseRefusedBeforeSendIsUnavailable(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := context.Background()
	holder := newHost(t, mustCapConfig(t, srv.Addr(), block("lease", "provider: redis\nredis-role: coordination")))
	oc, err := holder.Lease()
	require.NoError(t, err)
	a, err := lease.NewAttempt("op-1")
	require.NoError(t, err)
	r := lease.Request{Purpose: "nightly-cleanup", Resource: []byte("orders"), TTL: 10 * time.Second, Attempt: a}
	held, err := oc.Acquire(ctx, r)
	require.NoError(t, err)
	require.Equal(t, lease.Acquired, held.Kind)

	p := redistest.NewProxy(t, srv.Addr())
	p.Refuse() // before the host ever connects: no pooled connection to break
	h := faultHost(t, p, block("lease", "provider: redis\nredis-role: coordination"))
	c, err := h.Lease()
	require.NoError(t, err)
	b, err := lease.NewAttempt("op-2")
	require.NoError(t, err)
	got, err := c.Acquire(ctx, lease.Request{Purpose: r.Purpose, Resource: r.Resource, TTL: r.TTL, Attempt: b})
	require.NoError(t, err)
	assert.Equal(t, lease.Unavailable, got.Kind)
	assert.Equal(t, "UNAVAILABLE_BEFORE_SEND", got.Certainty.String())
	assert.Nil(t, got.Handle)
	rn, err := c.Renew(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, lease.RenewUnavailable, rn.Kind)
	assert.Equal(t, "UNAVAILABLE_BEFORE_SEND", rn.Certainty.String())
	rel, err := c.Release(ctx, r.Purpose, r.Resource, r.Attempt)
	require.NoError(t, err)
	assert.Equal(t, lease.ReleaseUnavailable, rel.Kind)
	assert.Equal(t, "UNAVAILABLE_BEFORE_SEND", rel.Certainty.String())

	still, err := oc.Inspect(ctx, r.Purpose, r.Resource, r.Attempt, r.TTL)
	require.NoError(t, err)
	assert.Equal(t, lease.ReplayedSameOperation, still.Kind, "nothing was sent: the lease is still held")
}

func mustCapConfig(t *testing.T, addr, caps string) *config.Config {
	t.Helper()
	cfg, err := capConfig(t, addr, true, caps)
	require.NoError(t, err)
	return cfg
}
