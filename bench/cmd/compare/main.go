// Command compare runs caphost side by side with plain go-redis and peer
// libraries (go-redis/redis_rate, go-redis/cache) on one private
// redis-server and prints throughput, latency and the ratio. It is what
// `make bench` runs; the cache rows (cache.go, stampede.go) say in their
// footnote what each side hands the caller.
//
// Method: both contenders use the same server, key, value, pool size and
// protocol, and both hand the value to the caller as []byte. A round gives
// each contender the same total duration, cut into short slices that
// alternate between the contenders (A B B A A B ...), so a load burst from
// another process on a shared 2-core machine hits both sides alike instead
// of landing on one side's whole round. The ratio column is the median of
// the per-round ratios (each round is a paired comparison); the ops/s and
// latency columns are each contender's median round.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/keys"
)

func main() {
	dur := flag.Duration("duration", 2*time.Second, "length of one round")
	rounds := flag.Int("rounds", 5, "rounds per contender (median reported)")
	slice := flag.Duration("slice", 250*time.Millisecond, "length of one interleaved slice within a round")
	addr := flag.String("redis", "", "use this Redis instead of starting a private one (must be disposable)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	onlyGet := flag.Bool("only-get", false, "run only the GET rows (skip the rate-decision and cache rows)")
	onlyRate := flag.Bool("only-rate", false, "run only the rate-decision rows (skip the GET and cache rows)")
	rowFilter := flag.String("rows", "", "run only the rows whose label contains this text (for example \"no guest\", or \"cache\" for the cache rows)")
	solo := flag.String("solo", "", "instead of comparing, run each rate contender whose name contains this text alone for -duration (with -cpuprofile: a profile of just that contender)")
	soloG := flag.Int("solo-goroutines", 1, "goroutines for -solo")
	batchFlights := flag.Int("batch-flights", -1, "caphost limiter: concurrent token-bucket sends before calls batch (0: no batching; -1: the limiter's default)")
	serverStats := flag.Bool("server-stats", false, "after each row, run every contender alone and print redis-server's cost per op (INFO commandstats usec_per_call and server CPU)")
	idleCheck := flag.Duration("idle-check", policy.DefaultIdleCheck, "caphost's timeouts.idle-check (0: peek every pooled connection on reuse, as go-redis does; the default is the config file's)")
	control := flag.Bool("control", false, "also run go-redis (GET), redis_rate (rate) and go-redis/cache (cache) against an identical second client (A/A): their ratios are the noise floor")
	codecWasmPath := flag.String("codec-wasm", codecWasm, "the reference codec guest the cache rows load (`make guests` builds it)")
	codecASWasmPath := flag.String("codec-as-wasm", codecASWasm, "the codec guest's AssemblyScript twin the cache rows load (`make guests` builds it)")
	webhookBinPath := flag.String("webhook-bin", webhookBin, "the webhook transport plugin the notify rows launch (`make transports` builds it)")
	stampedeSlice := flag.Duration("stampede-slice", 4*time.Second, "length of one side's slice in the cache stampede row (several 1 s expiries)")
	sidecar := flag.Bool("sidecar", false, "instead of the library rows, compare `caphost serve` with envoyproxy/ratelimit as sidecars (HTTP and gRPC; needs -caphost-bin and -envoy-ratelimit-bin)")
	caphostBin := flag.String("caphost-bin", "", "the caphost binary of -sidecar")
	envoyBin := flag.String("envoy-ratelimit-bin", "", "envoyproxy/ratelimit's service binary of -sidecar")
	sidecarClients := flag.String("sidecar-clients", "1,8,32", "concurrent keep-alive clients of the -sidecar rows")
	flag.Parse()
	if *sidecar {
		var clients []int
		for _, f := range strings.Split(*sidecarClients, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 1024 {
				fmt.Fprintln(os.Stderr, "compare: -sidecar-clients: want a list of 1..1024")
				os.Exit(2)
			}
			clients = append(clients, n)
		}
		if *caphostBin == "" || *envoyBin == "" {
			fmt.Fprintln(os.Stderr, "compare: -sidecar needs -caphost-bin and -envoy-ratelimit-bin (make bench-sidecar builds both)")
			os.Exit(2)
		}
		if err := sidecarRows(context.Background(), *caphostBin, *envoyBin, clients, *dur); err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			os.Exit(1)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *slice <= 0 || *slice > *dur {
		*slice = *dur
	}
	if *onlyGet && *onlyRate {
		fmt.Fprintln(os.Stderr, "compare: -only-get and -only-rate exclude each other")
		os.Exit(2)
	}
	o := runOpts{dur: *dur, slice: *slice, rounds: *rounds, addr: *addr, control: *control,
		get: !*onlyRate, rate: !*onlyGet, cache: !*onlyGet && !*onlyRate, lease: !*onlyGet && !*onlyRate, serverStats: *serverStats, rows: *rowFilter,
		codecWasm: *codecWasmPath, codecASWasm: *codecASWasmPath, stampedeSlice: *stampedeSlice, webhookBin: *webhookBinPath,
		solo: *solo, soloGoroutines: *soloG, batchFlights: *batchFlights, idleCheck: *idleCheck}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		pprof.StopCPUProfile()
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
	// ratio is this contender's ops/s over the first contender's in the
	// same round (paired); in compare's output, the median of those.
	ratio float64
	// cpuPerOp is this process's CPU time (user+system) per op: the
	// client-side cost, which the server's load does not inflate.
	cpuPerOp time.Duration
}

// runOpts are the command-line choices.
type runOpts struct {
	dur, slice  time.Duration
	rounds      int
	addr        string
	control     bool
	get, rate   bool // which row groups run
	cache       bool
	lease       bool
	serverStats bool
	rows        string // label filter ("" = all)
	// solo runs the matching rate and cache contenders alone instead of the rows.
	solo           string
	soloGoroutines int
	batchFlights   int // -1: limiter default
	idleCheck      time.Duration
	codecWasm      string        // the codec guest of the cache rows
	codecASWasm    string        // its AssemblyScript twin
	webhookBin     string        // the webhook plugin of the notify rows
	stampedeSlice  time.Duration // one side's slice in the stampede row
}

func run(o runOpts) error {
	dur, slice, rounds, addr, control := o.dur, o.slice, o.rounds, o.addr, o.control
	ctx := context.Background()
	if addr == "" {
		srv, err := startRedis(ctx)
		if err != nil {
			return err
		}
		defer srv.stop()
		addr = srv.addr
		o.addr = addr // the cache rows build their runtimes on it
	}

	plain := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, DisableIdentity: true, Protocol: 2})
	defer plain.Close()

	rt, dep, key, err := caphostRuntime(ctx, addr, o.idleCheck)
	if err != nil {
		return err
	}
	defer rt.Close(ctx)

	value := make([]byte, 256)
	if err := dep.SetWithTTL(ctx, key, value, time.Hour); err != nil {
		return err
	}
	wire := key.Redis()

	// Both sides hand the value to the caller as []byte: Deployment.Get
	// returns a copy ([]byte of the reply string), so plain go-redis does
	// the same (.Bytes()) instead of discarding the value with .Err().
	getPlain := contender{"go-redis GET", func(ctx context.Context) error {
		_, err := plain.Get(ctx, wire).Bytes()
		return err
	}}
	getCaphost := contender{"caphost guarded GET", func(ctx context.Context) error {
		_, _, err := dep.Get(ctx, key)
		return err
	}}

	if o.solo != "" {
		if err := rateSolo(ctx, rt, plain, o); err != nil {
			return err
		}
		return cacheSolo(ctx, plain, o)
	}
	fmt.Printf("caphost vs go-redis on a private redis-server (%s), %d rounds × %s per side in %s slices, median round\n\n",
		addr, rounds, dur, slice)
	fmt.Printf("%-36s %10s %10s %9s %9s %9s %9s %8s %8s %7s\n", "scenario", "go-redis/s", "caphost/s",
		"p50 gr", "p50 ch", "p99 gr", "p99 ch", "cpu/op gr", "cpu/op ch", "ratio")
	want := func(label string) bool { return strings.Contains(label, o.rows) }
	row := func(label string, res []result) {
		a, b := res[0], res[1]
		fmt.Printf("%-36s %10.0f %10.0f %9s %9s %9s %9s %9s %9s %6.3fx\n", label,
			a.opsPerSec, b.opsPerSec, us(a.p50), us(b.p50), us(a.p99), us(b.p99), us(a.cpuPerOp), us(b.cpuPerOp), b.ratio)
	}
	var getTwin contender
	if control {
		twin := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, DisableIdentity: true, Protocol: 2})
		defer twin.Close()
		getTwin = contender{"go-redis GET (twin)", func(ctx context.Context) error {
			_, err := twin.Get(ctx, wire).Bytes()
			return err
		}}
	}
	stats := func([]contender, int) {}
	if o.serverStats {
		stats = func(cs []contender, g int) { printServerStats(ctx, plain, cs, g, dur) }
	}
	if o.get {
		for _, g := range []int{1, 32} {
			label := fmt.Sprintf("GET 256B, %d goroutine(s)", g)
			if !want(label) {
				continue
			}
			row(label, compare(ctx, []contender{getPlain, getCaphost}, g, dur, slice, rounds))
			stats([]contender{getPlain, getCaphost}, g)
			if control {
				row(fmt.Sprintf("  A/A control, %d", g), compare(ctx, []contender{getPlain, getTwin}, g, dur, slice, rounds))
			}
		}
	}
	if o.rate {
		if err := rateRows(ctx, rt, plain, o, want, row, stats); err != nil {
			return err
		}
	}
	if o.cache {
		if err := cacheRows(ctx, plain, o, want, row, stats); err != nil {
			return err
		}
	}
	if o.lease {
		if err := leaseRows(ctx, rt, plain, o, want, row, stats); err != nil {
			return err
		}
		if err := idempotencyRows(ctx, rt, plain, o, want, row, stats); err != nil {
			return err
		}
		if err := notifyRows(ctx, rt, plain, o, want, row, stats); err != nil {
			return err
		}
	}
	fmt.Println("\nratio = median over rounds of caphost ops/s ÷ go-redis ops/s in the same round (target ≥ 0.97×).")
	if control {
		fmt.Println("A/A control = go-redis (GET), redis_rate (rate) or go-redis/cache (cache) against an identical second client")
		fmt.Println("(caphost/s column): the ratio's noise floor.")
	}
	fmt.Println("cpu/op = this process's CPU time per op (client side only; redis-server is another process).")
	fmt.Println("caphost adds the admission hook, the guard (catalog lookup, lane, namespace, request/reply")
	fmt.Println("budgets) and certainty wrapping.")
	return nil
}

