package programs

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
