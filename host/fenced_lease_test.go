package host_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/host/lease/fenced"
	"github.com/caphost/caphost/internal/redistest"
)

// TestFencedLeaseCapability: a configured fenced-lease block is provisioned
// by the host, mounted on the daemon's HTTP API (strict bodies, typed
// outcomes), reachable in Go through Host.FencedLease and described at R1;
// without the block the routes answer 503 capability-disabled.
func TestFencedLeaseCapability(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg, err := capConfig(t, srv.Addr(), true, block("fenced-lease", "provider: redis\nredis-role: coordination\npurposes: [ledger]"))
	require.NoError(t, err)
	h := newHost(t, cfg)
	api := httpapi.New(h, httpapi.Options{})

	code, got := postJSON(t, api, "/v1/fenced-lease/acquire", `{"purpose":"ledger","extra":1}`)
	assert.Equal(t, http.StatusBadRequest, code, got)
	assert.Equal(t, "bad-request", got["code"])

	// A resource nobody provisioned: the acquire is refused by the fence
	// counter's absence, an outcome, never a grant.
	code, got = postJSON(t, api, "/v1/fenced-lease/acquire", `{"purpose":"ledger","resource":"acct-9","resource-epoch":1,`+
		`"registration-digest":"`+strings.Repeat("0", 64)+`","operation-id":"op-1","ttl-ms":10000}`)
	require.Equal(t, http.StatusOK, code, got)
	assert.Equal(t, false, got["held"])
	assert.Equal(t, "FENCE_COUNTER_MISSING", got["kind"])

	c, err := h.FencedLease()
	require.NoError(t, err)
	require.NotNil(t, c)
	st := statusOf(t, h, fenced.CapabilityID)
	assert.Equal(t, capability.StateActive, st.State)
	require.NotNil(t, st.Descriptor)
	assert.Equal(t, capability.R1, st.Claimed)

	off, err := capConfig(t, srv.Addr(), true, block("fenced-lease", "provider: disabled"))
	require.NoError(t, err)
	hoff := newHost(t, off)
	_, err = hoff.FencedLease()
	assert.ErrorIs(t, err, host.ErrCapabilityDisabled)
	code, got = postJSON(t, httpapi.New(hoff, httpapi.Options{}), "/v1/fenced-lease/acquire", `{}`)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "capability-disabled", got["code"])
}

// TestFencedLeaseReplicationProfileThroughTheHost: the replication block
// travels from the configuration file to the client. A timeout the
// deployment's 500 ms command timeout would cut (limit 400 ms) fails
// host.New; a usable one on a primary without replicas provisions the
// counter on the primary only (NOT_REPLICATED) and answers an HTTP acquire
// NOT_REPLICATED, not held, without a token.
func TestFencedLeaseReplicationProfileThroughTheHost(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg, err := capConfig(t, srv.Addr(), true, block("fenced-lease",
		"provider: redis\nredis-role: coordination\npurposes: [ledger]\nreplication: {acks: 1, timeout: 450ms}"))
	require.NoError(t, err, "the block itself is valid")
	_, err = host.New(context.Background(), cfg, host.WithLogger(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "replication")

	cfg, err = capConfig(t, srv.Addr(), true, block("fenced-lease",
		"provider: redis\nredis-role: coordination\npurposes: [ledger]\nreplication: {acks: 1, timeout: 100ms}"))
	require.NoError(t, err)
	h := newHost(t, cfg)
	c, err := h.FencedLease()
	require.NoError(t, err)
	reg := fence.Registration{Resource: "acct-9", Epoch: 3, Digest: fence.NewDigest(), State: fence.Pending}
	kind, _, err := c.Provision(context.Background(), "ledger", reg)
	require.NoError(t, err)
	assert.Equal(t, fenced.ProvisionNotReplicated, kind, "no replica acknowledged the counter")

	api := httpapi.New(h, httpapi.Options{})
	code, got := postJSON(t, api, "/v1/fenced-lease/acquire", `{"purpose":"ledger","resource":"acct-9","resource-epoch":3,`+
		`"registration-digest":"`+reg.Digest.String()+`","operation-id":"op-1","ttl-ms":10000}`)
	require.Equal(t, http.StatusOK, code, got)
	assert.Equal(t, "NOT_REPLICATED", got["kind"])
	assert.Equal(t, false, got["held"])
	assert.Nil(t, got["counter"], "no token")
}
