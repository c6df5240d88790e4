package programs

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// BenchmarkCompareAndDelete compares the typed facade (both modes) with a
// bare go-redis EVALSHA of the same script on one private server, so the
// facade's own overhead (argument marshalling, reply validation, typed
// decode) is visible as the difference.
func BenchmarkCompareAndDelete(b *testing.B) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	cat := mustCatalog(b)
	client := standaloneClient(b, s)
	k := vectorKeys(b, testBuilder(b), "bench", 1)[0]
	p, _ := cat.Program("compare-and-delete-v1")
	require.NoError(b, LoadScripts(ctx, cat, s.Admin()))
	require.NoError(b, Deploy(ctx, cat, s.Admin()))
	owner := []byte("owner-token-0123456789")

	b.Run("bare-evalsha", func(b *testing.B) {
		wire := []string{k.Redis()}
		b.ReportAllocs()
		for b.Loop() {
			if err := client.EvalSha(ctx, p.SHA1(), wire, owner).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(b, err)
		b.Run(string(mode), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := e.CompareAndDelete(ctx, k, owner)
				if err != nil || r.Status != CompareAndDeleteAbsent {
					b.Fatal(r.Status, err)
				}
			}
		})
	}
}

// BenchmarkCachePut runs cache-put-v2 in each condition on one private
// server, a 1 KiB envelope, both modes, and reports the server's own time
// per call (INFO commandstats usec per EVALSHA or FCALL, reset before each
// case) beside the client-side ns/op.
func BenchmarkCachePut(b *testing.B) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	cat := mustCatalog(b)
	require.NoError(b, LoadScripts(ctx, cat, s.Admin()))
	require.NoError(b, Deploy(ctx, cat, s.Admin()))
	payload := strings.Repeat("p", 1024)
	f := shardedEntry(b, testBuilder(b), "bench-put")
	gen := []byte("bench-generation-0001")
	require.NoError(b, s.Admin().Set(ctx, f.anchor().Redis(), gen, 0).Err())
	entry := f.entry(b, gen)
	envA, envB := revEnvelope(b, 1, payload), revEnvelope(b, 2, strings.Repeat("q", 1024))
	tomb := randomTombstone()
	type step struct {
		value []byte
		cond  CacheCondition
		obs   CacheObservation
	}
	cases := []struct {
		name  string
		want  CachePutStatus
		setup []byte // the entry before the first call
		next  func(i int) step
	}{
		{"any", CachePutStored, nil, func(int) step { return step{envA, CacheConditionAny, NoObservation()} }},
		{"invalidate-tombstone", CachePutStored, envA, func(int) step { return step{tomb, CacheConditionAny, NoObservation()} }},
		{"newer-stored", CachePutStored, nil, func(i int) step {
			return step{revEnvelope(b, uint64(i+1), payload), CacheConditionNewerSourceRevision, NoObservation()}
		}},
		// Equal length: the full GET for sameValue runs (the worst case).
		{"newer-not-newer", CachePutNotNewer, revEnvelope(b, 1<<40, payload), func(int) step {
			return step{envA, CacheConditionNewerSourceRevision, NoObservation()}
		}},
		{"observed-value-stored", CachePutStored, envA, func(i int) step {
			if i%2 == 0 {
				return step{envB, CacheConditionAny, ObservedValue(int64(len(envA)), envA)}
			}
			return step{envA, CacheConditionAny, ObservedValue(int64(len(envB)), envB)}
		}},
		{"observed-absent-changed", CachePutObservationChanged, envB, func(int) step {
			return step{envA, CacheConditionNewerSourceRevision, ObservedAbsent()}
		}},
	}
	client := standaloneClient(b, s)
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(b, err)
		command := "evalsha"
		if mode == policy.ProgramsFunctionsProvisioned {
			command = "fcall"
		}
		for _, c := range cases {
			b.Run(string(mode)+"/"+c.name, func(b *testing.B) {
				require.NoError(b, s.Admin().Del(ctx, entry.Redis()).Err())
				if c.setup != nil {
					require.NoError(b, s.Admin().Set(ctx, entry.Redis(), c.setup, time.Hour).Err())
				}
				require.NoError(b, s.Admin().ConfigResetStat(ctx).Err())
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					st := c.next(i)
					i++
					r, err := e.CachePut(ctx, f.anchor(), entry, CachePutRequest{Captured: gen, Value: st.value,
						TTL: time.Hour, Condition: st.cond, Observation: st.obs})
					if err != nil || r.Status != c.want {
						b.Fatal(r.Status, err)
					}
				}
				b.ReportMetric(s.MicrosPerCall(b, command), "server-µs/op")
			})
		}
	}
}

