package programs

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs/internal/rateref"
)

// TestConcurrencyLimiterMatchesReference drives acquire/renew/release by a
// small owner pool through the Lua programs and rateref, comparing every
// decision and the stored owner set: first a scripted sequence that reaches
// every status whatever the machine's speed (its permits live for a
// minute), then a seeded random mix (with expiries, gaps and clock steps
// back) whose mix of statuses depends on how fast the steps run.
func TestConcurrencyLimiterMatchesReference(t *testing.T) {
	s := redistest.StartStandalone(t)
	client := standaloneClient(t, s)
	admin := s.Admin()
	cat := mustCatalog(t)
	ctx := context.Background()
	require.NoError(t, Deploy(ctx, cat, admin))
	for i, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		// v2 and v3 keep v1's state: one reference for all. "mixed" runs
		// each call through v1, v2, v3 or v3 batched (drawn from its own
		// stream, so the operations are the same as the others'), as the
		// hosts of a rolling upgrade do on one key.
		for _, version := range append(slices.Clone(permitVersionNames), "mixed") {
			t.Run(string(mode)+"/"+version, func(t *testing.T) {
				t.Parallel()
				e, err := NewExecutor(cat, mode, client)
				require.NoError(t, err)
				progs := permitVersions(e)
				pick := rand.New(rand.NewPCG(uint64(i)+11, 5))
				programs := func() permitPrograms {
					if version == "mixed" {
						return progs[permitVersionNames[pick.IntN(len(permitVersionNames))]]
					}
					return progs[version]
				}
				// v3's renew and release do not prune: an owner expired at or
				// before the latest effective time (which only grows here:
				// every step back beyond maxStep is CLOCK_UNSAFE and undone)
				// may stay in the set until the next acquire, decided on as
				// absent exactly as v1/v2's pruned one.
				lenient := version == "v3" || version == "v3-batched" || version == "mixed"
				var maxEff int64
				r := rand.New(rand.NewPCG(uint64(i)+11, 3))
				key, _ := rateKeys(t, testBuilder(t), "permits-"+string(mode)+"-"+version, "concurrency")
				const maxPermits, maxStep = 3, 200
				var ref rateref.ConcurrencyState
				counts := map[string]int{}
				n := 0
				// shiftClock moves the stored observation `shift` ms ahead of
				// TIME: a server clock stepping back by that much.
				shiftClock := func(shift int64) {
					t.Helper()
					if shift == 0 || !ref.Present {
						return
					}
					ref.Observed += shift
					score, err := admin.ZScore(ctx, key.Redis(), "!v1:r1").Result()
					require.NoError(t, err)
					require.NoError(t, admin.ZAdd(ctx, key.Redis(), redisZ(score-float64(shift), "!v1:r1")).Err())
				}
				// step runs one operation through both and compares them; it
				// returns the status name it counted.
				step := func(op, owner string, ttl int64) string {
					t.Helper()
					var (
						name      string
						got, want rateref.PermitDecision
						now       int64
					)
					present, observed := ref.Present, ref.Observed
					p := programs()
					switch op {
					case "acquire":
						res, err := p.acquire(ctx, key, PermitAcquireRequest{
							PolicyRevision: "r1", MaxPermits: maxPermits, Owner: []byte(owner), TTL: time.Duration(ttl) * time.Millisecond,
							MaxClockStep: maxStep * time.Millisecond, CleanupGrace: 10 * time.Second,
						})
						require.NoError(t, err)
						name, now = res.Status.String(), res.ServerNowMillis
						got = rateref.PermitDecision{Status: rateref.Status(res.Status), InUse: res.InUse, MaxPermits: res.MaxPermits, ExpiresAtMillis: res.ExpiresAtMillis, RetryAfterMillis: res.RetryAfter.Milliseconds()}
						want, err = rateref.ConcurrencyAcquire(&ref, res.ServerNowMillis, maxPermits, owner, ttl, maxStep)
						require.NoError(t, err)
					case "renew":
						res, err := p.renew(ctx, key, PermitRenewRequest{
							PolicyRevision: "r1", Owner: []byte(owner), TTL: time.Duration(ttl) * time.Millisecond,
							MaxClockStep: maxStep * time.Millisecond, CleanupGrace: 10 * time.Second,
						})
						require.NoError(t, err)
						name, now = "renew "+res.Status.String(), res.ServerNowMillis
						got = rateref.PermitDecision{Status: rateref.Status(res.Status), InUse: res.InUse, ExpiresAtMillis: res.ExpiresAtMillis}
						want, err = rateref.ConcurrencyRenew(&ref, res.ServerNowMillis, owner, ttl, maxStep)
						require.NoError(t, err)
					default:
						res, err := p.release(ctx, key, PermitReleaseRequest{PolicyRevision: "r1", Owner: []byte(owner), MaxClockStep: maxStep * time.Millisecond})
						require.NoError(t, err)
						name, now = "release "+res.Status.String(), res.ServerNowMillis
						got = rateref.PermitDecision{Status: rateref.Status(res.Status), InUse: res.InUse}
						want, err = rateref.ConcurrencyRelease(&ref, res.ServerNowMillis, owner, maxStep)
						require.NoError(t, err)
					}
					counts[name]++
					require.Equal(t, want, got, "step %d (%s, owner %s)", n, name, owner)
					if !strings.HasSuffix(name, "CLOCK_UNSAFE") {
						eff := now
						if present && observed > now {
							eff = observed
						}
						maxEff = max(maxEff, eff)
					}
					zs, err := admin.ZRangeWithScores(ctx, key.Redis(), 0, -1).Result()
					require.NoError(t, err)
					stored := map[string]int64{}
					for _, z := range zs {
						m, score := fmt.Sprint(z.Member), int64(z.Score)
						if lenient && score > 0 && score <= maxEff {
							continue // expired, left by v3 for the next acquire
						}
						stored[m] = score
					}
					wantStored := map[string]int64{}
					if ref.Present {
						wantStored["!v1:r1"] = -ref.Observed
						for o, exp := range ref.Owners {
							wantStored[o] = exp
						}
					}
					require.Equal(t, wantStored, stored, "step %d state", n)
					n++
					return name
				}

				// Scripted: a minute outlives every step, so each status below
				// is certain; so is the clock step back, an hour beyond maxStep
				// however long a step takes, undone after.
				const minute, hour = 60_000, 3_600_000
				for _, sc := range []struct {
					op, owner string
					ttl       int64
					shift     int64 // applied before the step
					want      string
				}{
					{"acquire", "o0", minute, 0, "ACQUIRED"},
					{"acquire", "o1", minute, 0, "ACQUIRED"},
					{"acquire", "o2", minute, 0, "ACQUIRED"},
					{"acquire", "o3", minute, 0, "CONTENDED"},
					{"acquire", "o0", minute, 0, "ALREADY_HELD"},
					{"renew", "o0", minute, 0, "renew RENEWED"},
					{"release", "o1", 0, 0, "release RELEASED"},
					{"release", "o1", 0, 0, "release NOT_HELD"},
					{"renew", "o1", minute, 0, "renew NOT_HELD"},
					{"acquire", "o3", minute, hour, "CLOCK_UNSAFE"},
					{"renew", "o0", minute, 0, "renew CLOCK_UNSAFE"},
					{"release", "o0", 0, 0, "release CLOCK_UNSAFE"},
					{"release", "o0", 0, -hour, "release RELEASED"},
					{"release", "o2", 0, 0, "release RELEASED"},
				} {
					shiftClock(sc.shift)
					require.Equal(t, sc.want, step(sc.op, sc.owner, sc.ttl), "scripted step %d", n)
				}
				scripted := maps.Clone(counts)

				undo := int64(0)
				for range 200 {
					if r.IntN(10) >= 7 {
						time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
					}
					shiftClock(clockStep(r, 15, &undo))
					owner := "o" + strconv.Itoa(r.IntN(5))
					ttl := 20 + r.Int64N(100)
					switch op := r.IntN(10); {
					case op < 5:
						step("acquire", owner, ttl)
					case op < 7:
						step("renew", owner, ttl)
					default:
						step("release", owner, 0)
					}
				}
				for _, s := range []string{"ACQUIRED", "ALREADY_HELD", "CONTENDED", "renew RENEWED", "renew NOT_HELD", "release RELEASED", "release NOT_HELD", "CLOCK_UNSAFE"} {
					assert.Positive(t, counts[s], "never compared %s", s)
				}
				t.Logf("statuses: scripted %v, all %v", scripted, counts)
			})
		}
	}
}