func caphostRuntime(ctx context.Context, addr string, idleCheck time.Duration) (*runtime.Runtime, *runtime.Deployment, keys.Key, error) {
	rt, err := runtime.New(ctx, benchRedisConfig(addr, idleCheck, policy.RoleCoordination), runtime.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, nil, keys.Key{}, err
	}
	dep, err := rt.Role(policy.RoleCoordination)
	if err != nil {
		return nil, nil, keys.Key{}, err
	}
	k, err := rt.Keys().Build(keys.Spec{Capability: keys.CapCache, Region: "bench", KeyVersion: 1, Kind: "entry", Parts: [][]byte{[]byte("hot")}})
	return rt, dep, k, err
}

// benchRedisConfig is the bench's one deployment, bound to role: the
// coordination role (GET and rate rows) or the cache role (cache rows; the
// runtime refuses to colocate the evictable cache role with another).
// Every runtime built from it shares the key namespace, as the hosts of
// one fleet do.
func benchRedisConfig(addr string, idleCheck time.Duration, role policy.Role) policy.RedisConfig {
	lanes := map[policy.Lane]policy.LaneConfig{}
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 8, MaxInFlight: 64}
	}
	lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 64, MaxInFlight: 1024}
	lanes[policy.LaneScript] = policy.LaneConfig{PoolSize: 64, MaxInFlight: 1024}
	return policy.RedisConfig{
		Deployments: map[string]policy.Deployment{"bench": {
			ID: "bench", Topology: &policy.Standalone{Endpoint: addr}, ClientName: "caphost-bench",
			Timeouts: policy.Timeouts{Connect: time.Second, Command: time.Second, Acquire: time.Second, Shutdown: 5 * time.Second,
				IdleCheck: idleCheck},
			Lanes: lanes, Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20},
			AdminShared: true, // no auth: the admin lane is the default user too, by choice
		}},
		Roles:    map[policy.Role]policy.RoleBinding{role: {Deployment: "bench", Required: true}},
		Programs: policy.ProgramsConfig{Mode: policy.ProgramsEvalshaManaged},
		Keys: policy.KeysConfig{App: "bench", Env: "local", HMAC: policy.KeyMaterial{WriteVersion: 1,
			Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("bench-only-hmac-material-0123456789"))}}},
	}
}

