package cache

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// hintSecret is the test hint secret (32 bytes).
var hintSecret = policy.NewSecret([]byte("cache-test-hint-secret-0123456789"))

// newRuntime builds a runtime whose cache role uses topo; every test host
// ("instance") gets its own, as separate processes would.
func newRuntime(t testing.TB, topo policy.Topology) *runtime.Runtime {
	t.Helper()
	return newRuntimeBudgets(t, topo, policy.Budgets{MaxRequestBytes: 2 << 20, MaxReplyBytes: 2 << 20})
}

// newRuntimeBudgets is newRuntime with the deployment's byte budgets.
func newRuntimeBudgets(t testing.TB, topo policy.Topology, budgets policy.Budgets) *runtime.Runtime {
	t.Helper()
	return newRuntimeWith(t, topo, budgets, 2*time.Second, nil)
}

// newRuntimeTimeouts is newRuntime with a command timeout.
func newRuntimeTimeouts(t testing.TB, topo policy.Topology, command time.Duration) *runtime.Runtime {
	t.Helper()
	return newRuntimeWith(t, topo, policy.Budgets{MaxRequestBytes: 2 << 20, MaxReplyBytes: 2 << 20}, command, nil)
}

// newRuntimeWith builds the runtime of the helpers above; mut, if not nil,
// changes the deployment (its lanes, its timeouts) first.
func newRuntimeWith(t testing.TB, topo policy.Topology, budgets policy.Budgets, command time.Duration, mut func(*policy.Deployment)) *runtime.Runtime {
	t.Helper()
	lanes := make(map[policy.Lane]policy.LaneConfig)
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 8, MaxInFlight: 64}
	}
	dep := policy.Deployment{
		ID: "cache", Topology: topo, ClientName: "caphost-cache-test",
		Timeouts: policy.Timeouts{Connect: time.Second, Command: command, Acquire: min(command, 2*time.Second), Shutdown: 3 * time.Second},
		Lanes:    lanes, Budgets: budgets,
		AdminShared: true, // no auth: every lane is the default user, by choice
	}
	if mut != nil {
		mut(&dep)
	}
	cfg := policy.RedisConfig{
		Deployments: map[string]policy.Deployment{"cache": dep},
		Roles:       map[policy.Role]policy.RoleBinding{policy.RoleCache: {Deployment: "cache"}},
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

// clock is an injected clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().Truncate(time.Millisecond)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// instance is one host's cache on a shared Redis.
type instance struct {
	rt  *runtime.Runtime
	c   *Cache
	reg *prometheus.Registry
}

// newInstance builds a Cache on its own runtime.
func newInstance(t testing.TB, topo policy.Topology, cfg Config, clk *clock, guests Guests) *instance {
	t.Helper()
	return newInstanceOn(t, newRuntime(t, topo), cfg, clk, guests)
}

// newInstanceOn builds a Cache on rt.
func newInstanceOn(t testing.TB, rt *runtime.Runtime, cfg Config, clk *clock, guests Guests) *instance {
	t.Helper()
	dep, err := rt.Role(policy.RoleCache)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	c, err := New(context.Background(), dep, rt.Keys(), cfg, Options{Registerer: reg, Clock: clk.Now, Guests: guests})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return &instance{rt: rt, c: c, reg: reg}
}

// region returns the handle of region id.
func (i *instance) region(t testing.TB, id string) *Region {
	t.Helper()
	r, err := i.c.Region(id)
	require.NoError(t, err)
	return r
}

// testConfig is a configuration with one bytes-codec region "items" and
// small operational bounds that keep tests short (the tombstone lives
// max(load timeout, lease TTL) + 1 s).
func testConfig(t testing.TB, mut func(*policy.CacheRegionDecl, *policy.CacheOps)) Config {
	t.Helper()
	ops := policy.DefaultCacheOps()
	ops.Shards = 4
	ops.LoadTimeout = 2 * time.Second
	ops.LeaseTTL = 2 * time.Second
	ops.LeaseWait = time.Second
	ops.LeasePoll = 10 * time.Millisecond
	decl := policy.CacheRegionDecl{ID: "items", Source: "config", KeyVersion: 1, Codec: policy.CacheBuiltinCodec,
		SoftTTL: 10 * time.Second, HardTTL: time.Minute, NegativeTTL: 5 * time.Second, Jitter: 0.1,
		StaleIfError: true, MaxBytes: 64 << 10}
	if mut != nil {
		mut(&decl, &ops)
	}
	decl.Ops = &ops
	return Config{Role: policy.RoleCache, Defaults: policy.DefaultCacheOps(), Bounds: policy.DefaultCacheBounds(),
		HintSecret: hintSecret, HintWindow: DefaultHintWindow, Regions: []policy.CacheRegionDecl{decl}}
}

// metric reads one series' value (counter or gauge) from reg; 0 when absent.
func metric(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, labels) {
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				}
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

// await waits for ch to close, or for ctx to end (false): a test loader
// never outlives its load's context, so a failed test cannot hang Close.
func await(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// keyspace returns every key srv holds with its serialised value (SCAN,
// never KEYS, and DUMP): equal snapshots around an operation prove it wrote
// nothing.
func keyspace(t testing.TB, srv *redistest.Server) map[string]string {
	t.Helper()
	ctx, c := ctxT(t), srv.Admin()
	out := map[string]string{}
	it := c.Scan(ctx, 0, "*", 100).Iterator()
	for it.Next(ctx) {
		v, err := c.Dump(ctx, it.Val()).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired between SCAN and DUMP
		}
		require.NoError(t, err)
		out[it.Val()] = v
	}
	require.NoError(t, it.Err())
	return out
}
