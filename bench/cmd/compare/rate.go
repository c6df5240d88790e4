package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// rateContenders are the sides of the rate rows.
type rateContenders struct {
	peer     contender // go-redis/redis_rate Allow
	peerTwin contender // the same on a second client (A/A control)
	guest    contender // rate-policy guest selector (memoized per generation) + limiter (nil op without a guest)
	guestRaw contender // the guest asked on every decision + limiter
	limiter  contender // the limiter alone, the policy as configured by default
	dedup    contender // the limiter alone, evaluation-id dedup enabled
	close    func()    // releases the twin client and the guest
}

// newRateContenders builds the rate contenders: go-redis/redis_rate's Allow
// (GCRA in one Lua call) against caphost's full path — the rate-policy
// guest picks the policy (a native Wasm call), then the limiter builds the
// HMAC'd subject key and runs the token-bucket catalog program with its
// clock clamp and typed outcome. Both sides admit everything (limits far
// above the offered load), use 64 subjects round-robin and the same Redis.
// The guest is built and loaded only when withGuest.
func newRateContenders(ctx context.Context, rt *runtime.Runtime, plain *redis.Client, withGuest bool, batchFlights int) (*rateContenders, error) {
	const perSecond = 1_000_000
	// "bench" is the policy as configured with every default (fail closed,
	// clock clamp, TTL; dedup is opt-in, so off: at-least-once evaluation).
	// "bench-dedup" opts into evaluation-id dedup: no evaluation id is
	// given, so the limiter mints one per call, as the middleware does.
	params := policy.RateParameters{Capacity: perSecond, RefillTokens: perSecond, RefillPeriod: time.Second}
	cfg := ratelimit.Config{Provider: "redis", RedisRole: policy.RoleCoordination, DegradedProvider: "disabled",
		Policies: []policy.RatePolicyDecl{{
			ID: "bench", Revision: "r1", Algorithm: policy.RateTokenBucket, Parameters: params,
			Dimensions: []policy.RateDimension{policy.DimTenant},
		}, {
			ID: "bench-dedup", Revision: "r1", Algorithm: policy.RateTokenBucket, Parameters: params,
			Dimensions: []policy.RateDimension{policy.DimTenant}, Dedup: policy.RateDedup{Enabled: true},
		}}}
	set, err := cfg.CompilePolicies()
	if err != nil {
		return nil, err
	}
	opts := []ratelimit.Option{ratelimit.WithLogger(slog.New(slog.DiscardHandler))}
	if batchFlights >= 0 {
		opts = append(opts, ratelimit.WithBatching(batchFlights, ratelimit.DefaultBatchMax))
	}
	lim, err := ratelimit.New(rt, cfg, set, opts...)
	if err != nil {
		return nil, err
	}

	// Each side gets its 64 subjects ready-made, in the form its API takes:
	// redis_rate a key string, caphost a Subject (read-only to Evaluate).
	subjects := make([]ratelimit.Subject, 64)
	keysRR := make([]string, 64)
	for i := range subjects {
		subjects[i] = ratelimit.Subject{policy.DimTenant: []byte("tenant-" + strconv.Itoa(i))}
		keysRR[i] = "bench:tenant-" + strconv.Itoa(i)
	}
	twin := redis.NewClient(plain.Options())
	rc := &rateContenders{close: func() { _ = twin.Close() }}
	peer := func(name string, c *redis.Client) contender {
		var n atomic.Uint64 // round-robin over subjects, shared by goroutines
		rr := redis_rate.NewLimiter(c)
		return contender{name, func(ctx context.Context) error {
			res, err := rr.Allow(ctx, keysRR[n.Add(1)%64], redis_rate.PerSecond(perSecond))
			if err == nil && res.Allowed == 0 {
				err = fmt.Errorf("redis_rate denied")
			}
			return err
		}}
	}
	rc.peer = peer("redis_rate Allow", plain)
	rc.peerTwin = peer("redis_rate Allow (twin)", twin)
	evaluate := func(policyID string) func(context.Context) error {
		var n atomic.Uint64
		return func(ctx context.Context) error {
			out := lim.Evaluate(ctx, ratelimit.Request{Policy: policyID, Cost: 1, Subject: subjects[n.Add(1)%64]})
			if !out.Allowed() {
				return fmt.Errorf("caphost: %v %v %v", out.Kind(), out.Category(), out.Reason())
			}
			return nil
		}
	}
	// The limiter alone (no guest call): the part host/ratelimit and
	// runtime/programs own, against the same peer.
	rc.limiter = contender{"caphost token bucket (no guest)", evaluate("bench")}
	rc.dedup = contender{"caphost token bucket (no guest, dedup)", evaluate("bench-dedup")}
	if withGuest {
		mgr, closeGuest, err := loadRatePolicyGuest(ctx)
		if err != nil {
			rc.close()
			return nil, err
		}
		closeTwin := rc.close
		rc.close = func() { closeGuest(); closeTwin() }
		// The product path: the selector `caphost serve` uses, over the
		// hot-swap Manager (selections memoized per generation).
		selector := ratelimit.NewGuestSelector(mgr, guestName)
		attrs := ratelimit.Attributes{Route: "/v1/items", Method: "GET", PrincipalTier: "user", APIKeyPlan: "pro", ClientIPClass: "public"}
		limited := evaluate("bench")
		rc.guest = contender{"caphost guest+token bucket", func(ctx context.Context) error {
			sels, err := selector.Select(ctx, attrs)
			if err != nil {
				return err
			}
			if len(sels) == 0 {
				return fmt.Errorf("guest selected no policy")
			}
			return limited(ctx)
		}}
		// The guest asked on every decision (no memo): its raw cost.
		sel := &abi.RateSelectRequest{Route: attrs.Route, Method: attrs.Method, PrincipalTier: attrs.PrincipalTier,
			APIKeyPlan: attrs.APIKeyPlan, ClientIPClass: attrs.ClientIPClass}
		rc.guestRaw = contender{"caphost guest every call+token bucket", func(ctx context.Context) error {
			if err := mgr.Use(ctx, guestName, func(m plugins.Guest) error {
				_, err := plugins.RateSelect(ctx, m, sel)
				return err
			}); err != nil {
				return err
			}
			return limited(ctx)
		}}
	}
	return rc, nil
}

