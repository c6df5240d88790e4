package lease

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

func TestMain(m *testing.M) { os.Exit(m.Run()) }

// newRuntime builds a runtime whose coordination role points at addr, with
// a command timeout short enough for the fault tests.
func newRuntime(t testing.TB, addr string) *runtime.Runtime {
	t.Helper()
	return newRuntimeOn(t, &policy.Standalone{Endpoint: addr})
}

// newRuntimeOn is newRuntime on any topology (the failover tests' Sentinel
// and Cluster deployments).
func newRuntimeOn(t testing.TB, topo policy.Topology) *runtime.Runtime {
	t.Helper()
	lanes := make(map[policy.Lane]policy.LaneConfig)
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 8, MaxInFlight: 64}
	}
	dep := policy.Deployment{
		ID: "coord", Topology: topo, ClientName: "caphost-lease-test",
		Timeouts: policy.Timeouts{Connect: time.Second, Command: time.Second, Acquire: time.Second, Shutdown: 3 * time.Second},
		Lanes:    lanes, Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20},
		AdminShared: true,
	}
	cfg := policy.RedisConfig{
		Deployments: map[string]policy.Deployment{"coord": dep},
		Roles:       map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		Programs:    policy.ProgramsConfig{Mode: policy.ProgramsEvalshaManaged},
		Keys: policy.KeysConfig{App: "demo", Env: "test", HMAC: policy.KeyMaterial{
			WriteVersion: 1, Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("0123456789abcdef0123456789abcdef"))},
		}},
	}
	rt, err := runtime.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

func newClient(t testing.TB, addr string, opts ...Option) *Client {
	t.Helper()
	c, err := New(newRuntime(t, addr), Config{}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func attempt(t testing.TB, op string) Attempt {
	t.Helper()
	a, err := NewAttempt(op)
	require.NoError(t, err)
	return a
}

func req(a Attempt, ttl time.Duration) Request {
	return Request{Purpose: "nightly-cleanup", Resource: []byte("tenant-42"), TTL: ttl, Attempt: a}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startRedis(t testing.TB) *redistest.Server { return redistest.StartStandalone(t) }

// value reads one counter.
func value(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	return d.GetCounter().GetValue()
}

// series counts the series a collector holds.
func series(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 1024)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

// gathered counts the series of the metric family name on reg.
func gathered(t testing.TB, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}
