package programs

import (
	"context"
	"strconv"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// RateScale is the fixed-point scale of token amounts (micro-tokens): a
// token bucket of 10 tokens has CapacityScaled 10*RateScale.
const RateScale = 1_000_000

// RateOptions are the parameters every rate program takes besides its
// algorithm parameters.
type RateOptions struct {
	// PolicyRevision (1..64 bytes) is stored in the state; state written
	// under another revision is refused (WRONG_TYPE), never reinterpreted.
	// The caller also puts the revision in the key.
	PolicyRevision string
	// MaxClockStep is how far the server clock may be behind the stored
	// last observation before the program answers CLOCK_UNSAFE; smaller
	// regressions are clamped (time never goes backwards in state).
	MaxClockStep time.Duration
	// CleanupGrace is added to the state TTL beyond the algorithm horizon.
	CleanupGrace time.Duration
	// DedupTTL enables evaluation-id dedup when positive: a repeat of
	// EvaluationID within it returns DEDUP_REPLAY with the original decision.
	// Zero means at-least-once evaluation (a retry may charge twice).
	DedupTTL time.Duration
	// DedupMaxEntries bounds the ids remembered per subject (1..4096); when
	// full, a new id evicts one random id. Ignored when DedupTTL is zero.
	DedupMaxEntries int
	// EvaluationID (1..128 bytes) identifies the evaluation; required when
	// DedupTTL is positive. Keep it before the first send and reuse it for
	// a retry after a timeout.
	EvaluationID []byte
}

// args renders the common ARGV tail. With dedup off the program still
// validates the tail, so neutral placeholders are sent.
func (o RateOptions) args() []any {
	id, maxEntries := o.EvaluationID, o.DedupMaxEntries
	if o.DedupTTL == 0 {
		if len(id) == 0 {
			id = []byte("-")
		}
		if maxEntries == 0 {
			maxEntries = 1
		}
	}
	return []any{millis(o.MaxClockStep), millis(o.CleanupGrace), millis(o.DedupTTL), strconv.Itoa(maxEntries), id}
}

// FixedWindowRequest is one rate-fixed-window-v1 evaluation.
type FixedWindowRequest struct {
	// Limit (1..10^9) is the admitted cost per window.
	Limit int64
	// Cost (1..Limit) is this request's cost.
	Cost int64
	// Window is the window length (1 ms .. 30 days; up to 366 days with
	// rate-fixed-window-v3, RateFixedWindowV3 and NewFixedWindowV3Plan).
	Window time.Duration
	RateOptions
}

// SlidingCounterRequest is one rate-sliding-counter-v1 evaluation; the
// fields mean what they mean for FixedWindowRequest.
type SlidingCounterRequest struct {
	Limit  int64
	Cost   int64
	Window time.Duration
	RateOptions
}

// TokenBucketRequest is one rate-token-bucket-v1 or -v2 evaluation. Token
// amounts are micro-tokens (RateScale per token).
type TokenBucketRequest struct {
	// CapacityScaled is the bucket size; CapacityScaled*RefillPeriod(ms) must
	// not exceed 2^52 and the full-refill horizon must not exceed 30 days.
	CapacityScaled int64
	// RefillScaled micro-tokens are added per RefillPeriod, pro rata.
	RefillScaled int64
	RefillPeriod time.Duration
	// CostScaled (1..CapacityScaled) is this request's cost.
	CostScaled int64
	RateOptions
}

// RateResult is the decision of a rate program.
type RateResult struct {
	Status RateStatus
	// ServerNowMillis is the Redis TIME the program read (before the clock
	// clamp), 0 when it refused before reading the clock.
	ServerNowMillis int64
	// Allowed is the decision; on DEDUP_REPLAY it is the original decision.
	Allowed bool
	// Limit is the window limit, or the bucket capacity in micro-tokens.
	Limit int64
	// Remaining is what is left after this decision (micro-tokens for the
	// token bucket; an approximation for the sliding counter).
	Remaining int64
	// RetryAfter is 0 when allowed, else the wait until the same request
	// could pass with no other traffic.
	RetryAfter time.Duration
	// ResetAtMillis is the server time (ms) the limit resets: window end,
	// the sliding state draining, or the bucket being full.
	ResetAtMillis int64
}

// Outcome returns the certainty of the call.
func (r RateResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

func rateResult(r *reply) RateResult {
	return RateResult{
		Status: RateStatus(r.status), ServerNowMillis: r.serverNow, Allowed: r.int(0) == 1,
		Limit: r.int(1), Remaining: r.int(2), RetryAfter: time.Duration(r.int(3)) * time.Millisecond, ResetAtMillis: r.int(4),
	}
}

// RateFixedWindow evaluates a fixed-window limit on state, remembering the
// decision under req.EvaluationID in dedup. state and dedup must share a
// hash tag (build them with keys.Builder.Group).
func (e *Executor) RateFixedWindow(ctx context.Context, state, dedup keys.Key, req FixedWindowRequest) (RateResult, error) {
	args := append([]any{req.PolicyRevision, strconv.FormatInt(req.Limit, 10), strconv.FormatInt(req.Cost, 10), millis(req.Window)}, req.args()...)
	r, err := e.run(ctx, "rate-fixed-window-v1", []keys.Key{state, dedup}, args...)
	if err != nil {
		return RateResult{}, err
	}
	return rateResult(&r), nil
}

// RateSlidingCounter evaluates a sliding-window-counter limit (approximate:
// certainty APPROXIMATE_ALGORITHM at the rate port).
func (e *Executor) RateSlidingCounter(ctx context.Context, state, dedup keys.Key, req SlidingCounterRequest) (RateResult, error) {
	args := append([]any{req.PolicyRevision, strconv.FormatInt(req.Limit, 10), strconv.FormatInt(req.Cost, 10), millis(req.Window)}, req.args()...)
	r, err := e.run(ctx, "rate-sliding-counter-v1", []keys.Key{state, dedup}, args...)
	if err != nil {
		return RateResult{}, err
	}
	return rateResult(&r), nil
}

// RateTokenBucket evaluates a token-bucket limit with rate-token-bucket-v1
// (hash state). The rate limiter uses RateTokenBucketV2 / TokenBucketPlan.
func (e *Executor) RateTokenBucket(ctx context.Context, bucket, dedup keys.Key, req TokenBucketRequest) (RateResult, error) {
	args := append([]any{req.PolicyRevision, strconv.FormatInt(req.CapacityScaled, 10), strconv.FormatInt(req.RefillScaled, 10),
		millis(req.RefillPeriod), strconv.FormatInt(req.CostScaled, 10)}, req.args()...)
	r, err := e.run(ctx, "rate-token-bucket-v1", []keys.Key{bucket, dedup}, args...)
	if err != nil {
		return RateResult{}, err
	}
	return rateResult(&r), nil
}

// GCRARequest is one rate-gcra-v1 evaluation: Limit units per Period with a
// burst of Limit. GCRA is an advanced opt-in; its rounding (emission
// interval rounded up to a microsecond) makes it deliberately not identical
// to the token bucket.
type GCRARequest struct {
	// Limit (1..10^9) units per Period, also the burst.
	Limit int64
	// Period is 1 ms .. 30 days.
	Period time.Duration
	// Cost (1..Limit) is this request's cost.
	Cost int64
	RateOptions
}

// RateGCRA evaluates a GCRA limit.
func (e *Executor) RateGCRA(ctx context.Context, state, dedup keys.Key, req GCRARequest) (RateResult, error) {
	args := append([]any{req.PolicyRevision, strconv.FormatInt(req.Limit, 10), millis(req.Period), strconv.FormatInt(req.Cost, 10)}, req.args()...)
	r, err := e.run(ctx, "rate-gcra-v1", []keys.Key{state, dedup}, args...)
	if err != nil {
		return RateResult{}, err
	}
	return rateResult(&r), nil
}

// SlidingLogRequest is one rate-sliding-log-v1 evaluation: an exact
// sliding window of at most Limit requests per Window, each of cost 1 (v1
// does not expand a cost into members). State is one event per admitted
// request, so Limit is capped at 10 000.
type SlidingLogRequest struct {
	// Limit (1..10000) is the number of requests admitted per Window.
	Limit int64
	// Window is 1 ms .. 30 days; the window is (now-Window, now].
	Window time.Duration
	RateOptions
}

// RateSlidingLog evaluates an exact sliding-log limit for one request.
func (e *Executor) RateSlidingLog(ctx context.Context, log, dedup keys.Key, req SlidingLogRequest) (RateResult, error) {
	args := append([]any{req.PolicyRevision, strconv.FormatInt(req.Limit, 10), millis(req.Window)}, req.args()...)
	r, err := e.run(ctx, "rate-sliding-log-v1", []keys.Key{log, dedup}, args...)
	if err != nil {
		return RateResult{}, err
	}
	return rateResult(&r), nil
}

// PermitAcquireRequest is one rate-concurrency-acquire-v1 call. The
// concurrency limiter bounds requests in flight, not a rate; it is never
// emulated with token-bucket cost.
type PermitAcquireRequest struct {
	// PolicyRevision (1..64 bytes) is stored in the state's sentinel.
	PolicyRevision string
	// MaxPermits (1..10000) bounds the live owners.
	MaxPermits int64
	// Owner (1..128 bytes, not starting with '!') is the caller's secret
	// random token: mint it before the first send and reuse it to repeat,
	// renew and release.
	Owner []byte
	// TTL (1 ms .. 30 days) bounds a leaked permit's life.
	TTL          time.Duration
	MaxClockStep time.Duration
	CleanupGrace time.Duration
}

// PermitAcquireResult is the result of rate-concurrency-acquire-v1.
type PermitAcquireResult struct {
	Status          PermitAcquireStatus
	ServerNowMillis int64
	// InUse counts live permits after the call.
	InUse      int64
	MaxPermits int64
	// ExpiresAtMillis is the owner's permit expiry (server time) on
	// ACQUIRED and ALREADY_HELD.
	ExpiresAtMillis int64
	// RetryAfter is the wait until the earliest permit expires (CONTENDED).
	RetryAfter time.Duration
}

// Outcome returns the certainty of the call.
func (r PermitAcquireResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// RateConcurrencyAcquire takes a concurrency permit for req.Owner.
func (e *Executor) RateConcurrencyAcquire(ctx context.Context, permits keys.Key, req PermitAcquireRequest) (PermitAcquireResult, error) {
	return e.concurrencyAcquire(ctx, "rate-concurrency-acquire-v1", permits, req)
}

// RateConcurrencyAcquireV2 is RateConcurrencyAcquire with
// rate-concurrency-acquire-v2: the same state (v1 and v2 may share a key)
// and decisions in fewer Redis calls.
func (e *Executor) RateConcurrencyAcquireV2(ctx context.Context, permits keys.Key, req PermitAcquireRequest) (PermitAcquireResult, error) {
	return e.concurrencyAcquire(ctx, "rate-concurrency-acquire-v2", permits, req)
}

// RateConcurrencyAcquireV3 is RateConcurrencyAcquire with
// rate-concurrency-acquire-v3: the same state (v1, v2 and v3 may share a
// key) and decisions in fewer Redis calls than v2; the key's TTL is only
// ever raised (PEXPIRE GT).
func (e *Executor) RateConcurrencyAcquireV3(ctx context.Context, permits keys.Key, req PermitAcquireRequest) (PermitAcquireResult, error) {
	return permitAcquireV3Call(ctx, e, permits, req)
}

// RateConcurrencyAcquireV3 is Executor.RateConcurrencyAcquireV3, batched:
// acquires (and renews and releases) that arrive while the Batcher's sends
// are in flight leave together as one pipeline, each still its own atomic
// call with its own status and certainty. The Batcher's permit methods
// keep the version suffix, so *Executor and *Batcher satisfy one
// interface with the same programs.
func (b *Batcher) RateConcurrencyAcquireV3(ctx context.Context, permits keys.Key, req PermitAcquireRequest) (PermitAcquireResult, error) {
	return permitAcquireV3Call(ctx, b, permits, req)
}

// The v3 concurrency programs run on the integer-only path (every result
// field is an integer), so they can share a Batcher's pipelines.
const (
	concurrencyAcquireV3 = "rate-concurrency-acquire-v3"
	concurrencyRenewV3   = "rate-concurrency-renew-v3"
	concurrencyReleaseV3 = "rate-concurrency-release-v3"
)

func permitAcquireV3Call(ctx context.Context, s intsSender, permits keys.Key, req PermitAcquireRequest) (PermitAcquireResult, error) {
	r, err := sendFast(ctx, s, s.executor().permitAcquireV3, concurrencyAcquireV3, []keys.Key{permits}, permitAcquireArgv(req)...)
	if err != nil {
		return PermitAcquireResult{}, err
	}
	return permitAcquireResult(&r), nil
}

func (e *Executor) concurrencyAcquire(ctx context.Context, id string, permits keys.Key, req PermitAcquireRequest) (PermitAcquireResult, error) {
	r, err := e.run(ctx, id, []keys.Key{permits}, permitAcquireArgv(req)...)
	if err != nil {
		return PermitAcquireResult{}, err
	}
	return permitAcquireResult(&r), nil
}

// permitAcquireArgv is the ARGV of every acquire version.
func permitAcquireArgv(req PermitAcquireRequest) []any {
	return []any{req.PolicyRevision, strconv.FormatInt(req.MaxPermits, 10), req.Owner,
		millis(req.TTL), millis(req.MaxClockStep), millis(req.CleanupGrace)}
}

func permitAcquireResult(r *reply) PermitAcquireResult {
	return PermitAcquireResult{
		Status: PermitAcquireStatus(r.status), ServerNowMillis: r.serverNow, InUse: r.int(0), MaxPermits: r.int(1),
		ExpiresAtMillis: r.int(2), RetryAfter: time.Duration(r.int(3)) * time.Millisecond,
	}
}

// PermitRenewRequest is one rate-concurrency-renew-v1 call.
type PermitRenewRequest struct {
	PolicyRevision string
	Owner          []byte
	// TTL (1 ms .. 30 days) is the new life from now.
	TTL          time.Duration
	MaxClockStep time.Duration
	CleanupGrace time.Duration
}

// PermitRenewResult is the result of rate-concurrency-renew-v1.
type PermitRenewResult struct {
	Status          PermitRenewStatus
	ServerNowMillis int64
	InUse           int64
	// ExpiresAtMillis is the new expiry on RENEWED.
	ExpiresAtMillis int64
}

// Outcome returns the certainty of the call.
func (r PermitRenewResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// RateConcurrencyRenew extends req.Owner's live permit.
func (e *Executor) RateConcurrencyRenew(ctx context.Context, permits keys.Key, req PermitRenewRequest) (PermitRenewResult, error) {
	return e.concurrencyRenew(ctx, "rate-concurrency-renew-v1", permits, req)
}

// RateConcurrencyRenewV2 is RateConcurrencyRenew with
// rate-concurrency-renew-v2 (v1's state, fewer Redis calls).
func (e *Executor) RateConcurrencyRenewV2(ctx context.Context, permits keys.Key, req PermitRenewRequest) (PermitRenewResult, error) {
	return e.concurrencyRenew(ctx, "rate-concurrency-renew-v2", permits, req)
}

// RateConcurrencyRenewV3 is RateConcurrencyRenew with
// rate-concurrency-renew-v3 (v1's state, fewer Redis calls than v2; an
// expired owner is left for the next acquire to prune).
func (e *Executor) RateConcurrencyRenewV3(ctx context.Context, permits keys.Key, req PermitRenewRequest) (PermitRenewResult, error) {
	return permitRenewV3Call(ctx, e, permits, req)
}

// RateConcurrencyRenewV3 is Executor.RateConcurrencyRenewV3, batched (see
// Batcher.RateConcurrencyAcquireV3).
func (b *Batcher) RateConcurrencyRenewV3(ctx context.Context, permits keys.Key, req PermitRenewRequest) (PermitRenewResult, error) {
	return permitRenewV3Call(ctx, b, permits, req)
}

func permitRenewV3Call(ctx context.Context, s intsSender, permits keys.Key, req PermitRenewRequest) (PermitRenewResult, error) {
	r, err := sendFast(ctx, s, s.executor().permitRenewV3, concurrencyRenewV3, []keys.Key{permits}, permitRenewArgv(req)...)
	if err != nil {
		return PermitRenewResult{}, err
	}
	return permitRenewResult(&r), nil
}

func (e *Executor) concurrencyRenew(ctx context.Context, id string, permits keys.Key, req PermitRenewRequest) (PermitRenewResult, error) {
	r, err := e.run(ctx, id, []keys.Key{permits}, permitRenewArgv(req)...)
	if err != nil {
		return PermitRenewResult{}, err
	}
	return permitRenewResult(&r), nil
}

// permitRenewArgv is the ARGV of every renew version.
func permitRenewArgv(req PermitRenewRequest) []any {
	return []any{req.PolicyRevision, req.Owner, millis(req.TTL), millis(req.MaxClockStep), millis(req.CleanupGrace)}
}

func permitRenewResult(r *reply) PermitRenewResult {
	return PermitRenewResult{Status: PermitRenewStatus(r.status), ServerNowMillis: r.serverNow, InUse: r.int(0), ExpiresAtMillis: r.int(1)}
}

// PermitReleaseRequest is one rate-concurrency-release-v1 call.
type PermitReleaseRequest struct {
	PolicyRevision string
	Owner          []byte
	MaxClockStep   time.Duration
}

// PermitReleaseResult is the result of rate-concurrency-release-v1.
type PermitReleaseResult struct {
	Status          PermitReleaseStatus
	ServerNowMillis int64
	InUse           int64
}

// Outcome returns the certainty of the call.
func (r PermitReleaseResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// RateConcurrencyRelease returns req.Owner's permit; nobody else's.
func (e *Executor) RateConcurrencyRelease(ctx context.Context, permits keys.Key, req PermitReleaseRequest) (PermitReleaseResult, error) {
	return e.concurrencyRelease(ctx, "rate-concurrency-release-v1", permits, req)
}

// RateConcurrencyReleaseV2 is RateConcurrencyRelease with
// rate-concurrency-release-v2 (v1's state, fewer Redis calls).
func (e *Executor) RateConcurrencyReleaseV2(ctx context.Context, permits keys.Key, req PermitReleaseRequest) (PermitReleaseResult, error) {
	return e.concurrencyRelease(ctx, "rate-concurrency-release-v2", permits, req)
}

// RateConcurrencyReleaseV3 is RateConcurrencyRelease with
// rate-concurrency-release-v3 (v1's state, fewer Redis calls than v2; an
// expired owner is left for the next acquire to prune).
func (e *Executor) RateConcurrencyReleaseV3(ctx context.Context, permits keys.Key, req PermitReleaseRequest) (PermitReleaseResult, error) {
	return permitReleaseV3Call(ctx, e, permits, req)
}

// RateConcurrencyReleaseV3 is Executor.RateConcurrencyReleaseV3, batched
// (see Batcher.RateConcurrencyAcquireV3).
func (b *Batcher) RateConcurrencyReleaseV3(ctx context.Context, permits keys.Key, req PermitReleaseRequest) (PermitReleaseResult, error) {
	return permitReleaseV3Call(ctx, b, permits, req)
}

func permitReleaseV3Call(ctx context.Context, s intsSender, permits keys.Key, req PermitReleaseRequest) (PermitReleaseResult, error) {
	r, err := sendFast(ctx, s, s.executor().permitReleaseV3, concurrencyReleaseV3, []keys.Key{permits}, permitReleaseArgv(req)...)
	if err != nil {
		return PermitReleaseResult{}, err
	}
	return permitReleaseResult(&r), nil
}

func (e *Executor) concurrencyRelease(ctx context.Context, id string, permits keys.Key, req PermitReleaseRequest) (PermitReleaseResult, error) {
	r, err := e.run(ctx, id, []keys.Key{permits}, permitReleaseArgv(req)...)
	if err != nil {
		return PermitReleaseResult{}, err
	}
	return permitReleaseResult(&r), nil
}

// permitReleaseArgv is the ARGV of every release version.
func permitReleaseArgv(req PermitReleaseRequest) []any {
	return []any{req.PolicyRevision, req.Owner, millis(req.MaxClockStep)}
}

func permitReleaseResult(r *reply) PermitReleaseResult {
	return PermitReleaseResult{Status: PermitReleaseStatus(r.status), ServerNowMillis: r.serverNow, InUse: r.int(0)}
}