// benchCase is one path of a program benchmark: reset prepares the state
// before the timer starts, call runs the i-th call.
type benchCase struct {
	name     string
	readOnly bool // FCALL_RO in functions-provisioned mode
	reset    func(b *testing.B)
	call     func(i int) error
}

// runBenchCases runs every case under mode on s and reports the server's
// time per call (INFO commandstats usec per EVALSHA, FCALL or FCALL_RO,
// reset after the case's own set-up) beside the client-side ns/op.
func runBenchCases(b *testing.B, s *redistest.Server, mode policy.ProgramMode, cases []benchCase) {
	ctx := context.Background()
	for _, c := range cases {
		command := "evalsha"
		if mode == policy.ProgramsFunctionsProvisioned {
			command = "fcall"
			if c.readOnly {
				command = "fcall_ro"
			}
		}
		b.Run(string(mode)+"/"+c.name, func(b *testing.B) {
			c.reset(b)
			require.NoError(b, s.Admin().ConfigResetStat(ctx).Err())
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := c.call(i); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(s.MicrosPerCall(b, command), "server-µs/op")
		})
	}
}

// BenchmarkLease runs each lease program's common path on one private
// server, both modes. "acquire+release" alternates the two writes on a
// free lease; the other cases start from a held lease.
func BenchmarkLease(b *testing.B) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	cat := mustCatalog(b)
	require.NoError(b, LoadScripts(ctx, cat, s.Admin()))
	require.NoError(b, Deploy(ctx, cat, s.Admin()))
	k := leaseKey(b, testBuilder(b), "bench-lease")
	held := LeaseAttempt{Owner: []byte("owner-token-0123456789abcdef"), OperationID: []byte("operation-0001")}
	other := LeaseAttempt{Owner: []byte("owner-token-fedcba9876543210"), OperationID: []byte("operation-0002")}
	client := standaloneClient(b, s)
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(b, err)
		reset := func(hold bool) func(b *testing.B) {
			return func(b *testing.B) {
				require.NoError(b, s.Admin().Del(ctx, k.Redis()).Err())
				if hold {
					_, err := e.LeaseAcquire(ctx, k, held, time.Hour)
					require.NoError(b, err)
				}
			}
		}
		runBenchCases(b, s, mode, []benchCase{
			{"acquire+release", false, reset(false), func(i int) error {
				if i%2 == 0 {
					_, err := e.LeaseAcquire(ctx, k, held, time.Minute)
					return err
				}
				_, err := e.LeaseRelease(ctx, k, held)
				return err
			}},
			{"acquire+release-v2", false, reset(false), func(i int) error {
				if i%2 == 0 {
					_, err := e.LeaseAcquireV2(ctx, k, held, time.Minute)
					return err
				}
				_, err := e.LeaseReleaseV2(ctx, k, held)
				return err
			}},
			{"acquire+release-v3", false, reset(false), func(i int) error {
				if i%2 == 0 {
					_, err := e.LeaseAcquireV3(ctx, k, held, time.Minute)
					return err
				}
				_, err := e.LeaseReleaseV3(ctx, k, held)
				return err
			}},
			{"replay", false, reset(true), func(int) error { _, err := e.LeaseAcquire(ctx, k, held, time.Minute); return err }},
			{"replay-v2", false, reset(true), func(int) error { _, err := e.LeaseAcquireV2(ctx, k, held, time.Minute); return err }},
			{"replay-v3", false, reset(true), func(int) error { _, err := e.LeaseAcquireV3(ctx, k, held, time.Minute); return err }},
			{"contended", false, reset(true), func(int) error { _, err := e.LeaseAcquire(ctx, k, other, time.Minute); return err }},
			{"contended-v2", false, reset(true), func(int) error { _, err := e.LeaseAcquireV2(ctx, k, other, time.Minute); return err }},
			{"contended-v3", false, reset(true), func(int) error { _, err := e.LeaseAcquireV3(ctx, k, other, time.Minute); return err }},
			{"renew", false, reset(true), func(int) error { _, err := e.LeaseRenew(ctx, k, held, time.Minute); return err }},
			{"inspect", true, reset(true), func(int) error { _, err := e.LeaseInspect(ctx, k, held); return err }},
		})
	}
}