// compare runs rounds rounds; in each, every contender runs for dur in
// total, in slices that alternate between the contenders. It returns each
// contender's median round, with ratio set to the median paired ratio
// against the first contender.
func compare(ctx context.Context, cs []contender, goroutines int, dur, slice time.Duration, rounds int) []result {
	for _, c := range cs { // warm pools and connections
		measure(ctx, c, goroutines, dur/4)
	}
	all := make([][]result, len(cs))
	ratios := make([][]float64, len(cs))
	n := int(dur / slice)
	for r := 0; r < rounds; r++ {
		acc := make([]tally, len(cs))
		for k := 0; k < n; k++ {
			for i := range cs {
				j := (i + k + r) % len(cs) // alternate who goes first
				acc[j].add(measure(ctx, cs[j], goroutines, slice))
			}
		}
		for i := range cs {
			res := acc[i].result()
			all[i] = append(all[i], res)
			ratios[i] = append(ratios[i], res.opsPerSec/acc[0].result().opsPerSec)
		}
	}
	out := make([]result, len(cs))
	for i, rs := range all {
		slices.SortFunc(rs, func(a, b result) int { return cmpFloat(a.opsPerSec, b.opsPerSec) })
		out[i] = rs[len(rs)/2]
		slices.Sort(ratios[i])
		out[i].ratio = ratios[i][len(ratios[i])/2]
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// tally accumulates the slices of one contender in one round.
type tally struct {
	ops     float64
	elapsed time.Duration
	cpu     time.Duration
	lat     []time.Duration
}

func (t *tally) add(s sample) {
	t.ops += float64(s.ops)
	t.elapsed += s.elapsed
	t.cpu += s.cpu
	t.lat = append(t.lat, s.lat...)
}

func (t *tally) result() result {
	r := result{opsPerSec: t.ops / t.elapsed.Seconds()}
	if t.ops > 0 {
		r.cpuPerOp = time.Duration(float64(t.cpu) / t.ops)
	}
	if len(t.lat) > 0 {
		lat := slices.Clone(t.lat)
		slices.Sort(lat)
		r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return r
}

// sample is one measured slice.
type sample struct {
	ops     int64
	elapsed time.Duration
	cpu     time.Duration
	lat     []time.Duration
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func measure(ctx context.Context, c contender, goroutines int, dur time.Duration) sample {
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
			local := make([]time.Duration, 0, 256)
			for n := 0; !stop.Load(); n++ {
				// Sample latency on every 8th op only; the clock stays off
				// the others (a clock read is not free on every VM).
				sampled := n%8 == 0
				var t0 time.Time
				if sampled {
					t0 = time.Now()
				}
				err := c.op(ctx)
				if sampled {
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
	start, cpu0 := time.Now(), processCPU()
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	if first != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", c.name, first)
		os.Exit(1)
	}
	return sample{ops: ops.Load(), elapsed: elapsed, cpu: cpu, lat: lat}
}

func us(d time.Duration) string { return fmt.Sprintf("%.1fµs", float64(d.Nanoseconds())/1000) }
