package programs

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestTokenBucketPlanArgv: a plan rendered for one cost sends, for any cost
// and evaluation id, exactly the ARGV the unplanned request would have
// rendered (the argument list the golden vectors pin), and never mutates
// its shared rendering.
func TestTokenBucketPlanArgv(t *testing.T) {
	base := TokenBucketRequest{CapacityScaled: 10 * RateScale, RefillScaled: 2 * RateScale, RefillPeriod: time.Second,
		CostScaled: RateScale, RateOptions: RateOptions{PolicyRevision: "r7", MaxClockStep: 2 * time.Second, CleanupGrace: time.Minute}}
	withDedup := base
	withDedup.DedupTTL, withDedup.DedupMaxEntries = time.Minute, 64
	// legacy renders the ARGV the way RateTokenBucket did before plans.
	legacy := func(r TokenBucketRequest) []any {
		return append([]any{r.PolicyRevision, "10000000", "2000000", "1000", strconv.FormatInt(r.CostScaled, 10)}, r.args()...)
	}
	for name, req := range map[string]TokenBucketRequest{"no dedup": base, "dedup": withDedup} {
		plan := NewTokenBucketPlan(req)
		shared := append([]any(nil), plan.args...)
		for _, cost := range []int64{RateScale, 3 * RateScale, 1} {
			for _, id := range [][]byte{nil, []byte("eval-1")} {
				want := req
				want.CostScaled, want.EvaluationID = cost, id
				assert.Equal(t, legacy(want), plan.argv(cost, id), "%s cost %d id %q", name, cost, id)
			}
		}
		assert.Equal(t, shared, plan.args, "%s: shared rendering mutated", name)
		// NewTokenBucketPlan ignores the request's evaluation id.
		req.EvaluationID = []byte("ignored")
		assert.Equal(t, plan.args, NewTokenBucketPlan(req).args, name)
	}
}