// BenchmarkFencedLease runs the fenced programs' common paths on one
// private server, both modes. "acquire+release" alternates a new token
// (the counter's increment) and its release; the other cases start from
// a held lease.
func BenchmarkFencedLease(b *testing.B) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	cat := mustCatalog(b)
	require.NoError(b, LoadScripts(ctx, cat, s.Admin()))
	require.NoError(b, Deploy(ctx, cat, s.Admin()))
	ks := fenceKeys(b, testBuilder(b), "bench-fenced")
	reg := FenceRegistration{Epoch: 1 << 40, Digest: "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"}
	at := LeaseAttempt{Owner: []byte("owner-token-0123456789abcdef"), OperationID: []byte("operation-0001")}
	acquire := FencedLeaseAcquireRequest{Registration: reg, Attempt: at, TTL: time.Minute, HardFailThreshold: MaxFenceInteger}
	client := standaloneClient(b, s)
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(b, err)
		var hold FencedLeaseHold
		reset := func(held bool) func(b *testing.B) {
			return func(b *testing.B) {
				require.NoError(b, s.Admin().Del(ctx, ks[0].Redis(), ks[1].Redis()).Err())
				_, err := e.FenceCounterProvision(ctx, ks[1], reg, 1<<40)
				require.NoError(b, err)
				if held {
					r, err := e.FencedLeaseAcquire(ctx, ks[0], ks[1], acquire)
					require.NoError(b, err)
					hold = FencedLeaseHold{Registration: reg, Owner: at.Owner, Counter: r.Token.Counter}
				}
			}
		}
		runBenchCases(b, s, mode, []benchCase{
			{"acquire+release", false, reset(false), func(i int) error {
				if i%2 == 0 {
					r, err := e.FencedLeaseAcquire(ctx, ks[0], ks[1], acquire)
					hold = FencedLeaseHold{Registration: reg, Owner: at.Owner, Counter: r.Token.Counter}
					return err
				}
				_, err := e.FencedLeaseRelease(ctx, ks[0], ks[1], hold)
				return err
			}},
			{"replay", false, reset(true), func(int) error { _, err := e.FencedLeaseAcquire(ctx, ks[0], ks[1], acquire); return err }},
			{"renew", false, reset(true), func(int) error { _, err := e.FencedLeaseRenew(ctx, ks[0], ks[1], hold, time.Minute); return err }},
			{"inspect", true, reset(true), func(int) error { _, err := e.FencedLeaseInspect(ctx, ks[0], ks[1], reg, at); return err }},
		})
	}
}

