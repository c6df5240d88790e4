package programs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/programs/internal/rateref"
)

// TestConcurrencyLimiterMatchesReference drives a seeded random mix of
// acquire/renew/release by a small owner pool (with expiries, gaps and
// clock steps back) through the Lua programs and rateref, comparing every
// decision and the stored owner set.
func TestConcurrencyLimiterMatchesReference(t *testing.T) {
	s := redistest.StartStandalone(t)
	client := standaloneClient(t, s)
	admin := s.Admin()
	cat := mustCatalog(t)
	ctx := context.Background()
	require.NoError(t, Deploy(ctx, cat, admin))
	for i, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e, err := NewExecutor(cat, mode, client)
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(uint64(i)+11, 3))
			key, _ := rateKeys(t, testBuilder(t), "permits-"+string(mode), "concurrency")
			const maxPermits, maxStep = 3, 200
			var ref rateref.ConcurrencyState
			counts := map[string]int{}
			undo := int64(0)
			for n := range 200 {
				if r.IntN(10) >= 7 {
					time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
				}
				shift := int64(0)
				switch {
				case undo != 0:
					shift, undo = -undo, 0
				case r.IntN(15) == 0:
					shift = 10 + r.Int64N(150)
					if r.IntN(3) == 0 {
						shift = 300 + r.Int64N(100)
						undo = shift
					}
				}
				if shift != 0 && ref.Present {
					ref.Observed += shift
					score, err := admin.ZScore(ctx, key.Redis(), "!v1:r1").Result()
					require.NoError(t, err)
					require.NoError(t, admin.ZAdd(ctx, key.Redis(), redisZ(score-float64(shift), "!v1:r1")).Err())
				}
				owner := "o" + strconv.Itoa(r.IntN(5))
				ttl := 20 + r.Int64N(100)
				var (
					name      string
					got, want rateref.PermitDecision
				)
				switch op := r.IntN(10); {
				case op < 5:
					res, err := e.RateConcurrencyAcquire(ctx, key, PermitAcquireRequest{
						PolicyRevision: "r1", MaxPermits: maxPermits, Owner: []byte(owner), TTL: time.Duration(ttl) * time.Millisecond,
						MaxClockStep: maxStep * time.Millisecond, CleanupGrace: 10 * time.Second,
					})
					require.NoError(t, err)
					name = res.Status.String()
					got = rateref.PermitDecision{Status: rateref.Status(res.Status), InUse: res.InUse, MaxPermits: res.MaxPermits, ExpiresAtMillis: res.ExpiresAtMillis, RetryAfterMillis: res.RetryAfter.Milliseconds()}
					want, err = rateref.ConcurrencyAcquire(&ref, res.ServerNowMillis, maxPermits, owner, ttl, maxStep)
					require.NoError(t, err)
				case op < 7:
					res, err := e.RateConcurrencyRenew(ctx, key, PermitRenewRequest{
						PolicyRevision: "r1", Owner: []byte(owner), TTL: time.Duration(ttl) * time.Millisecond,
						MaxClockStep: maxStep * time.Millisecond, CleanupGrace: 10 * time.Second,
					})
					require.NoError(t, err)
					name = "renew " + res.Status.String()
					got = rateref.PermitDecision{Status: rateref.Status(res.Status), InUse: res.InUse, ExpiresAtMillis: res.ExpiresAtMillis}
					want, err = rateref.ConcurrencyRenew(&ref, res.ServerNowMillis, owner, ttl, maxStep)
					require.NoError(t, err)
				default:
					res, err := e.RateConcurrencyRelease(ctx, key, PermitReleaseRequest{PolicyRevision: "r1", Owner: []byte(owner), MaxClockStep: maxStep * time.Millisecond})
					require.NoError(t, err)
					name = "release " + res.Status.String()
					got = rateref.PermitDecision{Status: rateref.Status(res.Status), InUse: res.InUse}
					want, err = rateref.ConcurrencyRelease(&ref, res.ServerNowMillis, owner, maxStep)
					require.NoError(t, err)
				}
				counts[name]++
				require.Equal(t, want, got, "step %d (%s, owner %s)", n, name, owner)
				zs, err := admin.ZRangeWithScores(ctx, key.Redis(), 0, -1).Result()
				require.NoError(t, err)
				stored := map[string]int64{}
				for _, z := range zs {
					stored[fmt.Sprint(z.Member)] = int64(z.Score)
				}
				wantStored := map[string]int64{}
				if ref.Present {
					wantStored["!v1:r1"] = -ref.Observed
					for o, exp := range ref.Owners {
						wantStored[o] = exp
					}
				}
				require.Equal(t, wantStored, stored, "step %d state", n)
			}
			for _, s := range []string{"ACQUIRED", "ALREADY_HELD", "CONTENDED", "renew RENEWED", "renew NOT_HELD", "release RELEASED", "release NOT_HELD"} {
				assert.Positive(t, counts[s], "stream never produced %s", s)
			}
			assert.Positive(t, counts["CLOCK_UNSAFE"]+counts["renew CLOCK_UNSAFE"]+counts["release CLOCK_UNSAFE"], "stream never stepped the clock back unsafely")
			t.Logf("statuses: %v", counts)
		})
	}
}

// TestConcurrencyLimiterExactAdmission: many goroutines with distinct
// owners race for 10 permits; exactly 10 are granted.
func TestConcurrencyLimiterExactAdmission(t *testing.T) {
	s := redistest.StartStandalone(t)
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, standaloneClient(t, s))
	require.NoError(t, err)
	key, _ := rateKeys(t, testBuilder(t), "permits-race", "concurrency")
	const workers, perWorker, permits = 8, 25, 10
	var granted, contended atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				res, err := e.RateConcurrencyAcquire(context.Background(), key, PermitAcquireRequest{
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