// rateRows compares a rate decision (see newRateContenders) at 1 and 32
// goroutines.
func rateRows(ctx context.Context, rt *runtime.Runtime, plain *redis.Client, o runOpts,
	want func(string) bool, row func(string, []result), stats func([]contender, int)) error {
	dur, slice, rounds := o.dur, o.slice, o.rounds
	rc, err := newRateContenders(ctx, rt, plain, want("rate decision, 1 gor.") || want("rate decision, 32 gor.") ||
		want("rate decision, guest every call, 1 gor.") || want("rate decision, guest every call, 32 gor."), o.batchFlights)
	if err != nil {
		return err
	}
	defer rc.close()
	rows := []struct {
		label string
		ours  contender
	}{{"rate decision", rc.guest}, {"rate decision, guest every call", rc.guestRaw}, {"rate, no guest", rc.limiter}, {"rate, no guest, dedup", rc.dedup}}
	for _, r := range rows {
		for _, g := range []int{1, 32} {
			label := fmt.Sprintf("%s, %d gor.", r.label, g)
			if !want(label) {
				continue
			}
			cs := []contender{rc.peer, r.ours}
			row(label, compare(ctx, cs, g, dur, slice, rounds))
			stats(cs, g)
		}
	}
	if o.control {
		for _, g := range []int{1, 32} {
			if label := fmt.Sprintf("  rate A/A control, %d", g); want(label) {
				row(label, compare(ctx, []contender{rc.peer, rc.peerTwin}, g, dur, slice, rounds))
			}
		}
	}
	fmt.Println("rate rows: left column = go-redis/redis_rate v10 Allow, right = caphost (target ≥ 1.0×); \"no guest\" rows time the limiter alone;")
	fmt.Println("\"dedup\" rows opt into evaluation-id dedup (the limiter mints an id per call).")
	return rateServerTimeRows(ctx, rt, plain, o, want)
}

