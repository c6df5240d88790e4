package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// rateRows compares a rate decision: go-redis/redis_rate's Allow (GCRA in
// one Lua call) against caphost's full path — the rate-policy guest picks
// the policy (a native Wasm call), then the limiter builds the HMAC'd
// subject key and runs the token-bucket catalog program with its clock
// clamp and typed outcome. Both sides admit everything (limits far above the
// offered load), use 64 subjects round-robin and the same Redis.
func rateRows(ctx context.Context, rt *runtime.Runtime, plain *redis.Client, dur, slice time.Duration, rounds int,
	row func(string, []result)) error {
	mod, closeGuest, err := loadRatePolicyGuest(ctx)
	if err != nil {
		return err
	}
	defer closeGuest()

	const perSecond = 1_000_000
	cfg := ratelimit.Config{Provider: "redis", RedisRole: policy.RoleCoordination, DegradedProvider: "disabled",
		Policies: []policy.RatePolicyDecl{{
			ID: "bench", Revision: "r1", Algorithm: policy.RateTokenBucket,
			Parameters: policy.RateParameters{Capacity: perSecond, RefillTokens: perSecond, RefillPeriod: time.Second},
			Dimensions: []policy.RateDimension{policy.DimTenant},
		}}}
	set, err := cfg.CompilePolicies()
	if err != nil {
		return err
	}
	lim, err := ratelimit.New(rt, cfg, set, ratelimit.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}

	subjects := make([][]byte, 64)
	keysRR := make([]string, 64)
	for i := range subjects {
		subjects[i] = []byte("tenant-" + strconv.Itoa(i))
		keysRR[i] = "bench:tenant-" + strconv.Itoa(i)
	}
	var n1, n2 atomic.Uint64 // round-robin over subjects, shared by goroutines
	rr := redis_rate.NewLimiter(plain)
	peer := contender{"redis_rate Allow", func(ctx context.Context) error {
		res, err := rr.Allow(ctx, keysRR[n1.Add(1)%64], redis_rate.PerSecond(perSecond))
		if err == nil && res.Allowed == 0 {
			err = fmt.Errorf("redis_rate denied")
		}
		return err
	}}
	sel := &abi.RateSelectRequest{Route: "/v1/items", Method: "GET", PrincipalTier: "user", APIKeyPlan: "pro", ClientIPClass: "public"}
	ours := contender{"caphost guest+token bucket", func(ctx context.Context) error {
		i := n2.Add(1) % 64
		if _, err := mod.RateSelect(ctx, sel); err != nil {
			return err
		}
		out := lim.Evaluate(ctx, ratelimit.Request{Policy: "bench", Cost: 1,
			Subject: ratelimit.Subject{policy.DimTenant: subjects[i]}})
		if !out.Allowed() {
			return fmt.Errorf("caphost: %v %v", out.Kind(), out.Reason())
		}
		return nil
	}}
	// The limiter alone (no guest call): the part host/ratelimit and
	// runtime/programs own, against the same peer.
	var n3 atomic.Uint64
	limiterOnly := contender{"caphost token bucket (no guest)", func(ctx context.Context) error {
		out := lim.Evaluate(ctx, ratelimit.Request{Policy: "bench", Cost: 1,
			Subject: ratelimit.Subject{policy.DimTenant: subjects[n3.Add(1)%64]}})
		if !out.Allowed() {
			return fmt.Errorf("caphost: %v %v", out.Kind(), out.Reason())
		}
		return nil
	}}
	for _, g := range []int{1, 32} {
		row(fmt.Sprintf("rate decision, %d gor.", g), compare(ctx, []contender{peer, ours}, g, dur, slice, rounds))
	}
	for _, g := range []int{1, 32} {
		row(fmt.Sprintf("rate, no guest, %d gor.", g), compare(ctx, []contender{peer, limiterOnly}, g, dur, slice, rounds))
	}
	fmt.Println("rate rows: left column = go-redis/redis_rate v10 Allow, right = caphost (target ≥ 1.0×); \"no guest\" rows time the limiter alone.")
	return nil
}

// loadRatePolicyGuest builds guests/rate-policy for wasip1 and loads it in a
// native engine.
func loadRatePolicyGuest(ctx context.Context) (*plugins.Module, func(), error) {
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
	eng, err := plugins.NewEngine(plugins.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, err
	}
	mod, err := eng.Load(ctx, "rate-tiers", wasm, plugins.Limits{PoolSize: 32})
	if err != nil {
		return nil, nil, err
	}
	return mod, func() { _ = eng.Close(context.Background()); _ = os.RemoveAll(dir) }, nil
}