// BenchmarkIdempotency runs the idempotency programs' common paths on one
// private server, both modes. "request" is one idempotent request's three
// writes in turn on a fresh record (claim ACQUIRED, start, complete with a
// 1 KiB response), so its server-µs/op is the mean of the three; the other
// cases repeat one call on a prepared record.
func BenchmarkIdempotency(b *testing.B) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	cat := mustCatalog(b)
	require.NoError(b, LoadScripts(ctx, cat, s.Admin()))
	require.NoError(b, Deploy(ctx, cat, s.Admin()))
	builder := testBuilder(b)
	client := standaloneClient(b, s)
	body := []byte(strings.Repeat("r", 1024))
	claim := testClaim("owner-token-0123456789abcdef", "claim-operation-0001", time.Minute)
	other := testClaim("owner-token-fedcba9876543210", "claim-operation-0002", time.Minute)
	complete := func(o IdemOwner) IdemCompleteRequest {
		return IdemCompleteRequest{Owner: o, OperationID: []byte("complete-operation-0001"),
			Response: IdemResponse{Version: 1, Digest: testDigest, Payload: body}, ReplayTTL: time.Minute}
	}
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(b, err)
		k := idemKey(b, builder, "bench-idem-"+string(mode))
		owner := IdemOwner{Owner: claim.Attempt.Owner, Attempt: 1}
		reset := func(state IdemState) func(b *testing.B) {
			return func(b *testing.B) {
				require.NoError(b, s.Admin().Del(ctx, k.Redis()).Err())
				_, err := e.IdempotencyClaim(ctx, k, claim)
				require.NoError(b, err)
				if state >= IdemStateExecuting {
					_, err = e.IdempotencyStart(ctx, k, owner, []byte("start-operation-0001"), time.Minute)
					require.NoError(b, err)
				}
				if state == IdemStateCompleted {
					_, err = e.IdempotencyComplete(ctx, k, complete(owner))
					require.NoError(b, err)
				}
			}
		}
		var fresh keys.Key
		runBenchCases(b, s, mode, []benchCase{
			{"request", false, func(*testing.B) {}, func(i int) error {
				var err error
				switch i % 3 {
				case 0:
					fresh = idemKey(b, builder, fmt.Sprintf("bench-request-%s-%d", mode, i))
					_, err = e.IdempotencyClaim(ctx, fresh, claim)
				case 1:
					_, err = e.IdempotencyStart(ctx, fresh, owner, []byte("start-operation-0001"), time.Minute)
				default:
					_, err = e.IdempotencyComplete(ctx, fresh, complete(owner))
				}
				return err
			}},
			{"completed-replay", false, reset(IdemStateCompleted), func(int) error { _, err := e.IdempotencyClaim(ctx, k, other); return err }},
			{"in-progress", false, reset(IdemStateExecuting), func(int) error { _, err := e.IdempotencyClaim(ctx, k, other); return err }},
			{"renew", false, reset(IdemStateExecuting), func(i int) error {
				_, err := e.IdempotencyRenew(ctx, k, owner, []byte(fmt.Sprintf("renew-%d", i)), time.Minute)
				return err
			}},
			{"inspect", true, reset(IdemStateExecuting), func(int) error { _, err := e.IdempotencyInspect(ctx, k, inspectOf(claim)); return err }},
		})
	}
}

