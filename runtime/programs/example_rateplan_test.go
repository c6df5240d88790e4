package programs_test

import (
	"fmt"
	"time"

	"github.com/caphost/caphost/runtime/programs"
)

// A rate policy's call is rendered once, when its policy set is installed;
// each evaluation then passes only its cost and evaluation id to
// Executor.RatePlan (or Batcher.RatePlan, which pipelines concurrent calls).
// Without dedup the plan sends no dedup key and no dedup arguments.
func ExampleNewFixedWindowPlan() {
	opts := programs.RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: 5 * time.Second}
	plan := programs.NewFixedWindowPlan(programs.FixedWindowRequest{Limit: 100, Cost: 1, Window: time.Minute, RateOptions: opts})
	fmt.Println(plan.Program(), plan.Dedup())

	opts.DedupTTL, opts.DedupMaxEntries = time.Minute, 64
	plan = programs.NewGCRAPlan(programs.GCRARequest{Limit: 100, Period: time.Minute, Cost: 1, RateOptions: opts})
	fmt.Println(plan.Program(), plan.Dedup())
	// Output:
	// rate-fixed-window-v2 false
	// rate-gcra-v2 true
}
