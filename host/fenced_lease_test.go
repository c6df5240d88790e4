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
	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/host/lease/fenced"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
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

// TestFencedLeaseReplicationProvenAtStartup: the replication profile is
// proven by the startup handshake before the first acquire (issue 12). A
// data user without +wait ends start-up under fail-on-misconfiguration
// with a detail that names the fix and neither the user nor the
// endpoint; with +wait and no replica the host starts (too few replicas
// warns: docs/replication.md) and `check --probe`'s report says why every
// acquire will be NOT_REPLICATED. Without the profile no WAIT is sent.
func TestFencedLeaseReplicationProvenAtStartup(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	ctx := context.Background()
	failFast := host.WithStartupPolicy(policy.StartupPolicy{OnFailure: policy.StartupFailOnMisconfiguration})
	profile := block("fenced-lease", "provider: redis\nredis-role: coordination\npurposes: [ledger]\nreplication: {acks: 1, timeout: 100ms}")

	off, err := capConfig(t, srv.Addr(), true, block("fenced-lease", "provider: redis\nredis-role: coordination\npurposes: [ledger]"))
	require.NoError(t, err)
	h, err := host.New(ctx, off, host.WithLogger(nil), failFast)
	require.NoError(t, err)
	rep, err := h.Probe(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Close(ctx))
	for _, c := range rep.Deployments[0].Checks {
		assert.NotEqual(t, runtime.CheckReplication, c.Name, "no replication check without the profile")
	}
	assert.Zero(t, srv.CommandCalls(t, "wait"), "no WAIT without the profile")

	// The harness's user is the server's default user, which every lane
	// uses here: take +wait from it.
	require.NoError(t, srv.Admin().Do(ctx, "ACL", "SETUSER", "default", "-wait").Err())
	on, err := capConfig(t, srv.Addr(), true, profile)
	require.NoError(t, err)
	h, err = host.New(ctx, on, host.WithLogger(nil), failFast)
	require.Error(t, err)
	assert.Nil(t, h)
	var he *health.HandshakeError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, runtime.ClassMisconfiguration, he.Class)
	assert.Contains(t, err.Error(), "WAIT refused on the script lane of 1 of 1 primary (NOPERM): grant +wait to the script lane's data user")
	assert.NotContains(t, err.Error(), srv.Addr())
	assert.NotContains(t, err.Error(), "default")
	assert.Equal(t, int64(1), srv.CommandCalls(t, "wait"), "the handshake's WAIT, refused by the ACL")

	require.NoError(t, srv.Admin().Do(ctx, "ACL", "SETUSER", "default", "+wait").Err())
	h, err = host.New(ctx, on, host.WithLogger(nil), failFast)
	require.NoError(t, err, "too few replicas does not end start-up")
	t.Cleanup(func() { _ = h.Close(ctx) })
	rep, err = h.Probe(ctx)
	require.NoError(t, err)
	var got runtime.Check
	for _, c := range rep.Deployments[0].Checks {
		if c.Name == runtime.CheckReplication {
			got = c
		}
	}
	assert.Equal(t, runtime.CheckWarn, got.Status)
	assert.Contains(t, got.Detail, "replication acks 1, but 1 of 1 primary has fewer online replicas (per primary: 0)")
}
