package programs

import (
	"context"
	"strconv"
	"time"

	"github.com/caphost/caphost/runtime/keys"
)

// The lean rate programs besides rate-token-bucket-v2: v1's algorithms,
// clock rule, dedup records and statuses over one string state written with
// SET PX, with the dedup key and arguments sent only with dedup on. Their
// state is not v1's (a hash): keep v1 and v2 state under different keys
// (the rate limiter uses key version 2 for them).
const (
	fixedWindowV2    = "rate-fixed-window-v2"
	fixedWindowV3    = "rate-fixed-window-v3"
	slidingCounterV2 = "rate-sliding-counter-v2"
	gcraV2           = "rate-gcra-v2"
	slidingLogV2     = "rate-sliding-log-v2"
	slidingLogV3     = "rate-sliding-log-v3"
)

// NewFixedWindowPlan renders req for rate-fixed-window-v2. req.Cost is the
// cost the plan is rendered for and req.EvaluationID is ignored (both are
// per call); with req.DedupTTL zero the plan sends neither the dedup key
// nor the dedup arguments.
func NewFixedWindowPlan(req FixedWindowRequest) *RatePlan {
	return newRatePlan(planFixedWindow, req.Cost, 2, req.RateOptions, req.PolicyRevision,
		strconv.FormatInt(req.Limit, 10), strconv.FormatInt(req.Cost, 10), millis(req.Window))
}

// MaxFixedWindowV3 is rate-fixed-window-v3's longest window: 366 days, a
// leap year (rate-fixed-window-v2's is 30 days, like every other rate
// program's).
const MaxFixedWindowV3 = 366 * 24 * time.Hour

// NewFixedWindowV3Plan renders req for rate-fixed-window-v3, as
// NewFixedWindowPlan does for v2. v3 admits windows up to MaxFixedWindowV3
// and is otherwise v2: the same arguments, state string and dedup records,
// so v2 and v3 calls may share a key (a v2 call of a window above 30 days
// is INVALID).
func NewFixedWindowV3Plan(req FixedWindowRequest) *RatePlan {
	return newRatePlan(planFixedWindowV3, req.Cost, 2, req.RateOptions, req.PolicyRevision,
		strconv.FormatInt(req.Limit, 10), strconv.FormatInt(req.Cost, 10), millis(req.Window))
}

// NewSlidingCounterPlan renders req for rate-sliding-counter-v2, as
// NewFixedWindowPlan does.
func NewSlidingCounterPlan(req SlidingCounterRequest) *RatePlan {
	return newRatePlan(planSlidingCounter, req.Cost, 2, req.RateOptions, req.PolicyRevision,
		strconv.FormatInt(req.Limit, 10), strconv.FormatInt(req.Cost, 10), millis(req.Window))
}

// NewGCRAPlan renders req for rate-gcra-v2, as NewFixedWindowPlan does.
func NewGCRAPlan(req GCRARequest) *RatePlan {
	return newRatePlan(planGCRA, req.Cost, 3, req.RateOptions, req.PolicyRevision,
		strconv.FormatInt(req.Limit, 10), millis(req.Period), strconv.FormatInt(req.Cost, 10))
}

// NewSlidingLogPlan renders req for rate-sliding-log-v2, as
// NewFixedWindowPlan does; the sliding log takes cost 1 only (a plan call
// with another cost is refused before sending). Its state is
// rate-sliding-log-v1's: v1 and v2 may share a key.
func NewSlidingLogPlan(req SlidingLogRequest) *RatePlan {
	return newRatePlan(planSlidingLog, 1, -1, req.RateOptions, req.PolicyRevision,
		strconv.FormatInt(req.Limit, 10), millis(req.Window))
}

// NewSlidingLogV3Plan renders req for rate-sliding-log-v3 (cost 1 only,
// as NewSlidingLogPlan). Its log trims expired events and extends its TTL
// once per tick of an eighth of the window instead of on every admit, a
// TTL rule v1 and v2 do not keep: a v3 log must live under a key version of
// its own, never shared with v1 or v2.
func NewSlidingLogV3Plan(req SlidingLogRequest) *RatePlan {
	return newRatePlan(planSlidingLogV3, 1, -1, req.RateOptions, req.PolicyRevision,
		strconv.FormatInt(req.Limit, 10), millis(req.Window))
}

// RateSlidingLogV3 evaluates an exact sliding-log limit for one request
// with rate-sliding-log-v3 (the decisions of RateSlidingLogV2 in fewer
// calls; state under its own key version); dedup as for RateFixedWindowV2.
func (e *Executor) RateSlidingLogV3(ctx context.Context, log, dedup keys.Key, req SlidingLogRequest) (RateResult, error) {
	return e.RatePlan(ctx, log, dedup, NewSlidingLogV3Plan(req), 1, string(req.EvaluationID))
}

// RateSlidingLogV2 evaluates an exact sliding-log limit for one request
// with rate-sliding-log-v2 (the decisions and state of RateSlidingLog in
// fewer calls); dedup as for RateFixedWindowV2.
func (e *Executor) RateSlidingLogV2(ctx context.Context, log, dedup keys.Key, req SlidingLogRequest) (RateResult, error) {
	return e.RatePlan(ctx, log, dedup, NewSlidingLogPlan(req), 1, string(req.EvaluationID))
}

// RateFixedWindowV2 evaluates a fixed-window limit with
// rate-fixed-window-v2 (the decisions of RateFixedWindow, string state).
// dedup is used, and must share state's hash tag, only when req.DedupTTL is
// positive; otherwise it may be the zero Key.
func (e *Executor) RateFixedWindowV2(ctx context.Context, state, dedup keys.Key, req FixedWindowRequest) (RateResult, error) {
	return e.RatePlan(ctx, state, dedup, NewFixedWindowPlan(req), req.Cost, string(req.EvaluationID))
}

// RateFixedWindowV3 evaluates a fixed-window limit with
// rate-fixed-window-v3: RateFixedWindowV2's decisions and state, with
// windows up to MaxFixedWindowV3; dedup as for RateFixedWindowV2.
func (e *Executor) RateFixedWindowV3(ctx context.Context, state, dedup keys.Key, req FixedWindowRequest) (RateResult, error) {
	return e.RatePlan(ctx, state, dedup, NewFixedWindowV3Plan(req), req.Cost, string(req.EvaluationID))
}

// RateSlidingCounterV2 evaluates a sliding-window-counter limit with
// rate-sliding-counter-v2 (the decisions of RateSlidingCounter, string
// state); dedup as for RateFixedWindowV2.
func (e *Executor) RateSlidingCounterV2(ctx context.Context, state, dedup keys.Key, req SlidingCounterRequest) (RateResult, error) {
	return e.RatePlan(ctx, state, dedup, NewSlidingCounterPlan(req), req.Cost, string(req.EvaluationID))
}

// RateGCRAV2 evaluates a GCRA limit with rate-gcra-v2 (the decisions of
// RateGCRA, string state); dedup as for RateFixedWindowV2.
func (e *Executor) RateGCRAV2(ctx context.Context, state, dedup keys.Key, req GCRARequest) (RateResult, error) {
	return e.RatePlan(ctx, state, dedup, NewGCRAPlan(req), req.Cost, string(req.EvaluationID))
}
