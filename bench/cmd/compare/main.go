// Command compare runs caphost side by side with plain go-redis on one
// private redis-server and prints throughput, latency and the ratio. It is
// what `make bench` runs.
//
// Method: each scenario runs its contenders in alternating order for
// several rounds of a fixed duration on the same server and reports the
// median round, so drift of a shared 2-core machine hits both sides alike.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/keys"
)

func main() {
	dur := flag.Duration("duration", 2*time.Second, "length of one round")
	rounds := flag.Int("rounds", 5, "rounds per contender (median reported)")
	addr := flag.String("redis", "", "use this Redis instead of starting a private one (must be disposable)")
	flag.Parse()
	if err := run(*dur, *rounds, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// contender is one implementation of an operation.
type contender struct {
	name string
	op   func(ctx context.Context) error
}

type result struct {
	opsPerSec float64
	p50, p99  time.Duration
}

func run(dur time.Duration, rounds int, addr string) error {
	ctx := context.Background()
	if addr == "" {
		srv, err := startRedis(ctx)
		if err != nil {
			return err
		}
		defer srv.stop()
		addr = srv.addr
	}

	plain := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, DisableIdentity: true, Protocol: 2})
	defer plain.Close()

	rt, dep, key, err := caphostRuntime(ctx, addr)
	if err != nil {
		return err
	}
	defer rt.Close(ctx)

	value := make([]byte, 256)
	if err := dep.SetWithTTL(ctx, key, value, time.Hour); err != nil {
		return err
	}
	wire := key.Redis()

	getPlain := contender{"go-redis GET", func(ctx context.Context) error { return plain.Get(ctx, wire).Err() }}
	getCaphost := contender{"caphost guarded GET", func(ctx context.Context) error {
		_, _, err := dep.Get(ctx, key)
		return err
	}}

	fmt.Printf("caphost vs go-redis on a private redis-server (%s), %d rounds × %s, median round\n\n", addr, rounds, dur)
	fmt.Printf("%-22s %11s %11s %9s %9s %9s %9s %7s\n", "scenario", "go-redis/s", "caphost/s", "p50 gr", "p50 ch", "p99 gr", "p99 ch", "ratio")
	for _, g := range []int{1, 32} {
		res := compare(ctx, []contender{getPlain, getCaphost}, g, dur, rounds)
		a, b := res[0], res[1]
		fmt.Printf("%-22s %11.0f %11.0f %9s %9s %9s %9s %6.3fx\n", fmt.Sprintf("GET 256B, %d goroutine(s)", g),
			a.opsPerSec, b.opsPerSec, us(a.p50), us(b.p50), us(a.p99), us(b.p99), b.opsPerSec/a.opsPerSec)
	}
	fmt.Println("\nratio = caphost ops/s ÷ go-redis ops/s (target ≥ 0.97×). caphost adds the admission hook,")
	fmt.Println("the guard (catalog lookup, lane, namespace, request/reply budgets) and certainty wrapping.")
	return nil
}

func caphostRuntime(ctx context.Context, addr string) (*runtime.Runtime, *runtime.Deployment, keys.Key, error) {
	lanes := map[policy.Lane]policy.LaneConfig{}
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 8, MaxInFlight: 64}
	}
	lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 64, MaxInFlight: 1024}
	cfg := policy.RedisConfig{
		Deployments: map[string]policy.Deployment{"bench": {
			ID: "bench", Topology: &policy.Standalone{Endpoint: addr}, ClientName: "caphost-bench",
			Timeouts: policy.Timeouts{Connect: time.Second, Command: time.Second, Acquire: time.Second, Shutdown: 5 * time.Second},
			Lanes:    lanes, Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20},
		}},
		Roles:    map[policy.Role]policy.RoleBinding{policy.RoleCache: {Deployment: "bench"}},
		Programs: policy.ProgramsConfig{Mode: policy.ProgramsEvalshaManaged},
		Keys: policy.KeysConfig{App: "bench", Env: "local", HMAC: policy.KeyMaterial{WriteVersion: 1,
			Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("bench-only-hmac-material-0123456789"))}}},
	}
	rt, err := runtime.New(ctx, cfg, runtime.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, nil, keys.Key{}, err
	}
	dep, err := rt.Role(policy.RoleCache)
	if err != nil {
		return nil, nil, keys.Key{}, err
	}
	k, err := rt.Keys().Build(keys.Spec{Capability: keys.CapCache, Region: "bench", KeyVersion: 1, Kind: "entry", Parts: [][]byte{[]byte("hot")}})
	return rt, dep, k, err
}

// compare runs every contender rounds times, alternating, and returns the
// median round of each.
func compare(ctx context.Context, cs []contender, goroutines int, dur time.Duration, rounds int) []result {
	for _, c := range cs { // warm pools and connections
		measure(ctx, c, goroutines, dur/4)
	}
	all := make([][]result, len(cs))
	for r := 0; r < rounds; r++ {
		for i := range cs {
			j := (i + r) % len(cs) // alternate who goes first
			all[j] = append(all[j], measure(ctx, cs[j], goroutines, dur))
		}
	}
	out := make([]result, len(cs))
	for i, rs := range all {
		slices.SortFunc(rs, func(a, b result) int {
			switch {
			case a.opsPerSec < b.opsPerSec:
				return -1
			case a.opsPerSec > b.opsPerSec:
				return 1
			}
			return 0
		})
		out[i] = rs[len(rs)/2]
	}
	return out
}

func measure(ctx context.Context, c contender, goroutines int, dur time.Duration) result {
	var (
		ops   atomic.Int64
		stop  atomic.Bool
		wg    sync.WaitGroup
		mu    sync.Mutex
		lat   []time.Duration
		first error
	)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1<<14)
			for n := 0; !stop.Load(); n++ {
				t0 := time.Now()
				err := c.op(ctx)
				if n%8 == 0 { // sample latency; keep the timer off most ops
					local = append(local, time.Since(t0))
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				ops.Add(1)
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	start := time.Now()
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", c.name, first)
		os.Exit(1)
	}
	slices.Sort(lat)
	r := result{opsPerSec: float64(ops.Load()) / elapsed.Seconds()}
	if len(lat) > 0 {
		r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return r
}

func us(d time.Duration) string { return fmt.Sprintf("%.1fµs", float64(d.Nanoseconds())/1000) }