// BenchmarkRateServerTime reports the server's time per rate decision
// (INFO commandstats usec per EVALSHA or FCALL) of every rate program an
// Executor facade runs, v1 beside its lean v2, each admitting (limits far
// above the load, dedup off: the limiter's default), on one key, both
// modes; and, as the floor a plain client pays for a fixed window, INCRBY +
// PEXPIRE pipelined (the two commands' usec per call summed). Run with
// -benchtime 20000x or more: usec_per_call is an average.
func BenchmarkRateServerTime(b *testing.B) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	cat := mustCatalog(b)
	require.NoError(b, LoadScripts(ctx, cat, s.Admin()))
	require.NoError(b, Deploy(ctx, cat, s.Admin()))
	client := standaloneClient(b, s)
	bld := testBuilder(b)
	plain := rateBenchKey(b, bld, "plain", "window", 1)

	b.Run("plain/incrby+pexpire", func(b *testing.B) {
		require.NoError(b, s.Admin().ConfigResetStat(ctx).Err())
		b.ReportAllocs()
		for b.Loop() {
			if _, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.IncrBy(ctx, plain.Redis(), 1)
				p.PExpire(ctx, plain.Redis(), time.Minute)
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(s.MicrosPerCall(b, "incrby")+s.MicrosPerCall(b, "pexpire"), "server-µs/op")
	})

	const big = 1_000_000_000
	opts := RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second, DedupMaxEntries: 1, EvaluationID: []byte("-")}
	lean := RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second}
	month := 30 * 24 * time.Hour
	tb := TokenBucketRequest{CapacityScaled: big * RateScale / 1000, RefillScaled: big * RateScale / 1000, RefillPeriod: time.Second, CostScaled: RateScale}
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(b, err)
		key := func(name, kind string, kv int) keys.Key { return rateBenchKey(b, bld, string(mode)+name, kind, kv) }
		fw1, fw2, fw3 := key("fw1", "window", 1), key("fw2", "window", 2), key("fw3", "window", 2)
		sc1, sc2 := key("sc1", "window", 1), key("sc2", "window", 2)
		gc1, gc2 := key("gc1", "bucket", 1), key("gc2", "bucket", 2)
		tb1, tb2 := key("tb1", "bucket", 1), key("tb2", "bucket", 2)
		sl1, sl2, sl3 := key("sl1", "log", 1), key("sl2", "log", 1), key("sl3", "log", 2)
		cc1, cc2, cc3 := key("cc1", "concurrency", 1), key("cc2", "concurrency", 1), key("cc3", "concurrency", 1)
		logReq := SlidingLogRequest{Limit: 10_000, Window: 100 * time.Millisecond}
		sl1req, sl2req := logReq, logReq
		sl1req.RateOptions, sl2req.RateOptions = opts, lean
		dd := key("dedup", "window", 1) // v1 takes it; dedup off, never touched
		tb1req, tb2req := tb, tb
		tb1req.RateOptions, tb2req.RateOptions = opts, lean
		nop := func(*testing.B) {}
		runBenchCases(b, s, mode, []benchCase{
			{"fixed-window-v1", false, nop, func(int) error {
				return decide(e.RateFixedWindow(ctx, fw1, dd, FixedWindowRequest{Limit: big, Cost: 1, Window: month, RateOptions: opts}))
			}},
			{"fixed-window-v2", false, nop, func(int) error {
				return decide(e.RateFixedWindowV2(ctx, fw2, keys.Key{}, FixedWindowRequest{Limit: big, Cost: 1, Window: month, RateOptions: lean}))
			}},
			// v3 with v2's 30-day window (the same work) and with a year.
			{"fixed-window-v3", false, nop, func(int) error {
				return decide(e.RateFixedWindowV3(ctx, fw3, keys.Key{}, FixedWindowRequest{Limit: big, Cost: 1, Window: month, RateOptions: lean}))
			}},
			{"fixed-window-v3-year", false, nop, func(int) error {
				return decide(e.RateFixedWindowV3(ctx, fw3, keys.Key{}, FixedWindowRequest{Limit: big, Cost: 1, Window: 365 * 24 * time.Hour, RateOptions: lean}))
			}},
			{"sliding-counter-v1", false, nop, func(int) error {
				return decide(e.RateSlidingCounter(ctx, sc1, dd, SlidingCounterRequest{Limit: big, Cost: 1, Window: month, RateOptions: opts}))
			}},
			{"sliding-counter-v2", false, nop, func(int) error {
				return decide(e.RateSlidingCounterV2(ctx, sc2, keys.Key{}, SlidingCounterRequest{Limit: big, Cost: 1, Window: month, RateOptions: lean}))
			}},
			{"gcra-v1", false, nop, func(int) error {
				return decide(e.RateGCRA(ctx, gc1, dd, GCRARequest{Limit: big, Period: time.Second, Cost: 1, RateOptions: opts}))
			}},
			{"gcra-v2", false, nop, func(int) error {
				return decide(e.RateGCRAV2(ctx, gc2, keys.Key{}, GCRARequest{Limit: big, Period: time.Second, Cost: 1, RateOptions: lean}))
			}},
			{"token-bucket-v1", false, nop, func(int) error { return decide(e.RateTokenBucket(ctx, tb1, dd, tb1req)) }},
			{"token-bucket-v2", false, nop, func(int) error { return decide(e.RateTokenBucketV2(ctx, tb2, keys.Key{}, tb2req)) }},
			// A 100 ms window: the log holds what arrived in the last 100 ms
			// and every admit trims what fell out.
			{"sliding-log-v1", false, nop, func(int) error { return decide(e.RateSlidingLog(ctx, sl1, dd, sl1req)) }},
			{"sliding-log-v2", false, nop, func(int) error { return decide(e.RateSlidingLogV2(ctx, sl2, keys.Key{}, sl2req)) }},
			{"sliding-log-v3", false, nop, func(int) error { return decide(e.RateSlidingLogV3(ctx, sl3, keys.Key{}, sl2req)) }},
			// One owner acquiring and releasing in turn: the time per call.
			{"concurrency-acquire+release-v1", false, nop, func(i int) error {
				return permitTurn(ctx, i, cc1, []byte(benchOwner), 100, e.RateConcurrencyAcquire, e.RateConcurrencyRelease)
			}},
			{"concurrency-acquire+release-v2", false, nop, func(i int) error {
				return permitTurn(ctx, i, cc2, []byte(benchOwner), 100, e.RateConcurrencyAcquireV2, e.RateConcurrencyReleaseV2)
			}},
			{"concurrency-acquire+release-v3", false, nop, func(i int) error {
				return permitTurn(ctx, i, cc3, []byte(benchOwner), 100, e.RateConcurrencyAcquireV3, e.RateConcurrencyReleaseV3)
			}},
		})
	}
}

