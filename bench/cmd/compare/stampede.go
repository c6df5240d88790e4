package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gocache "github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/host/cache"
)

// The stampede row: a hot key with a 1 s hard TTL and no stale window,
// read by 32 goroutines spread over two hosts (16 each; two caphost
// Caches on two runtimes, two go-redis/cache Caches on two clients, as two
// processes would have); every miss loads from a source that takes 20 ms.
// Each side runs for several expiries, in slices that alternate with the
// other side's. Reported: source loads per expiry (caphost's refresh lease
// should make it exactly 1 across both hosts; go-redis/cache's Once
// coalesces per process, so 2) and p99 latency of the ops that overlap a
// refresh (from the first load's start to the last load's end of one
// expiry), beside the p99 of the other ops.

const (
	stampedeLabel        = "cache stampede, 2 hosts × 16 gor."
	stampedeControlLabel = "  cache stampede A/A control"
)

// stampedeSide is one side of the stampede row: op(ctx, host, load) reads
// the hot key on host 0 or 1, loading through load on a miss.
type stampedeSide struct {
	name string
	op   func(ctx context.Context, host int, load *sourceLog) error
}

// sourceLog is the source: every load takes stampedeLoad and is recorded.
type sourceLog struct {
	value []byte
	mu    sync.Mutex
	spans []span
}

type span struct{ start, end time.Time }

func (l *sourceLog) load(ctx context.Context) ([]byte, error) {
	start := time.Now()
	t := time.NewTimer(stampedeLoad)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l.mu.Lock()
	l.spans = append(l.spans, span{start, time.Now()})
	l.mu.Unlock()
	return l.value, nil
}

// opRec is one measured op: its start and latency.
type opRec struct {
	start time.Time
	lat   time.Duration
}

// stampedeTally accumulates one side's slices.
type stampedeTally struct {
	ops      []opRec
	loads    []span
	errs     int64
	firstErr error
}

// runStampedeSlice runs side for dur: 2 hosts × perHost goroutines, each
// reading the hot key back to back.
func runStampedeSlice(ctx context.Context, side stampedeSide, value []byte, perHost int, dur time.Duration, t *stampedeTally) {
	src := &sourceLog{value: value}
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
		mu   sync.Mutex
	)
	for h := range 2 {
		for range perHost {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := make([]opRec, 0, 4096)
				var errs int64
				var first error
				for !stop.Load() {
					t0 := time.Now()
					err := side.op(ctx, h, src)
					local = append(local, opRec{t0, time.Since(t0)})
					if err != nil {
						errs++
						if first == nil {
							first = err
						}
					}
				}
				mu.Lock()
				t.ops = append(t.ops, local...)
				t.errs += errs
				if t.firstErr == nil {
					t.firstErr = first
				}
				mu.Unlock()
			}()
		}
	}
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	src.mu.Lock()
	t.loads = append(t.loads, src.spans...)
	src.mu.Unlock()
}

// stampedeResult is one side's figures over all its slices.
type stampedeResult struct {
	expiries     int
	loads        int
	maxLoads     int // most loads in one expiry
	p99Refresh   time.Duration
	p99Steady    time.Duration
	opsRefresh   int
	opsPerSecond float64
	errs         int64
	firstErr     error
}

// analyse groups loads into expiries (loads starting within half a TTL of
// an expiry's first load belong to it) and splits the ops into those that
// overlap a refresh window and the rest.
func (t *stampedeTally) analyse(total time.Duration) stampedeResult {
	loads := slices.Clone(t.loads)
	slices.SortFunc(loads, func(a, b span) int { return a.start.Compare(b.start) })
	var windows []span
	var perExpiry []int
	for _, l := range loads {
		if n := len(windows); n > 0 && l.start.Sub(windows[n-1].start) < stampedeTTL/2 {
			windows[n-1].end = later(windows[n-1].end, l.end)
			perExpiry[n-1]++
			continue
		}
		windows = append(windows, l)
		perExpiry = append(perExpiry, 1)
	}
	var refresh, steady []time.Duration
	for _, op := range t.ops {
		end := op.start.Add(op.lat)
		// i is the first window starting at or after the op's end; the one
		// before it is the last that started before the op ended.
		i, atEnd := slices.BinarySearchFunc(windows, end, func(w span, e time.Time) int { return w.start.Compare(e) })
		if atEnd || i > 0 && !windows[i-1].end.Before(op.start) {
			refresh = append(refresh, op.lat)
		} else {
			steady = append(steady, op.lat)
		}
	}
	r := stampedeResult{expiries: len(windows), loads: len(loads), opsRefresh: len(refresh),
		opsPerSecond: float64(len(t.ops)) / total.Seconds(), errs: t.errs, firstErr: t.firstErr}
	if len(perExpiry) > 0 {
		r.maxLoads = slices.Max(perExpiry)
	}
	r.p99Refresh, r.p99Steady = p99(refresh), p99(steady)
	return r
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)*99/100]
}