// rateAlgorithm is one row of rateServerTimeRows: a policy admitting
// everything the bench offers, and the minimal plain command set a client
// sends for the same algorithm (pipelined, one round trip per decision;
// neither atomic nor clock-safe, which is the point of the program).
type rateAlgorithm struct {
	label    string
	decl     policy.RatePolicyDecl
	plainSet string   // the plain commands, as printed
	commands []string // their INFO commandstats names
	plainOp  func(ctx context.Context, p redis.Pipeliner, key string)
	// plainAfter, when set, is a second round trip of the plain side (the
	// concurrency row's release, as caphost's is a second call).
	plainAfter func(ctx context.Context, p redis.Pipeliner, key string)
}

func rateAlgorithms() []rateAlgorithm {
	decl := func(id string, algo policy.RateAlgorithm, p policy.RateParameters) policy.RatePolicyDecl {
		return policy.RatePolicyDecl{ID: id, Revision: "r1", Algorithm: algo, Parameters: p,
			Dimensions: []policy.RateDimension{policy.DimTenant}}
	}
	const window = time.Minute
	return []rateAlgorithm{
		{"fixed window", decl("st-fw", policy.RateFixedWindow, policy.RateParameters{Limit: policy.RateMaxLimit, Window: window}),
			"INCRBY+PEXPIRE", []string{"incrby", "pexpire"}, func(ctx context.Context, p redis.Pipeliner, k string) {
				p.IncrBy(ctx, k, 1)
				p.PExpire(ctx, k, window)
			}, nil},
		{"sliding counter", decl("st-sc", policy.RateSlidingCounter, policy.RateParameters{Limit: policy.RateMaxLimit, Window: window}),
			"GET+INCRBY+PEXPIRE", []string{"get", "incrby", "pexpire"}, func(ctx context.Context, p redis.Pipeliner, k string) {
				p.Get(ctx, k+":prev")
				p.IncrBy(ctx, k, 1)
				p.PExpire(ctx, k, 2*window)
			}, nil},
		{"token bucket", decl("st-tb", policy.RateTokenBucket, policy.RateParameters{Capacity: 1_000_000, RefillTokens: 1_000_000, RefillPeriod: time.Second}),
			"GET+SET PX", []string{"get", "set"}, func(ctx context.Context, p redis.Pipeliner, k string) {
				p.Get(ctx, k)
				p.Set(ctx, k, "1:999999000000:1764000000000", window)
			}, nil},
		{"GCRA", decl("st-gc", policy.RateGCRA, policy.RateParameters{Limit: policy.RateMaxLimit, Window: window}),
			"GET+SET PX", []string{"get", "set"}, func(ctx context.Context, p redis.Pipeliner, k string) {
				p.Get(ctx, k)
				p.Set(ctx, k, "1764000000000000:1764000000000", window)
			}, nil},
		{"sliding log", decl("st-sl", policy.RateSlidingLog, policy.RateParameters{Limit: 10_000, Window: time.Second}),
			"ZREMRANGEBYSCORE+ZCARD+ZADD+PEXPIRE", []string{"zremrangebyscore", "zcard", "zadd", "pexpire"},
			func(ctx context.Context, p redis.Pipeliner, k string) {
				now := time.Now().UnixMilli()
				p.ZRemRangeByScore(ctx, k, "0", strconv.FormatInt(now-1000, 10))
				p.ZCard(ctx, k)
				p.ZAdd(ctx, k, redis.Z{Score: float64(now), Member: strconv.FormatInt(time.Now().UnixNano(), 10)})
				p.PExpire(ctx, k, time.Second)
			}, nil},
		{label: "concurrency", decl: decl("st-cc", policy.RateConcurrency, policy.RateParameters{Limit: 1000, PermitTTL: 30 * time.Second}),
			plainSet: "ZREMRANGEBYSCORE+ZCARD+ZADD+PEXPIRE, ZREM",
			commands: []string{"zremrangebyscore", "zcard", "zadd", "pexpire", "zrem"},
			plainOp: func(ctx context.Context, p redis.Pipeliner, k string) {
				now := time.Now().UnixMilli()
				p.ZRemRangeByScore(ctx, k, "0", strconv.FormatInt(now, 10))
				p.ZCard(ctx, k)
				p.ZAdd(ctx, k, redis.Z{Score: float64(now + 30_000), Member: "owner-" + k})
				p.PExpire(ctx, k, 30*time.Second)
			},
			plainAfter: func(ctx context.Context, p redis.Pipeliner, k string) { p.ZRem(ctx, k, "owner-"+k) }},
	}
}