// decide is a benchmark rate call's error: its own, or a decision other
// than ALLOWED (every bench row admits everything it offers).
func decide(r RateResult, err error) error {
	if err == nil && r.Status != RateAllowed {
		err = fmt.Errorf("status %s", r.Status)
	}
	return err
}

// benchOwner is the one owner of BenchmarkRateServerTime's permit rows.
const benchOwner = "bench-owner-0123456789"

// rateBenchKey is one rate key of kind under key version kv.
func rateBenchKey(b *testing.B, bld *keys.Builder, tag, kind string, kv int) keys.Key {
	ks, err := bld.Group(keys.Spec{Capability: keys.CapRate, Region: "bench-r1", KeyVersion: kv, Parts: [][]byte{[]byte(tag)}}, kind, "dedup")
	require.NoError(b, err)
	return ks[0]
}

// permitTurn acquires (even i) or releases (odd i) owner's permit of a
// set of maxPermits.
func permitTurn(ctx context.Context, i int, k keys.Key, owner []byte, maxPermits int64,
	acquire func(context.Context, keys.Key, PermitAcquireRequest) (PermitAcquireResult, error),
	release func(context.Context, keys.Key, PermitReleaseRequest) (PermitReleaseResult, error)) error {
	if i%2 == 0 {
		r, err := acquire(ctx, k, PermitAcquireRequest{PolicyRevision: "r1", MaxPermits: maxPermits, Owner: owner,
			TTL: time.Minute, MaxClockStep: time.Second, CleanupGrace: time.Second})
		if err == nil && r.Status != PermitAcquired {
			err = fmt.Errorf("acquire: %s", r.Status)
		}
		return err
	}
	r, err := release(ctx, k, PermitReleaseRequest{PolicyRevision: "r1", Owner: owner, MaxClockStep: time.Second})
	if err == nil && r.Status != PermitReleased {
		err = fmt.Errorf("release: %s", r.Status)
	}
	return err
}

