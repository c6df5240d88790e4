package plugins

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
	"github.com/caphost/caphost/plugins/trust"
)

// referenceBundles returns the four reference guests as `make guests`
// writes them: built, with guests/<name>/selftest.json bundled.
func referenceBundles(tb testing.TB) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	for _, name := range []string{"codec", "cache-region", "rate-policy", "renderer"} {
		f, err := vectors.ReadFile(filepath.Join("..", "guests", name, "selftest.json"))
		if err != nil {
			tb.Fatal(err)
		}
		sec, err := f.Section()
		if err != nil {
			tb.Fatal(err)
		}
		out[name] = abi.AppendSelfTestSection(wasmOf(tb, name), sec)
	}
	return out
}

// BenchmarkManagerStartup is DESIGN §9's "startup with four guests and a
// warm compile cache" (target ≤ 300 ms): what host.New does for guests — a
// new engine on an on-disk compilation cache that already holds the
// modules, a Manager with the production pipeline, and the four reference
// guests (vectors bundled) loaded one after the other, each checked against
// its sha256 pin, described, self-tested and run through the conformance
// suite. One op is one start-up until every module serves; closing is not
// timed. "pipeline=load-only" skips self-test and conformance to show what
// they cost.
func BenchmarkManagerStartup(b *testing.B) {
	ctx := context.Background()
	mods := referenceBundles(b)
	names := make([]string, 0, len(mods))
	pins := map[string]trust.Pin{}
	for n, w := range mods {
		names = append(names, n)
		pins[n] = trust.Digest(w)
	}
	slices.Sort(names)
	verify := func(name string, wasm []byte) error {
		_, err := trust.Verify(wasm, pins[name], nil, trust.TrustedKeys{}, false)
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cacheDir := b.TempDir()
	start := func(b *testing.B, selfTest bool) (*Engine, *Manager) {
		e, err := NewEngine(Config{CacheDir: cacheDir, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		mgr := NewManager(e, ManagerOptions{Verify: verify, SkipSelfTest: !selfTest, Logger: quiet})
		for _, n := range names {
			// A generous call deadline: on a shared machine a starved
			// conformance call must not fail the measurement.
			if err := mgr.Load(ctx, n, mods[n], Limits{CallTimeout: 2 * time.Second}); err != nil {
				b.Fatal(err)
			}
		}
		return e, mgr
	}
	stop := func(e *Engine, mgr *Manager) {
		_ = mgr.Close(ctx)
		_ = e.Close(ctx)
	}
	// Warm the on-disk cache: the first start compiles (seconds per guest).
	stop(start(b, false))
	for _, selfTest := range []bool{true, false} {
		name := "pipeline=full"
		if !selfTest {
			name = "pipeline=load-only"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				e, mgr := start(b, selfTest)
				b.StopTimer()
				if got := len(mgr.Status()); got != len(names) {
					b.Fatalf("%d modules serving, want %d", got, len(names))
				}
				stop(e, mgr)
				runtime.GC() // the previous start-up's garbage is not this one's cost
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/startup")
		})
	}
}

// BenchmarkManagerSwapLatency is DESIGN §9's "hot swap under load: p99
// during the swap ≤ 2× steady state". Callers hammer a rate-policy module
// through Manager.Use while the benchmark swaps it b.N times (alternating
// the bundled reference guest and ratev2, production pipeline), pausing
// between swaps so steady-state calls are sampled too. Every call is timed
// and classified by whether a swap was running when it started or ended.
// One op is one swap; the latency percentiles and their ratio are reported
// as metrics. No assertion on timing: TestManagerSwapUnderLoad asserts the
// correctness (zero failed calls, one generation per call).
//
//	go test -run '^$' -bench BenchmarkManagerSwapLatency -benchtime 40x ./plugins/
func BenchmarkManagerSwapLatency(b *testing.B) {
	// paced: callers pause 100 µs between calls, the CPU has headroom (a
	// loaded service); saturated: callers never pause, so the swap's
	// compile-cache read, instantiation and checks compete with them for
	// the two cores.
	for _, mode := range []struct {
		name    string
		callers int
		pause   time.Duration
	}{
		{"load=paced", 4, 100 * time.Microsecond},
		{"load=saturated", 2 * runtime.GOMAXPROCS(0), 0},
	} {
		b.Run(mode.name, func(b *testing.B) { benchSwapLatency(b, mode.callers, mode.pause) })
	}
}

func benchSwapLatency(b *testing.B, callers int, pause time.Duration) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr := NewManager(newEngine(b, Config{Logger: quiet}), ManagerOptions{Verify: AcceptAnyModule, Logger: quiet})
	b.Cleanup(func() { _ = mgr.Close(ctx) })
	v1, v2 := referenceBundles(b)["rate-policy"], wasmOf(b, "ratev2")
	lim := Limits{CallTimeout: time.Second}
	if err := mgr.Load(ctx, "rate", v1, lim); err != nil {
		b.Fatal(err)
	}
	// Compile both candidates before measuring: a production swap reads
	// them from the warm cache too.
	for _, w := range [][]byte{v2, v1} {
		if _, err := mgr.Swap(ctx, "rate", w); err != nil {
			b.Fatal(err)
		}
	}
	req := &abi.RateSelectRequest{Route: "/orders/42", Method: "GET", APIKeyPlan: "pro", ClientIPClass: "public"}

	// phase is odd while a swap runs; a call that saw it odd or changing
	// overlapped a swap.
	var phase atomic.Uint64
	var failed atomic.Int64
	steady := make([][]time.Duration, callers)
	during := make([][]time.Duration, callers)
	stopc := make(chan struct{})
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopc:
					return
				default:
				}
				p0 := phase.Load()
				t0 := time.Now()
				err := mgr.Use(ctx, "rate", func(m Guest) error {
					_, err := RateSelect(ctx, m, req)
					return err
				})
				d := time.Since(t0)
				if err != nil {
					failed.Add(1)
				}
				if p1 := phase.Load(); p0%2 == 1 || p1 != p0 {
					during[c] = append(during[c], d)
				} else {
					steady[c] = append(steady[c], d)
				}
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
	const gap = 100 * time.Millisecond // steady state between swaps
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		time.Sleep(gap)
		b.StartTimer()
		next := v2
		if i%2 == 1 {
			next = v1
		}
		phase.Add(1)
		_, err := mgr.Swap(ctx, "rate", next)
		phase.Add(1)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	time.Sleep(gap)
	close(stopc)
	wg.Wait()

	all := func(per [][]time.Duration) []time.Duration {
		var out []time.Duration
		for _, p := range per {
			out = append(out, p...)
		}
		slices.Sort(out)
		return out
	}
	s, d := all(steady), all(during)
	if len(s) == 0 || len(d) == 0 {
		b.Fatalf("no samples: %d steady, %d during swaps", len(s), len(d))
	}
	pct := func(x []time.Duration, p float64) float64 {
		return float64(x[int(p*float64(len(x)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(s, 0.50), "steady-p50-µs")
	b.ReportMetric(pct(s, 0.99), "steady-p99-µs")
	b.ReportMetric(pct(d, 0.50), "swap-p50-µs")
	b.ReportMetric(pct(d, 0.99), "swap-p99-µs")
	b.ReportMetric(pct(d, 0.99)/pct(s, 0.99), "p99-ratio")
	b.ReportMetric(float64(len(d)), "calls-during-swaps")
	b.ReportMetric(float64(failed.Load()), "failed-calls")
	if failed.Load() > 0 {
		b.Error(fmt.Sprintf("%d calls failed", failed.Load()))
	}
}
