package host_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

func newHostWith(t *testing.T, addr string, opts ...host.Option) (*host.Host, error) {
	t.Helper()
	cfg := load(t, map[string]string{"main": addr},
		map[policy.Role]string{policy.RoleCoordination: "main"}, map[policy.Role]bool{policy.RoleCoordination: true})
	h, err := host.New(context.Background(), cfg, append([]host.Option{host.WithLogger(nil)}, opts...)...)
	if h != nil {
		t.Cleanup(func() { _ = h.Close(context.Background()) })
	}
	return h, err
}

// eventually polls the host's readiness until cond holds (the handshake
// runs in the background on the real clock).
func eventually(t *testing.T, h *host.Host, cond func(health.RoleReport) bool) health.RoleReport {
	t.Helper()
	var last health.RoleReport
	require.Eventually(t, func() bool {
		rep := h.Readiness(context.Background())
		if len(rep.Roles) != 1 {
			return false
		}
		last = rep.Roles[0]
		return cond(last)
	}, 30*time.Second, 20*time.Millisecond, "last: %+v", last)
	return last
}

func TestStartupHandshakeGatesReadiness(t *testing.T) {
	srv := redistest.StartStandalone(t)
	h, err := newHostWith(t, srv.Addr(), host.WithStartupHandshake())
	require.NoError(t, err)
	rr := eventually(t, h, func(r health.RoleReport) bool { return r.Handshake == health.HandshakePassed })
	assert.Equal(t, health.Up, rr.Status)
	assert.True(t, h.Readiness(context.Background()).Ready)

	// Without the option readiness rests on the live check alone.
	h2, err := newHostWith(t, srv.Addr())
	require.NoError(t, err)
	rep := h2.Readiness(context.Background())
	require.Len(t, rep.Roles, 1)
	assert.Equal(t, health.HandshakeOff, rep.Roles[0].Handshake)
	assert.True(t, rep.Ready)
}

// TestStartupRetryKeepsServing: with the default policy New returns at
// once for an unreachable deployment, and readiness stays DOWN (outage)
// until it is reachable.
func TestStartupRetryKeepsServing(t *testing.T) {
	srv := redistest.StartStandalone(t)
	srv.Kill()
	h, err := newHostWith(t, srv.Addr(), host.WithStartupPolicy(policy.StartupPolicy{RetryInitial: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond}))
	require.NoError(t, err)
	rr := eventually(t, h, func(r health.RoleReport) bool { return r.Handshake == health.HandshakeFailed })
	assert.Equal(t, health.Down, rr.Status)
	assert.Equal(t, runtime.ClassOutage, rr.Class)
	assert.False(t, h.Readiness(context.Background()).Ready)
	srv.Restart(t)
	eventually(t, h, func(r health.RoleReport) bool { return r.Status == health.Up })
}

// TestStartupFailsOnMisconfiguration: an embedder that asks for
// fail-on-misconfiguration gets no host for an evicting coordination
// server, and nothing stays connected.
func TestStartupFailsOnMisconfiguration(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "allkeys-lru"))
	h, err := newHostWith(t, srv.Addr(), host.WithStartupPolicy(policy.StartupPolicy{OnFailure: policy.StartupFailOnMisconfiguration}))
	require.Error(t, err)
	assert.Nil(t, h)
	require.ErrorIs(t, err, health.ErrHandshake)
	var he *health.HandshakeError
	require.ErrorAs(t, err, &he)
	assert.Equal(t, runtime.ClassMisconfiguration, he.Class)
	assert.Contains(t, err.Error(), "expects noeviction, a primary has allkeys-lru")
	assert.NotContains(t, err.Error(), srv.Addr())
	assert.Zero(t, srv.ConnectedClients(t), "the failed host closed its clients")

	// An out-of-bounds override is refused before anything is probed.
	_, err = newHostWith(t, srv.Addr(), host.WithStartupPolicy(policy.StartupPolicy{RetryInitial: time.Nanosecond}))
	var verr *policy.ValidationError
	require.ErrorAs(t, err, &verr)
	assert.True(t, verr.Has(policy.RuleStartupBound))
}

// TestStartupFailedAfterNew: with fail-on-misconfiguration an outage at
// the first attempt does not end startup; the misconfiguration found once
// the server is back does, through StartupFailed.
func TestStartupFailedAfterNew(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "allkeys-lru"))
	srv.Kill()
	h, err := newHostWith(t, srv.Addr(), host.WithStartupPolicy(policy.StartupPolicy{
		OnFailure: policy.StartupFailOnMisconfiguration, RetryInitial: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	}))
	require.NoError(t, err, "an outage is retried")
	select {
	case err := <-h.StartupFailed():
		t.Fatalf("startup ended on an outage: %v", err)
	default:
	}
	srv.Restart(t) // the same evicting configuration
	select {
	case err := <-h.StartupFailed():
		require.ErrorIs(t, err, health.ErrHandshake)
		assert.True(t, strings.Contains(err.Error(), "(misconfiguration)"), err.Error())
	case <-time.After(30 * time.Second):
		t.Fatal("StartupFailed never fired")
	}
	assert.False(t, h.Readiness(context.Background()).Ready)
}

// TestNoRoleNoHandshake: without a Redis role the option starts nothing
// and StartupFailed never fires.
func TestNoRoleNoHandshake(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.yaml")
	require.NoError(t, os.WriteFile(path, []byte("server: {listen: \"127.0.0.1:8080\"}\n"), 0o600))
	cfg, err := config.Load(context.Background(), path, config.WithEnv(func(string) (string, bool) { return "", false }))
	require.NoError(t, err)
	h, err := host.New(context.Background(), cfg, host.WithLogger(nil), host.WithStartupHandshake())
	require.NoError(t, err)
	defer h.Close(context.Background())
	assert.Nil(t, h.StartupFailed())
	assert.True(t, h.Readiness(context.Background()).Ready)
	require.NoError(t, h.Close(context.Background()))
}

// TestReadinessTransitionsAreCounted: every change of a role's status after
// its first report is counted in caphost_readiness_transitions_total, by
// role and new status; the series exist (at 0) before any change.
func TestReadinessTransitionsAreCounted(t *testing.T) {
	srv := redistest.StartStandalone(t)
	h, err := newHostWith(t, srv.Addr(), host.WithStartupPolicy(policy.StartupPolicy{
		OnFailure: policy.StartupRetry, RetryInitial: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
	}))
	require.NoError(t, err)
	counts := func() map[string]float64 {
		mfs, err := h.Registry().Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "caphost_readiness_transitions_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				var role, status string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "role":
						role = l.GetValue()
					case "status":
						status = l.GetValue()
					}
				}
				out[role+"/"+status] = m.GetCounter().GetValue()
			}
		}
		return out
	}
	assert.Equal(t, map[string]float64{"coordination/UP": 0, "coordination/DEGRADED": 0, "coordination/DOWN": 0}, counts())

	eventually(t, h, func(r health.RoleReport) bool { return r.Status == health.Up })
	srv.Kill()
	eventually(t, h, func(r health.RoleReport) bool { return r.Status == health.Down })
	srv.Restart(t)
	eventually(t, h, func(r health.RoleReport) bool { return r.Status == health.Up })
	// The first report (DOWN while the handshake ran, or UP) is not a
	// transition; DOWN→UP at startup is.
	got := counts()
	assert.Equal(t, float64(1), got["coordination/DOWN"], "%v", got)
	assert.Contains(t, []float64{1, 2}, got["coordination/UP"], "%v", got)
	assert.Zero(t, got["coordination/DEGRADED"])
}
