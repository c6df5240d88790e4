package programs

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/runtime/keys"
)

// TestTokenBucketPlanArgv: a plan rendered for one cost sends, for any cost
// and evaluation id, exactly the rate-token-bucket-v2 ARGV the golden
// vectors pin (7 entries, or 10 with dedup), and never mutates its shared
// rendering.
func TestTokenBucketPlanArgv(t *testing.T) {
	base := TokenBucketRequest{CapacityScaled: 10 * RateScale, RefillScaled: 2 * RateScale, RefillPeriod: time.Second,
		CostScaled: RateScale, RateOptions: RateOptions{PolicyRevision: "r7", MaxClockStep: 2 * time.Second, CleanupGrace: time.Minute}}
	withDedup := base
	withDedup.DedupTTL, withDedup.DedupMaxEntries = 30*time.Second, 64
	want := func(r TokenBucketRequest, id string) []any {
		a := []any{r.PolicyRevision, "10000000", "2000000", "1000", strconv.FormatInt(r.CostScaled, 10), "2000", "60000"}
		if r.DedupTTL != 0 {
			a = append(a, "30000", "64", id)
		}
		return a
	}
	for name, req := range map[string]TokenBucketRequest{"no dedup": base, "dedup": withDedup} {
		plan := NewTokenBucketPlan(req)
		assert.Equal(t, req.DedupTTL != 0, plan.Dedup(), name)
		shared := append([]any(nil), plan.argv...)
		for _, cost := range []int64{RateScale, 3 * RateScale, 1} {
			for _, id := range []string{"", "eval-1"} {
				r := req
				r.CostScaled = cost
				assert.Equal(t, want(r, id), plan.appendArgv(nil, cost, id), "%s cost %d id %q", name, cost, id)
				// Appending after a prefix leaves the prefix alone.
				got := plan.appendArgv([]any{"evalsha", "sha", 1, "key"}, cost, id)
				assert.Equal(t, append([]any{"evalsha", "sha", 1, "key"}, want(r, id)...), got)
			}
		}
		assert.Equal(t, shared, plan.argv, "%s: shared rendering mutated", name)
		// NewTokenBucketPlan ignores the request's evaluation id.
		req.EvaluationID = []byte("ignored")
		assert.Equal(t, plan.argv, NewTokenBucketPlan(req).argv, name)
	}
}

// TestRatePlanArgv: the window and GCRA plans put the cost where their
// program reads it and the dedup tail only with dedup.
func TestRatePlanArgv(t *testing.T) {
	opts := RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: 2 * time.Second}
	fw := NewFixedWindowPlan(FixedWindowRequest{Limit: 10, Cost: 1, Window: time.Minute, RateOptions: opts})
	assert.Equal(t, []any{"r1", "10", "1", "60000", "1000", "2000"}, fw.appendArgv(nil, 1, "ignored"))
	assert.Equal(t, []any{"r1", "10", "7", "60000", "1000", "2000"}, fw.appendArgv(nil, 7, "ignored"))
	assert.Equal(t, []any{"r1", "10", "1", "60000", "1000", "2000"}, fw.argv, "a call never writes into the plan")
	opts.DedupTTL, opts.DedupMaxEntries = 3*time.Second, 16
	g := NewGCRAPlan(GCRARequest{Limit: 10, Period: time.Minute, Cost: 1, RateOptions: opts})
	assert.Equal(t, []any{"r1", "10", "60000", "4", "1000", "2000", "3000", "16", "id"}, g.appendArgv(nil, 4, "id"))
	sc := NewSlidingCounterPlan(SlidingCounterRequest{Limit: 10, Cost: 2, Window: time.Second, RateOptions: opts})
	assert.Equal(t, "rate-sliding-counter-v2", sc.Program())
	assert.Equal(t, []any{"r1", "10", "2", "1000", "1000", "2000", "3000", "16", "e"}, sc.appendArgv(nil, 2, "e"))

	// v3 renders v2's arguments for its own program, a window above v2's
	// 30 days included.
	fw3 := NewFixedWindowV3Plan(FixedWindowRequest{Limit: 10, Cost: 1, Window: time.Minute, RateOptions: RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: 2 * time.Second}})
	assert.Equal(t, "rate-fixed-window-v3", fw3.Program())
	assert.Equal(t, fw.argv, fw3.argv)
	year := NewFixedWindowV3Plan(FixedWindowRequest{Limit: 10, Cost: 1, Window: MaxFixedWindowV3, RateOptions: opts})
	assert.Equal(t, []any{"r1", "10", "3", "31622400000", "1000", "2000", "3000", "16", "e"}, year.appendArgv(nil, 3, "e"))

	// The sliding log has no cost argument: a plan call of another cost is
	// refused before anything is rendered or sent.
	sl := NewSlidingLogPlan(SlidingLogRequest{Limit: 10, Window: time.Second, RateOptions: opts})
	assert.Equal(t, []any{"r1", "10", "1000", "1000", "2000", "3000", "16", "e"}, sl.appendArgv(nil, 1, "e"))
	e := &Executor{}
	e.plans[planSlidingLog] = &fastProgram{command: "evalsha", target: "sha"}
	k := keys.Key{}
	_, _, err := e.planArgs(k, k, sl, 2, "e")
	require.ErrorIs(t, err, ErrZeroKey, "keys are checked first")
	st, dd := rateKeys(t, testBuilder(t), "plan-cost", "log")
	_, _, err = e.planArgs(st, dd, sl, 2, "e")
	require.ErrorIs(t, err, ErrIncompatible)
	_, args, err := e.planArgs(st, dd, sl, 1, "e")
	require.NoError(t, err)
	assert.Len(t, args, 3+2+8)

	// v3 renders v2's arguments for its own program, and refuses a cost
	// the same way.
	sl3 := NewSlidingLogV3Plan(SlidingLogRequest{Limit: 10, Window: time.Second, RateOptions: opts})
	assert.Equal(t, "rate-sliding-log-v3", sl3.Program())
	assert.Equal(t, sl.appendArgv(nil, 1, "e"), sl3.appendArgv(nil, 1, "e"))
	e.plans[planSlidingLogV3] = &fastProgram{command: "evalsha", target: "sha3"}
	_, _, err = e.planArgs(st, dd, sl3, 2, "e")
	require.ErrorIs(t, err, ErrIncompatible)
	_, args, err = e.planArgs(st, dd, sl3, 1, "e")
	require.NoError(t, err)
	assert.Equal(t, "sha3", args[1])
}
