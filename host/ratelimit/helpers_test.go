package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/keys"
)

// newRuntime builds a runtime whose coordination role points at addr.
func newRuntime(t testing.TB, addr string) *runtime.Runtime {
	t.Helper()
	return newRuntimeTopo(t, &policy.Standalone{Endpoint: addr})
}

// newRuntimeTopo builds a runtime whose coordination role uses topo.
func newRuntimeTopo(t testing.TB, topo policy.Topology) *runtime.Runtime {
	t.Helper()
	lanes := make(map[policy.Lane]policy.LaneConfig)
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 8, MaxInFlight: 64}
	}
	dep := policy.Deployment{
		ID: "coord", Topology: topo, ClientName: "caphost-rate-test",
		Timeouts: policy.Timeouts{Connect: time.Second, Command: 2 * time.Second, Acquire: 2 * time.Second, Shutdown: 3 * time.Second},
		Lanes:    lanes, Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20},
		AdminShared: true, // no auth: the admin lane is the default user too, by choice
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

// localCfg is a local-emergency config: 20 pods × 0.05 = 1.
func localCfg() Config {
	return Config{Provider: ProviderRedis, RedisRole: policy.RoleCoordination, DegradedProvider: DegradedLocalEmergency,
		LocalEmergency: &LocalEmergencyConfig{MaxEntries: 100, EntryTTL: time.Minute, MaxInFlight: 16, AssumedMaxPods: 20, PerPodShare: 0.05}}
}

func compile(t testing.TB, cfg Config, decls ...policy.RatePolicyDecl) *policy.RatePolicySet {
	t.Helper()
	cfg.Policies = decls
	set, err := cfg.CompilePolicies()
	require.NoError(t, err)
	return set
}

type fixture struct {
	srv *redistest.Server
	rt  *runtime.Runtime
	l   *Limiter
	reg *prometheus.Registry
}

func newFixture(t testing.TB, addr string, srv *redistest.Server, cfg Config, opts []Option, decls ...policy.RatePolicyDecl) *fixture {
	t.Helper()
	rt := newRuntime(t, addr)
	reg := prometheus.NewRegistry()
	l, err := New(rt, cfg, compile(t, cfg, decls...), append([]Option{WithRegisterer(reg)}, opts...)...)
	require.NoError(t, err)
	return &fixture{srv: srv, rt: rt, l: l, reg: reg}
}

func fixedWindow(id string, limit int64) policy.RatePolicyDecl {
	return policy.RatePolicyDecl{ID: id, Revision: "r1", Algorithm: policy.RateFixedWindow,
		Parameters: policy.RateParameters{Limit: limit, Window: policy.RateMaxWindow}, Dimensions: []policy.RateDimension{policy.DimTenant}}
}

func tenant(v string) Subject { return Subject{policy.DimTenant: []byte(v)} }

func req(pol, subject string) Request {
	return Request{Policy: pol, Subject: tenant(subject), Cost: 1, Deadline: time.Now().Add(3 * time.Second)}
}

// stateKey rebuilds the state key of (policy, subject) the way the limiter
// does: key version 2 for the lean programs' state, 1 for the
// concurrency limiter's permits.
func (f *fixture) stateKey(t testing.TB, id string, sub Subject) keys.Key {
	t.Helper()
	pol, ok := f.l.Policies().Policy(id)
	require.True(t, ok)
	return f.stateKeyOf(t, pol, sub)
}

// stateKeyOf is stateKey for a policy of any set (an old revision, say).
func (f *fixture) stateKeyOf(t testing.TB, pol policy.RatePolicy, sub Subject) keys.Key {
	t.Helper()
	kv := leanKeyVersion
	if pol.Algorithm == policy.RateConcurrency {
		kv = keyVersion
	}
	ks, err := f.rt.Keys().Group(keys.Spec{Capability: keys.CapRate, Region: pol.KeyRegion(), KeyVersion: kv,
		Parts: subjectParts(pol, sub)}, stateKind(pol.Algorithm), "dedup")
	require.NoError(t, err)
	return ks[0]
}

// windowUsed reads the count of a rate-fixed-window-v2 state
// ('f1:<used>:<ts>:<rev>'); an absent key is redis.Nil.
func windowUsed(ctx context.Context, admin redis.UniversalClient, k keys.Key) (int64, error) {
	v, err := admin.Get(ctx, k.Redis()).Result()
	if err != nil {
		return 0, err
	}
	parts := strings.SplitN(v, ":", 4)
	if len(parts) != 4 || parts[0] != "f1" {
		return 0, fmt.Errorf("not a fixed-window state: %q", v)
	}
	return strconv.ParseInt(parts[1], 10, 64)
}

// counter reads one counter value from the registry (0 when absent).
func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := labels[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