// clockStep picks the next simulated server clock step back, in ms, for
// the random streams: one step in oneIn moves 10..160 ms (within the max
// clock step of 200 ms: clamped), a third of those 60 s (beyond it:
// CLOCK_UNSAFE however long the next call takes to start; a step just past
// the max step would be caught up by TIME on a slow machine), which the
// following step undoes (*undo carries it).
func clockStep(r *rand.Rand, oneIn int, undo *int64) int64 {
	switch {
	case *undo != 0:
		shift := -*undo
		*undo = 0
		return shift
	case r.IntN(oneIn) == 0:
		shift := 10 + r.Int64N(150)
		if r.IntN(3) == 0 {
			shift = 60_000 + r.Int64N(100)
			*undo = shift
		}
		return shift
	}
	return 0
}

// permitPrograms is one version's acquire, renew and release facades.
type permitPrograms struct {
	acquire func(context.Context, keys.Key, PermitAcquireRequest) (PermitAcquireResult, error)
	renew   func(context.Context, keys.Key, PermitRenewRequest) (PermitRenewResult, error)
	release func(context.Context, keys.Key, PermitReleaseRequest) (PermitReleaseResult, error)
}

// permitVersions returns e's concurrency facades by program version;
// "v3-batched" sends v3 through a Batcher of e (what the limiter does).
func permitVersions(e *Executor) map[string]permitPrograms {
	b := e.NewBatcher(2, 64)
	return map[string]permitPrograms{
		"v1":         {e.RateConcurrencyAcquire, e.RateConcurrencyRenew, e.RateConcurrencyRelease},
		"v2":         {e.RateConcurrencyAcquireV2, e.RateConcurrencyRenewV2, e.RateConcurrencyReleaseV2},
		"v3":         {e.RateConcurrencyAcquireV3, e.RateConcurrencyRenewV3, e.RateConcurrencyReleaseV3},
		"v3-batched": {b.RateConcurrencyAcquireV3, b.RateConcurrencyRenewV3, b.RateConcurrencyReleaseV3},
	}
}