// caphostStampede reads the hot key through GetOrLoad on host A or B.
func caphostStampede(s *cacheSides, key string) (stampedeSide, error) {
	var regions [2]*cache.Region
	for i, h := range []*cache.Cache{s.hostA, s.hostB} {
		r, err := h.Region(regionHot)
		if err != nil {
			return stampedeSide{}, err
		}
		regions[i] = r
	}
	k := cache.Parts(key)
	return stampedeSide{"caphost GetOrLoad", func(ctx context.Context, host int, src *sourceLog) error {
		res, err := regions[host].GetOrLoad(ctx, k, func(ctx context.Context) (cache.LoadOutcome, error) {
			v, err := src.load(ctx)
			if err != nil {
				return cache.Cancelled(), nil
			}
			return cache.Loaded(v, cache.Revision{}), nil
		})
		if err == nil && res.Kind != cache.FreshHit && res.Kind != cache.LoadedFromSource {
			err = fmt.Errorf("caphost GetOrLoad answered %v", res.Kind)
		}
		return err
	}}, nil
}

// goCacheStampede reads the hot key through Once on two go-redis/cache
// instances, each on its own client.
func goCacheStampede(name string, plain *redis.Client, key string) (stampedeSide, func()) {
	hosts := [2]*goCache{newGoCache(plain, nil), newGoCache(plain, nil)}
	return stampedeSide{name, func(ctx context.Context, host int, src *sourceLog) error {
			var b []byte
			return hosts[host].cd.Once(&gocache.Item{Ctx: ctx, Key: key, Value: &b, TTL: stampedeTTL,
				Do: func(it *gocache.Item) (any, error) { return src.load(it.Context()) }})
		}}, func() {
			for _, h := range hosts {
				_ = h.c.Close()
			}
		}
}

// stampedeRows runs the stampede row (and, with -control, its A/A control:
// go-redis/cache against a second, identical pair of instances).
func stampedeRows(ctx context.Context, s *cacheSides, plain *redis.Client, o runOpts, want func(string) bool) error {
	ours, err := caphostStampede(s, "stampede-hot")
	if err != nil {
		return err
	}
	peer, closePeer := goCacheStampede("go-redis/cache Once", plain, "bench:gocache:stampede-hot")
	defer closePeer()
	twin, closeTwin := goCacheStampede("go-redis/cache Once (twin)", plain, "bench:gocache:stampede-hot-twin")
	defer closeTwin()
	fmt.Printf("\n%-36s %13s %13s %9s %9s %8s %8s %11s %11s %10s %10s\n", "stampede (1 s TTL, 20 ms load)",
		"loads/exp gr", "loads/exp ch", "max gr", "max ch", "exp gr", "exp ch", "p99 refr gr", "p99 refr ch",
		"p99 rest gr", "p99 rest ch")
	run := func(label string, a, b stampedeSide) {
		var ta, tb stampedeTally
		// Warm: connections, the lease program, the first fill.
		runStampedeSlice(ctx, a, s.json, 16, 300*time.Millisecond, &stampedeTally{})
		runStampedeSlice(ctx, b, s.json, 16, 300*time.Millisecond, &stampedeTally{})
		for r := range o.rounds {
			first, second, tf, ts := a, b, &ta, &tb
			if r%2 == 1 {
				first, second, tf, ts = b, a, &tb, &ta
			}
			runStampedeSlice(ctx, first, s.json, 16, o.stampedeSlice, tf)
			runStampedeSlice(ctx, second, s.json, 16, o.stampedeSlice, ts)
		}
		total := time.Duration(o.rounds) * o.stampedeSlice
		ra, rb := ta.analyse(total), tb.analyse(total)
		fmt.Printf("%-36s %13.2f %13.2f %9d %9d %8d %8d %11s %11s %10s %10s\n", label,
			perExp(ra), perExp(rb), ra.maxLoads, rb.maxLoads, ra.expiries, rb.expiries,
			ms(ra.p99Refresh), ms(rb.p99Refresh), ms(ra.p99Steady), ms(rb.p99Steady))
		for _, x := range []struct {
			side stampedeSide
			r    stampedeResult
		}{{a, ra}, {b, rb}} {
			fmt.Printf("    %-30s %9.0f op/s, %6d ops overlapped a refresh, %d errors", x.side.name, x.r.opsPerSecond, x.r.opsRefresh, x.r.errs)
			if x.r.firstErr != nil {
				fmt.Printf(" (first: %v)", x.r.firstErr)
			}
			fmt.Println()
		}
	}
	if want(stampedeLabel) {
		run(stampedeLabel, peer, ours)
	}
	if o.control && want(stampedeControlLabel) {
		run(stampedeControlLabel, peer, twin)
	}
	fmt.Printf("stampede: %d rounds × %s per side, alternating; loads/exp = source loads per expiry (mean; max = the most\n", o.rounds, o.stampedeSlice)
	fmt.Println("in one expiry); p99 refr = p99 latency of the ops that overlapped a refresh (first load start to last load end")
	fmt.Println("of one expiry); p99 rest = every other op. caphost: region stampede distributed (refresh lease, default")
	fmt.Println("lease wait 1 s, poll 20 ms, woken by the holder's hint); go-redis/cache: Once (singleflight per instance),")
	fmt.Println("one instance per host.")
	return nil
}

func perExp(r stampedeResult) float64 {
	if r.expiries == 0 {
		return 0
	}
	return float64(r.loads) / float64(r.expiries)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