// rateServerTimeRows prints, per algorithm and at 1 and 32 goroutines,
// redis-server's time per decision: the limiter's program (INFO
// commandstats usec of EVALSHA/FCALL per decision, dedup off: the
// default) beside the minimal plain command set a client would send
// instead, each run alone on the same private server over 64 subjects.
func rateServerTimeRows(ctx context.Context, rt *runtime.Runtime, plain *redis.Client, o runOpts, want func(string) bool) error {
	algos := rateAlgorithms()
	var rows []rateAlgorithm
	for _, a := range algos {
		if want("rate server time, "+a.label+", 1 gor.") || want("rate server time, "+a.label+", 32 gor.") {
			rows = append(rows, a)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	cfg := ratelimit.Config{Provider: "redis", RedisRole: policy.RoleCoordination, DegradedProvider: "disabled"}
	for _, a := range rows {
		cfg.Policies = append(cfg.Policies, a.decl)
	}
	set, err := cfg.CompilePolicies()
	if err != nil {
		return err
	}
	opts := []ratelimit.Option{ratelimit.WithLogger(slog.New(slog.DiscardHandler))}
	if o.batchFlights >= 0 {
		opts = append(opts, ratelimit.WithBatching(o.batchFlights, ratelimit.DefaultBatchMax))
	}
	lim, err := ratelimit.New(rt, cfg, set, opts...)
	if err != nil {
		return err
	}
	cl, err := ratelimit.NewConcurrencyLimiter(lim)
	if err != nil {
		return err
	}
	subjects := make([]ratelimit.Subject, 64)
	for i := range subjects {
		subjects[i] = ratelimit.Subject{policy.DimTenant: []byte("tenant-" + strconv.Itoa(i))}
	}
	fmt.Printf("\n%-38s %12s %12s %12s %12s %7s  %s\n", "rate server time per decision", "caphost µs", "plain µs",
		"caphost cpu", "plain cpu", "ratio", "plain command set")
	for _, a := range rows {
		for _, g := range []int{1, 32} {
			label := fmt.Sprintf("rate server time, %s, %d gor.", a.label, g)
			if !want(label) {
				continue
			}
			var n atomic.Uint64
			ours := contender{"caphost " + a.label, func(ctx context.Context) error {
				out := lim.Evaluate(ctx, ratelimit.Request{Policy: a.decl.ID, Cost: 1, Subject: subjects[n.Add(1)%64]})
				if !out.Allowed() {
					return fmt.Errorf("caphost %s: %v %v", a.label, out.Kind(), out.Category())
				}
				return nil
			}}
			if a.decl.Algorithm == policy.RateConcurrency {
				ours.op = func(ctx context.Context) error {
					out := cl.Acquire(ctx, ratelimit.ConcurrencyRequest{Policy: a.decl.ID, Subject: subjects[n.Add(1)%64]})
					if !out.Acquired() {
						return fmt.Errorf("caphost %s acquire: %v %v", a.label, out.Kind(), out.Category())
					}
					if rel := out.Lease().Release(ctx); rel.Kind() != ratelimit.Evaluated {
						return fmt.Errorf("caphost %s release: %v %v", a.label, rel.Kind(), rel.Category())
					}
					return nil
				}
			}
			var m atomic.Uint64
			theirs := contender{"plain " + a.plainSet, func(ctx context.Context) error {
				k := "bench:st:" + a.decl.ID + ":" + strconv.FormatUint(m.Add(1)%64, 10)
				_, err := plain.Pipelined(ctx, func(p redis.Pipeliner) error {
					a.plainOp(ctx, p, k)
					return nil
				})
				if err == redis.Nil { // a GET of a key not written yet
					err = nil
				}
				if err == nil && a.plainAfter != nil {
					_, err = plain.Pipelined(ctx, func(p redis.Pipeliner) error {
						a.plainAfter(ctx, p, k)
						return nil
					})
				}
				return err
			}}
			c, err := measureServerCost(ctx, plain, ours, g, o.dur, "evalsha", "fcall")
			if err != nil {
				return err
			}
			p, err := measureServerCost(ctx, plain, theirs, g, o.dur, a.commands...)
			if err != nil {
				return err
			}
			fmt.Printf("%-38s %12.2f %12.2f %12.2f %12.2f %6.2fx  %s\n", label, c.commandMicros, p.commandMicros,
				c.cpuMicros, p.cpuMicros, c.commandMicros/p.commandMicros, a.plainSet)
		}
	}
	fmt.Println("µs = INFO commandstats time per decision (caphost: EVALSHA/FCALL, which includes the commands it runs; plain: its")
	fmt.Println("commands summed); cpu = redis-server CPU per decision (also reading, parsing, replying; cut by pipelining);")
	fmt.Println("each side runs alone, 64 subjects, nothing denied, dedup off. The plain sets are neither atomic nor clock-safe.")
	fmt.Println("concurrency: one decision = acquire + release of a permit (caphost two calls, plain two round trips).")
	return nil
}

// rateSolo runs every rate contender whose name contains o.solo alone, for
// profiling one side at a time.
func rateSolo(ctx context.Context, rt *runtime.Runtime, plain *redis.Client, o runOpts) error {
	rc, err := newRateContenders(ctx, rt, plain, strings.Contains("caphost guest+token bucket", o.solo) || strings.Contains("caphost guest every call+token bucket", o.solo), o.batchFlights)
	if err != nil {
		return err
	}
	defer rc.close()
	for _, c := range []contender{rc.peer, rc.peerTwin, rc.guest, rc.guestRaw, rc.limiter, rc.dedup} {
		if c.op == nil || !strings.Contains(c.name, o.solo) {
			continue
		}
		measure(ctx, c, o.soloGoroutines, o.dur/4) // warm
		s := measure(ctx, c, o.soloGoroutines, o.dur)
		fmt.Printf("%-40s %d goroutine(s): %9.0f op/s, client cpu/op %.1fµs\n", c.name, o.soloGoroutines,
			float64(s.ops)/s.elapsed.Seconds(), float64(s.cpu.Nanoseconds())/1000/float64(s.ops))
	}
	return nil
}

// loadRatePolicyGuest builds guests/rate-policy for wasip1 and loads it in a
// native engine.
// guestName is the bench's rate-policy guest slot.
const guestName = "rate-tiers"

func loadRatePolicyGuest(ctx context.Context) (*plugins.Manager, func(), error) {
	dir, err := os.MkdirTemp("", "caphost-bench-guest-")
	if err != nil {
		return nil, nil, err
	}
	out := filepath.Join(dir, "rate-policy.wasm")
	cmd := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-o", out, "./guests/rate-policy")
	cmd.Dir = ".." // the caphost module root (make bench runs from bench/)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("build rate-policy guest: %v\n%s", err, b)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		return nil, nil, err
	}
	mgr, closeGuest, err := loadGuest(ctx, guestName, wasm, plugins.Limits{PoolSize: 32})
	if err != nil {
		return nil, nil, err
	}
	return mgr, func() {
		closeGuest()
		_ = os.RemoveAll(dir)
	}, nil
}