// permitVersionNames are permitVersions' keys in a fixed order.
var permitVersionNames = []string{"v1", "v2", "v3", "v3-batched"}

// TestConcurrencyLimiterExactAdmission: many goroutines with distinct
// owners, a quarter each through rate-concurrency-acquire-v1, -v2, -v3 and
// -v3 through a Batcher on the same key, race for 10 permits; exactly 10
// are granted.
func TestConcurrencyLimiterExactAdmission(t *testing.T) {
	s := redistest.StartStandalone(t)
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, standaloneClient(t, s))
	require.NoError(t, err)
	key, _ := rateKeys(t, testBuilder(t), "permits-race", "concurrency")
	versions := permitVersions(e)
	const workers, perWorker, permits = 12, 25, 10
	var granted, contended atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		// A quarter of the workers run each version on the same key, as
		// the parts of a fleet do during a rolling upgrade: they share one
		// set. The batched ones share one Batcher, so their acquires queue
		// and leave in pipelines.
		acquire := versions[permitVersionNames[w%len(permitVersionNames)]].acquire
		go func() {
			defer wg.Done()
			for i := range perWorker {
				res, err := acquire(context.Background(), key, PermitAcquireRequest{
					PolicyRevision: "r1", MaxPermits: permits, Owner: fmt.Appendf(nil, "w%d-%d", w, i),
					TTL: time.Hour, MaxClockStep: time.Second, CleanupGrace: time.Second,
				})
				if err != nil {
					errs <- err
					return
				}
				switch res.Status {
				case PermitAcquired:
					granted.Add(1)
				case PermitContended:
					contended.Add(1)
				default:
					errs <- fmt.Errorf("unexpected %s", res.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, int64(permits), granted.Load())
	assert.Equal(t, int64(workers*perWorker-permits), contended.Load())
}