// BenchmarkRateServerTimeBusy is BenchmarkRateServerTime's lean rows under
// 32 concurrent callers (b.RunParallel, 16 per GOMAXPROCS on 2 cores): the
// server never idles between calls, as when a fleet shares one Redis, so
// its time per call is the fleet's cost, not the cost of waking a cold
// core (a lone caller's calls measured 1.5-2x as long on an idle machine).
// Each concurrency caller acquires and releases its own permit in turn.
func BenchmarkRateServerTimeBusy(b *testing.B) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	cat := mustCatalog(b)
	require.NoError(b, LoadScripts(ctx, cat, s.Admin()))
	user, pass := s.AdminUser()
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: user, Password: pass,
		DisableIdentity: true, MaxRetries: -1, PoolSize: 64})
	b.Cleanup(func() { _ = client.Close() })
	e, err := NewExecutor(cat, policy.ProgramsEvalshaManaged, client)
	require.NoError(b, err)
	bld := testBuilder(b)
	const big = 1_000_000_000
	lean := RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second}
	logReq := SlidingLogRequest{Limit: 10_000, Window: 100 * time.Millisecond, RateOptions: lean}
	type row struct {
		name string
		call func(k keys.Key, caller, i int) error
		kind string
		kv   int
	}
	permits := func(acquire func(context.Context, keys.Key, PermitAcquireRequest) (PermitAcquireResult, error),
		release func(context.Context, keys.Key, PermitReleaseRequest) (PermitReleaseResult, error)) func(keys.Key, int, int) error {
		return func(k keys.Key, caller, i int) error {
			return permitTurn(ctx, i, k, []byte(fmt.Sprintf("bench-owner-%06d", caller)), 10_000, acquire, release)
		}
	}
	rows := []row{
		{"fixed-window-v2", func(k keys.Key, _, _ int) error {
			return decide(e.RateFixedWindowV2(ctx, k, keys.Key{}, FixedWindowRequest{Limit: big, Cost: 1, Window: 30 * 24 * time.Hour, RateOptions: lean}))
		}, "window", 2},
		{"fixed-window-v3", func(k keys.Key, _, _ int) error {
			return decide(e.RateFixedWindowV3(ctx, k, keys.Key{}, FixedWindowRequest{Limit: big, Cost: 1, Window: 30 * 24 * time.Hour, RateOptions: lean}))
		}, "window", 2},
		{"sliding-log-v2", func(k keys.Key, _, _ int) error { return decide(e.RateSlidingLogV2(ctx, k, keys.Key{}, logReq)) }, "log", 1},
		{"sliding-log-v3", func(k keys.Key, _, _ int) error { return decide(e.RateSlidingLogV3(ctx, k, keys.Key{}, logReq)) }, "log", 2},
		{"concurrency-acquire+release-v2", permits(e.RateConcurrencyAcquireV2, e.RateConcurrencyReleaseV2), "concurrency", 1},
		{"concurrency-acquire+release-v3", permits(e.RateConcurrencyAcquireV3, e.RateConcurrencyReleaseV3), "concurrency", 1},
	}
	// Callers are numbered across runs: a run may end between a caller's
	// acquire and its release, so its permit stays held (until its TTL)
	// and the next run's callers must not reuse its owner.
	var callers atomic.Int64
	for _, r := range rows {
		b.Run(r.name, func(b *testing.B) {
			k := rateBenchKey(b, bld, "busy-"+r.name, r.kind, r.kv)
			require.NoError(b, s.Admin().ConfigResetStat(ctx).Err())
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				caller, i := int(callers.Add(1)), 0
				for pb.Next() {
					if err := r.call(k, caller, i); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			b.ReportMetric(s.MicrosPerCall(b, "evalsha"), "server-µs/op")
		})
	}
}
