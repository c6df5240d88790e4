package runtime

import (
	"context"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/commands"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/keys"
)

// benchDeployment is one private server with a 256-byte value at a built
// key, the shape `make bench` measures.
func benchDeployment(b *testing.B) (*Deployment, keys.Key, *redistest.Server) {
	b.Helper()
	dep, kb, srv := benchRuntime(b)
	k, err := kb.Build(keys.Spec{Capability: keys.CapProbe, Region: "bench", KeyVersion: 1, Kind: "probe", Parts: [][]byte{[]byte("hot")}})
	require.NoError(b, err)
	require.NoError(b, dep.SetWithTTL(context.Background(), k, make([]byte, 256), time.Hour))
	return dep, k, srv
}

// benchRuntime is one private server behind a deployment whose regular
// lane has room for 32 callers, and the runtime's key builder.
func benchRuntime(b *testing.B) (*Deployment, *keys.Builder, *redistest.Server) {
	b.Helper()
	srv := redistest.StartStandalone(b)
	d := testDeployment("bench", standalone(srv.Addr()))
	d.Lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 64, MaxInFlight: 1024}
	r, err := New(context.Background(), testConfig(d))
	require.NoError(b, err)
	b.Cleanup(func() { _ = r.Close(context.Background()) })
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(b, err)
	return dep, r.Keys(), srv
}

// BenchmarkDeploymentGet is the guarded GET end to end (network included).
// Run with -cpu 1 and with RunParallel's goroutines to compare against
// BenchmarkPlainGet.
func BenchmarkDeploymentGet(b *testing.B) {
	dep, k, _ := benchDeployment(b)
	ctx := context.Background()
	runGets(b, func() error {
		_, _, err := dep.Get(ctx, k)
		return err
	}, nil)
}

// runGets runs get on 1 goroutine and on 32 (the two `make bench` points).
// measure, when not nil, starts before each measured run, and the function
// it returns reports after it (the server's figures of that run).
func runGets(b *testing.B, get func() error, measure func(b *testing.B) (report func())) {
	run := func(b *testing.B, loop func()) {
		b.ReportAllocs()
		report := func() {}
		if measure != nil {
			report = measure(b)
		}
		loop()
		report()
	}
	b.Run("g1", func(b *testing.B) {
		run(b, func() {
			for b.Loop() {
				if err := get(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("g32", func(b *testing.B) {
		b.SetParallelism((32 + goruntime.GOMAXPROCS(0) - 1) / goruntime.GOMAXPROCS(0))
		run(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := get(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	})
}

// BenchmarkPlainGet is the same GET through a bare go-redis client with the
// same pool size and protocol.
func BenchmarkPlainGet(b *testing.B) {
	_, k, srv := benchDeployment(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64, Protocol: protocol, DisableIdentity: true})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	wire := k.Redis()
	runGets(b, func() error {
		_, err := c.Get(ctx, wire).Bytes()
		return err
	}, nil)
}

// hookChain is the admission hook and the guard of the regular lane around
// a terminal that answers without a network, so the hook path's own cost is
// measurable.
func hookChain(tb testing.TB) (redis.ProcessHook, string) {
	tb.Helper()
	return hookChainObserved(tb, nopObserver{})
}

func hookChainObserved(tb testing.TB, obs Observer) (redis.ProcessHook, string) {
	tb.Helper()
	cat, err := commands.Default()
	require.NoError(tb, err)
	g, err := guard.New(guard.Config{Deployment: "bench", Lane: policy.LaneRegular, Catalog: cat, Namespace: testNS,
		Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20}})
	require.NoError(tb, err)
	adm := &admission{deployment: "bench", lane: policy.LaneRegular, gate: newGate(), inflight: newInflight(1024),
		acquire: time.Second, catalog: cat, obs: obs}
	value := string(make([]byte, 256))
	terminal := func(_ context.Context, cmd redis.Cmder) error {
		cmd.(*redis.StringCmd).SetVal(value)
		return nil
	}
	return adm.ProcessHook(g.ProcessHook(terminal)), testKey("hot")
}

func BenchmarkHookPath(b *testing.B) {
	hook, key := hookChain(b)
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", key)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := hook(ctx, cmd); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHookPathParts(b *testing.B) {
	cat, err := commands.Default()
	require.NoError(b, err)
	g, err := guard.New(guard.Config{Deployment: "bench", Lane: policy.LaneRegular, Catalog: cat, Namespace: testNS,
		Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20}})
	require.NoError(b, err)
	adm := &admission{deployment: "bench", lane: policy.LaneRegular, gate: newGate(), inflight: newInflight(1024),
		acquire: time.Second, catalog: cat, obs: nopObserver{}}
	value := string(make([]byte, 256))
	terminal := func(_ context.Context, cmd redis.Cmder) error {
		cmd.(*redis.StringCmd).SetVal(value)
		return nil
	}
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", testKey("hot"))
	for name, h := range map[string]redis.ProcessHook{
		"none": terminal, "guard": g.ProcessHook(terminal), "admission": adm.ProcessHook(terminal),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = h(ctx, cmd)
			}
		})
	}
	b.Run("lookup", func(b *testing.B) {
		for b.Loop() {
			_, _ = cat.Lookup(cmd.Args())
		}
	})
	b.Run("gate", func(b *testing.B) {
		for b.Loop() {
			_ = adm.admit(ctx)
			adm.release()
		}
	})
	b.Run("now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Since(time.Now())
		}
	})
}

// BenchmarkHookPathParallel is BenchmarkHookPath from 32 goroutines: the
// lifecycle gate and the in-flight semaphore are shared by every call of a
// lane, so their cost under contention shows here.
func BenchmarkHookPathParallel(b *testing.B) {
	hook, key := hookChain(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism((32 + goruntime.GOMAXPROCS(0) - 1) / goruntime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		cmd := redis.NewStringCmd(ctx, "get", key)
		for pb.Next() {
			if err := hook(ctx, cmd); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
