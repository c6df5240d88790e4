package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/host/internal/logsample"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Request bounds.
const (
	MaxEvaluationIDBytes = 128
	MaxSubjectValueBytes = keys.MaxPartBytes
	// keyVersion is the kv<n> of the state the v1 programs keep (the
	// concurrency limiter, whose later versions keep v1's state).
	keyVersion = 1
	// leanKeyVersion is the kv<n> of the state of the lean programs
	// (rate-token-bucket-v2, rate-fixed-window-v2, rate-sliding-counter-v2,
	// rate-gcra-v2), which keep one string where their v1 kept a hash, and
	// of rate-sliding-log-v3, whose log keeps v1's layout under another
	// TTL rule (trimmed and extended once per tick): none shares a key
	// with its v1. rate-fixed-window-v3 (what the limiter runs for a fixed
	// window) keeps rate-fixed-window-v2's state and shares its keys: v2 and
	// v3 binaries count a subject in one window during a rolling upgrade.
	leanKeyVersion = 2
	// tokenBucketKeyVersion is the kv<n> of token-bucket state.
	tokenBucketKeyVersion = leanKeyVersion
	// unavailableRetryAfter is the Retry-After of outcomes without a
	// decision: a short, fixed back-off, since nothing better is known.
	unavailableRetryAfter = time.Second
)

// Errors returned by New and Swap.
var (
	// ErrConfig matches every configuration error of New and Swap.
	ErrConfig = errors.New("ratelimit: invalid configuration")
	// ErrRevisionReuse rejects a swap that changes a policy without
	// changing its revision: state is keyed by revision, so changed
	// behaviour under an old revision would reinterpret old state.
	ErrRevisionReuse = errors.New("ratelimit: policy changed without a new revision")
)

// Subject maps each dimension of a policy to its raw value. The host only
// digests it (HMAC, length-prefixed, canonical dimension order); it is never
// stored, logged or put in an error. The global dimension takes no value.
type Subject map[policy.RateDimension][]byte

// String redacts the subject.
func (Subject) String() string { return "ratelimit.Subject(***)" }

// Request is one rate evaluation.
type Request struct {
	// Policy is the policy id (must be in the active set).
	Policy string
	// Subject holds exactly the policy's dimensions.
	Subject Subject
	// Cost is 1..the policy's max cost.
	Cost int64
	// EvaluationID (at most 128 bytes) identifies the evaluation for dedup.
	// Empty with dedup enabled: the limiter mints a random one, which is
	// enough for its own reconciling retry.
	EvaluationID string
	// Deadline bounds the whole evaluation including a retry (zero: ctx only).
	Deadline time.Time
}

// Option configures New.
type Option func(*options)

type options struct {
	log         *slog.Logger
	reg         prometheus.Registerer
	now         func() time.Time
	beforeRetry func()
	flights     int // concurrent rate sends before calls batch; 0: no batching
	batchMax    int
}

// Batching defaults (see WithBatching).
const (
	DefaultBatchFlights = 4
	DefaultBatchMax     = 64
)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithRegisterer registers the limiter's metrics on reg (default: the
// metrics exist but are not registered anywhere).
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.reg = reg }
}

// WithBatching sets how rate evaluations share pipelines: while
// fewer than maxFlights of them are in flight a call is sent at once and
// alone; further calls queue and go out together (at most maxBatch per
// pipeline) as soon as a send completes. No call waits for a timer, so a
// lone caller's latency is unchanged; under concurrency client and server
// pay one round trip per batch instead of per decision. Each decision stays
// its own atomic program call with its own outcome. Every algorithm
// batches, the concurrency limiter's acquires, renews and releases
// included, policies and algorithms sharing the pipelines. maxFlights 0
// turns batching off. Defaults: DefaultBatchFlights, DefaultBatchMax.
func WithBatching(maxFlights, maxBatch int) Option {
	return func(o *options) { o.flights, o.batchMax = maxFlights, maxBatch }
}

// withBeforeRetry runs f just before the reconciling retry (tests only).
func withBeforeRetry(f func()) Option {
	return func(o *options) { o.beforeRetry = f }
}

// Limiter evaluates rate policies. It is safe for concurrent use.
type Limiter struct {
	log  *slog.Logger
	exec *programs.Executor
	// batch sends plan evaluations, batching concurrent ones (nil: each
	// goes out alone through exec).
	batch *programs.Batcher
	keys  *keys.Builder
	cfg   Config
	// gen is the active policy set with its per-policy rendering (keys,
	// program arguments, metric handles). It is the only copy of the set:
	// an evaluation loads it once and uses that snapshot for every lookup,
	// so a swap can never split one request across two sets.
	gen    atomic.Pointer[generation]
	swapMu sync.Mutex // serialises Swap (check, compile, store)
	// served remembers the digest of every (policy id, revision) this
	// limiter has served (revisions.go).
	served  revisionMemory
	local   *localLimiter // nil unless degraded-provider is local-emergency
	metrics *metrics
	shadow  *logsample.Sampler
	// beforeRetry runs just before the reconciling retry (tests use it to
	// heal an injected fault).
	beforeRetry func()
}

// New binds a limiter to the runtime role cfg.RedisRole with the policy set.
func New(rt *runtime.Runtime, cfg Config, set *policy.RatePolicySet, opts ...Option) (*Limiter, error) {
	o := options{log: slog.Default(), now: time.Now, flights: DefaultBatchFlights, batchMax: DefaultBatchMax}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if rt == nil || set == nil {
		return nil, fmt.Errorf("%w: New needs a runtime and a policy set", ErrConfig)
	}
	role := cfg.RedisRole
	if role == "" {
		role = policy.RoleCoordination
	}
	dep, err := rt.Role(role)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	l := &Limiter{log: o.log, exec: dep.Programs(), keys: rt.Keys(), cfg: cfg, beforeRetry: o.beforeRetry}
	if o.flights > 0 {
		l.batch = l.exec.NewBatcher(o.flights, o.batchMax)
	}
	if cfg.DegradedProvider == DegradedLocalEmergency {
		if cfg.LocalEmergency == nil {
			return nil, fmt.Errorf("%w: local-emergency needs its limits", ErrConfig)
		}
		if l.local, err = newLocalLimiter(*cfg.LocalEmergency, o.now); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if l.metrics, err = newMetrics(o.reg); err != nil {
		return nil, err
	}
	l.shadow = logsample.New(cfg.ShadowSampleLog.PerMinute, o.now)
	if err := l.check(set); err != nil {
		return nil, err
	}
	l.gen.Store(l.compile(set))
	l.served.record(set)
	return l, nil
}

// Policies returns the active policy set.
func (l *Limiter) Policies() *policy.RatePolicySet { return l.gen.Load().set }

// Config returns the configuration the limiter was built with.
func (l *Limiter) Config() Config { return l.cfg }

// Swap atomically replaces the policy set. Evaluations in flight finish on
// the set they started with. A set that changes a policy without a new
// revision — compared with every set this limiter has served, not only the
// one it replaces (revisions.go) — or needs a local emergency limiter this
// limiter does not have, is refused and the old set keeps serving.
func (l *Limiter) Swap(set *policy.RatePolicySet) error {
	if set == nil {
		return fmt.Errorf("%w: nil policy set", ErrConfig)
	}
	// Swaps are rare: serialising them makes check-then-store atomic.
	l.swapMu.Lock()
	defer l.swapMu.Unlock()
	if err := l.check(set); err != nil {
		return err
	}
	// Only an accepted set is compiled: compiling creates its metric series.
	l.gen.Store(l.compile(set))
	l.served.record(set)
	l.log.Info("rate policy set swapped", "policies", set.Len(), "digest", set.Digest())
	return nil
}

func (l *Limiter) check(set *policy.RatePolicySet) error {
	var errs []error
	for _, id := range set.IDs() {
		p, _ := set.Policy(id)
		if p.FailureMode == policy.FailLocal && l.local == nil {
			errs = append(errs, fmt.Errorf("%w: policy %s is local-emergency but degraded-provider is disabled", ErrConfig, id))
		}
	}
	errs = append(errs, l.served.check(set))
	return errors.Join(errs...)
}

// Evaluate evaluates one request against the active policy set. It is
// the entry point for callers that build the subject themselves; front
// ends that select policies from request attributes call Decide.
func (l *Limiter) Evaluate(ctx context.Context, req Request) Outcome {
	cp := l.gen.Load().byID[req.Policy]
	o := l.evaluateCompiled(ctx, cp, req)
	l.metrics.recordFor(o, cp)
	return o
}

// EvaluateAll evaluates a hierarchy (for example tenant, principal and
// route policies) on one policy-set snapshot, sequentially and in the
// given order, stopping at the first outcome that does not allow and
// returning it.
//
// Conservative consumption: the policies are independent keys, usually in
// different Cluster slots, so this is never atomic. A request allowed by
// the first policies and denied by a later one has consumed the earlier
// policies' quota, and that consumption stands: a refund would be another
// racing write that could itself time out. Put the broadest (cheapest to
// over-consume) policy first. A same-slot composite program (all-or-nothing)
// is not implemented.
//
// When every policy allows, the outcome is Degraded if any was, and its
// decision is the most restrictive one (least remaining) among the
// enforced (non-shadow) decisions.
func (l *Limiter) EvaluateAll(ctx context.Context, reqs []Request) Outcome {
	g := l.gen.Load()
	if len(reqs) == 0 || len(reqs) > MaxSelections {
		o := unavailable(policy.RatePolicy{}, CategoryInvalidRequest)
		l.metrics.record(o)
		return o
	}
	steps := make([]step, len(reqs))
	for i, r := range reqs {
		steps[i] = step{cp: g.byID[r.Policy], req: r}
	}
	return l.run(ctx, steps)
}

// step is one policy of a hierarchy, resolved on one generation (cp nil:
// not in it).
type step struct {
	cp  *compiledPolicy
	req Request
}

// run evaluates the steps of one generation as a hierarchy (see
// EvaluateAll), counting each evaluated policy's outcome once.
func (l *Limiter) run(ctx context.Context, steps []step) Outcome {
	if len(steps) == 1 {
		o := l.evaluateCompiled(ctx, steps[0].cp, steps[0].req)
		l.metrics.recordFor(o, steps[0].cp)
		return o
	}
	outs := make([]Outcome, 0, len(steps))
	for _, s := range steps {
		o := l.evaluateCompiled(ctx, s.cp, s.req)
		l.metrics.recordFor(o, s.cp)
		outs = append(outs, o)
		if !o.Allowed() {
			if _, ok := o.Decision(); ok {
				o.chain = chainOf(outs)
			}
			return o
		}
	}
	o := combine(outs)
	o.chain = chainOf(outs)
	return o
}

// chainOf lists the decisions of a hierarchy's evaluated levels.
func chainOf(outs []Outcome) []Decision {
	ds := make([]Decision, len(outs))
	for i, o := range outs {
		ds[i] = o.decision
	}
	return ds
}

// combine merges allowing outcomes into one.
func combine(outs []Outcome) Outcome {
	best := -1
	degraded := -1
	for i, o := range outs {
		if o.kind == Degraded && degraded < 0 {
			degraded = i
		}
		if o.decision.Source == SourceShadow {
			continue
		}
		if best < 0 || o.decision.Remaining < outs[best].decision.Remaining {
			best = i
		}
	}
	if best < 0 {
		best = 0
	}
	out := outs[best]
	if degraded >= 0 && out.kind != Degraded {
		out.kind, out.reason, out.category = Degraded, outs[degraded].reason, outs[degraded].category
	}
	return out
}

// evaluateCompiled runs one request against its compiled policy (nil: not
// in the set).
func (l *Limiter) evaluateCompiled(ctx context.Context, cp *compiledPolicy, req Request) Outcome {
	if cp == nil {
		return unavailable(policy.RatePolicy{}, CategoryInvalidRequest)
	}
	pol := &cp.pol
	if req.Cost < 1 || req.Cost > pol.MaxCost || len(req.EvaluationID) > MaxEvaluationIDBytes || !subjectMatches(*pol, req.Subject) {
		return unavailable(*pol, CategoryInvalidRequest)
	}
	if pol.Algorithm == policy.RateConcurrency {
		// A permit limiter is not a rate: it needs acquire/release with an
		// owner token, never an Evaluate that emulates it with cost.
		return unavailable(*pol, CategoryMisconfigured)
	}
	evalID := req.EvaluationID
	if pol.Dedup.Enabled && evalID == "" {
		evalID = mintEvaluationID()
	}
	if !req.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, req.Deadline)
		defer cancel()
	}
	if ctx.Err() != nil {
		return unavailable(*pol, CategoryDeadline)
	}
	// The parts and keys live on the stack for the usual one or two
	// dimensions; the keys' text is the one allocation.
	var (
		partsBuf [2 * 4][]byte
		keysBuf  [2]keys.Key
	)
	ks, err := cp.appendKeys(l.keys, keysBuf[:0], cp.appendParts(partsBuf[:0], req.Subject))
	if err != nil {
		return unavailable(*pol, CategoryMisconfigured)
	}
	res, err := l.attempt(ctx, cp, ks, req.Cost, evalID, pol.Dedup.Enabled)
	o := l.interpret(*pol, ks[0], req.Cost, evalID, res, err, false)
	if o.kind == Indeterminate && o.category == CategoryTimeout && pol.Dedup.Enabled && ctx.Err() == nil {
		// The first call may have applied. With dedup the same evaluation
		// id is safe to repeat: if it applied, the program answers
		// DEDUP_REPLAY with the original decision and charges nothing.
		if l.beforeRetry != nil {
			l.beforeRetry()
		}
		res, err = l.attempt(ctx, cp, ks, req.Cost, evalID, false)
		o = l.interpret(*pol, ks[0], req.Cost, evalID, res, err, true)
	}
	if o.kind == Indeterminate {
		o = l.afterIndeterminate(*pol, ks[0], req.Cost, o)
	}
	return o
}

// attempt sends one program call. With a retry still possible, the first
// attempt gets AttemptTimeout, or half the remaining deadline, so that the
// retry has time too.
func (l *Limiter) attempt(ctx context.Context, cp *compiledPolicy, ks []keys.Key, cost int64, evalID string, retryable bool) (programs.RateResult, error) {
	pol := &cp.pol
	switch dl, has := ctx.Deadline(); {
	case l.cfg.AttemptTimeout > 0:
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.cfg.AttemptTimeout)
		defer cancel()
	case retryable && has:
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
		defer cancel()
	}
	if cp.plan == nil { // compilePolicy renders a plan for every evaluable algorithm
		return programs.RateResult{}, &programs.CompatibilityError{Program: string(pol.Algorithm), Reason: "no program for algorithm"}
	}
	var dedup keys.Key
	if cp.plan.Dedup() {
		dedup = ks[1]
	}
	if pol.Algorithm == policy.RateTokenBucket {
		cost *= policy.RateScale
	}
	if l.batch != nil {
		return l.batch.RatePlan(ctx, ks[0], dedup, cp.plan, cost, evalID)
	}
	return l.exec.RatePlan(ctx, ks[0], dedup, cp.plan, cost, evalID)
}

// interpret maps one program result to an outcome (§19/§21). retried marks
// the reconciling retry: its own failures cannot prove the first attempt
// did not apply, so they stay Indeterminate.
func (l *Limiter) interpret(pol policy.RatePolicy, state keys.Key, cost int64, evalID string, res programs.RateResult, err error, retried bool) Outcome {
	if err == nil {
		switch res.Status {
		case programs.RateAllowed, programs.RateDenied, programs.RateDedupReplay:
			return l.decided(pol, res)
		case programs.RateClockUnsafe:
			l.metrics.clockUnsafe.WithLabelValues(pol.ID).Inc()
			if retried {
				return indeterminate(pol, evalID)
			}
			return l.fallback(pol, state, cost, CategoryClockUnsafe, ReasonClockUnsafe)
		default: // WRONG_TYPE, INVALID: state or arguments the program refuses
			return unavailable(pol, CategoryMisconfigured)
		}
	}
	if errors.Is(err, programs.ErrIncompatible) || errors.Is(err, programs.ErrZeroKey) ||
		errors.Is(err, programs.ErrSHAMismatch) || errors.Is(err, keys.ErrInvalidSpec) {
		return unavailable(pol, CategoryMisconfigured)
	}
	switch certainty.Classify(err, true) {
	case certainty.UnavailableBeforeSend:
		if retried {
			return indeterminate(pol, evalID)
		}
		return l.fallback(pol, state, cost, CategoryRedisUnavailable, ReasonRedisUnavailable)
	case certainty.OverloadedBeforeSend:
		if retried {
			return indeterminate(pol, evalID)
		}
		return l.fallback(pol, state, cost, CategoryOverloaded, ReasonOverloaded)
	case certainty.NotApplied:
		if certainty.Reason(err, true) == "NOSCRIPT" {
			return unavailable(pol, CategoryMisconfigured)
		}
		// The server refused before executing (LOADING, READONLY, BUSY,
		// CLUSTERDOWN, ...): it is unavailable, the call did nothing.
		if retried {
			return indeterminate(pol, evalID)
		}
		return l.fallback(pol, state, cost, CategoryRedisUnavailable, ReasonRedisUnavailable)
	case certainty.Rejected:
		// Guard rejection, NOPERM, WRONGTYPE: configuration, never a fallback.
		return unavailable(pol, CategoryMisconfigured)
	}
	return indeterminate(pol, evalID)
}

// decided builds the outcome of a program decision.
func (l *Limiter) decided(pol policy.RatePolicy, res programs.RateResult) Outcome {
	d := Decision{
		Allowed: res.Allowed, Limit: res.Limit, Remaining: res.Remaining, RetryAfter: res.RetryAfter,
		ResetAt: time.UnixMilli(res.ResetAtMillis), Window: quotaWindow(pol), Policy: pol.ID, Revision: pol.Revision,
		Source: SourceGlobalRedis, Certainty: Certain,
	}
	if pol.Algorithm == policy.RateTokenBucket {
		d.Limit, d.Remaining = res.Limit/policy.RateScale, res.Remaining/policy.RateScale
	}
	if pol.Algorithm == policy.RateSlidingCounter {
		d.Certainty = ApproximateAlgorithm
	}
	o := Outcome{kind: Evaluated, policy: pol.ID, revision: pol.Revision, replayed: res.Status == programs.RateDedupReplay}
	if pol.Shadow {
		if !d.Allowed {
			d.ShadowDenied = true
			l.metrics.shadowDeny.WithLabelValues(pol.ID).Inc()
			if l.shadow.Take() {
				l.log.Info("rate shadow policy would have denied", "policy", pol.ID, "revision", pol.Revision)
			}
		}
		d.Allowed, d.RetryAfter, d.Source = true, 0, SourceShadow
	}
	o.decision = d
	return o
}

// fallback applies the policy's failure mode after the global limiter
// provably did not decide (unavailable before send, refused before
// executing, CLOCK_UNSAFE).
func (l *Limiter) fallback(pol policy.RatePolicy, state keys.Key, cost int64, cat FailureCategory, reason Reason) Outcome {
	switch {
	case pol.Shadow:
		return degraded(pol, Decision{Allowed: true, Limit: pol.Limit(), Policy: pol.ID, Revision: pol.Revision,
			Source: SourceShadow, Certainty: ApproximateAlgorithm}, cat, reason)
	case pol.FailureMode == policy.FailLocal:
		return l.localDecision(pol, state, cost, cat, reason)
	case pol.FailureMode == policy.FailOpenPolicy:
		return degraded(pol, Decision{Allowed: true, Limit: pol.Limit(), Policy: pol.ID, Revision: pol.Revision,
			Source: SourceFailOpen, Certainty: ApproximateAlgorithm}, cat, reason)
	}
	return unavailable(pol, cat)
}

// afterIndeterminate: a timeout is never an allow. Only the bounded local
// emergency limiter may answer (Degraded) and a shadow policy, which never
// enforces, allows; everything else stays Indeterminate.
func (l *Limiter) afterIndeterminate(pol policy.RatePolicy, state keys.Key, cost int64, o Outcome) Outcome {
	switch {
	case pol.Shadow:
		return degraded(pol, Decision{Allowed: true, Limit: pol.Limit(), Policy: pol.ID, Revision: pol.Revision,
			Source: SourceShadow, Certainty: ApproximateAlgorithm}, CategoryTimeout, ReasonTimeout)
	case pol.FailureMode == policy.FailLocal:
		if lo := l.localDecision(pol, state, cost, CategoryTimeout, ReasonTimeout); lo.kind == Degraded {
			lo.evaluationID = o.evaluationID
			return lo
		}
	}
	return o
}

func (l *Limiter) localDecision(pol policy.RatePolicy, state keys.Key, cost int64, cat FailureCategory, reason Reason) Outcome {
	if l.local == nil {
		return unavailable(pol, cat)
	}
	d, ok := l.local.decide(pol, state.Redis(), cost)
	if !ok {
		return unavailable(pol, CategoryLocalExhausted)
	}
	d.Window = quotaWindow(pol)
	return degraded(pol, d, cat, reason)
}

// quotaWindow is pol's quota window (see Decision.Window).
func quotaWindow(pol policy.RatePolicy) time.Duration {
	p := pol.Parameters
	switch pol.Algorithm {
	case policy.RateTokenBucket:
		if p.RefillTokens <= 0 {
			return 0
		}
		// Float: capacity × period can exceed int64 nanoseconds.
		return time.Duration(float64(p.RefillPeriod) * float64(p.Capacity) / float64(p.RefillTokens))
	case policy.RateConcurrency:
		return 0
	}
	return p.Window
}

func unavailable(pol policy.RatePolicy, cat FailureCategory) Outcome {
	return Outcome{kind: Unavailable, policy: pol.ID, revision: pol.Revision, category: cat, retryAfter: unavailableRetryAfter}
}

func indeterminate(pol policy.RatePolicy, evalID string) Outcome {
	return Outcome{kind: Indeterminate, policy: pol.ID, revision: pol.Revision, evaluationID: evalID,
		category: CategoryTimeout, retryAfter: unavailableRetryAfter}
}

func degraded(pol policy.RatePolicy, d Decision, cat FailureCategory, reason Reason) Outcome {
	return Outcome{kind: Degraded, policy: pol.ID, revision: pol.Revision, decision: d, category: cat, reason: reason}
}

// generation is a policy set with its per-policy rendering.
type generation struct {
	set  *policy.RatePolicySet
	byID map[string]*compiledPolicy
}

// compiledPolicy is what an evaluation of one policy revision needs that
// does not depend on the request, rendered once per swap: the hot path then
// neither clones the policy nor formats program arguments nor looks up
// metric label values. Immutable once built.
type compiledPolicy struct {
	pol  policy.RatePolicy
	spec keys.Spec // capability, region (id--revision) and key version
	// kinds are the key kinds one evaluation needs: the state kind, then
	// "dedup" unless a lean program runs without dedup.
	kinds []string
	// keys is spec and kinds prepared (nil if the builder refused them:
	// then every evaluation reports the builder's error).
	keys *keys.Prepared
	dims [][]byte // dimension names as key parts, in canonical order
	// plan is the lean program's rendered call (nil: the concurrency
	// limiter, which is never evaluated).
	plan *programs.RatePlan
	m    policyMetrics
}

// compile renders every policy of set.
func (l *Limiter) compile(set *policy.RatePolicySet) *generation {
	g := &generation{set: set, byID: make(map[string]*compiledPolicy, set.Len())}
	for _, id := range set.IDs() {
		if pol, ok := set.Policy(id); ok {
			g.byID[id] = l.compilePolicy(pol)
		}
	}
	return g
}

func (l *Limiter) compilePolicy(pol policy.RatePolicy) *compiledPolicy {
	cp := &compiledPolicy{pol: pol, m: l.metrics.forPolicy(pol),
		spec:  keys.Spec{Capability: keys.CapRate, Region: pol.KeyRegion(), KeyVersion: keyVersion},
		kinds: []string{stateKind(pol.Algorithm), "dedup"}}
	cp.dims = make([][]byte, len(pol.Dimensions))
	for i, d := range pol.Dimensions {
		cp.dims[i] = []byte(d)
	}
	p, opts := pol.Parameters, rateOptions(&pol)
	switch pol.Algorithm {
	case policy.RateTokenBucket:
		cp.plan = programs.NewTokenBucketPlan(programs.TokenBucketRequest{
			CapacityScaled: p.Capacity * policy.RateScale, RefillScaled: p.RefillTokens * policy.RateScale,
			RefillPeriod: p.RefillPeriod, CostScaled: policy.RateScale, RateOptions: opts})
	case policy.RateFixedWindow:
		// v3: v2's decisions and state, windows up to 366 days.
		cp.plan = programs.NewFixedWindowV3Plan(programs.FixedWindowRequest{Limit: p.Limit, Cost: 1, Window: p.Window, RateOptions: opts})
	case policy.RateSlidingCounter:
		cp.plan = programs.NewSlidingCounterPlan(programs.SlidingCounterRequest{Limit: p.Limit, Cost: 1, Window: p.Window, RateOptions: opts})
	case policy.RateGCRA:
		cp.plan = programs.NewGCRAPlan(programs.GCRARequest{Limit: p.Limit, Period: p.Window, Cost: 1, RateOptions: opts})
	case policy.RateSlidingLog:
		cp.plan = programs.NewSlidingLogV3Plan(programs.SlidingLogRequest{Limit: p.Limit, Window: p.Window, RateOptions: opts})
	}
	if cp.plan != nil {
		cp.spec.KeyVersion = leanKeyVersion
		if !pol.Dedup.Enabled {
			cp.kinds = cp.kinds[:1] // no dedup key is sent
		}
	}
	if pk, err := l.keys.Prepare(cp.spec, cp.kinds...); err == nil {
		cp.keys = pk
	}
	return cp
}

// appendKeys renders the evaluation's keys (state first) for parts.
func (cp *compiledPolicy) appendKeys(b *keys.Builder, dst []keys.Key, parts [][]byte) ([]keys.Key, error) {
	if cp.keys != nil {
		return cp.keys.AppendKeys(dst, parts)
	}
	s := cp.spec
	s.Parts = parts
	ks, err := b.Group(s, cp.kinds...) // reports why Prepare refused
	return append(dst, ks...), err
}

// mintEvaluationID returns a fresh random evaluation id (32 hex digits)
// for a dedup policy called without one: enough for the limiter's own
// reconciling retry.
func mintEvaluationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	var h [32]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}

// appendParts appends the key parts of sub to dst: what subjectParts
// renders, without converting the dimension names per call.
func (cp *compiledPolicy) appendParts(dst [][]byte, sub Subject) [][]byte {
	for i, dim := range cp.pol.Dimensions {
		dst = append(dst, cp.dims[i])
		if dim != policy.DimGlobal {
			dst = append(dst, sub[dim])
		}
	}
	return dst
}

// rateOptions are the program options of pol, without an evaluation id.
func rateOptions(pol *policy.RatePolicy) programs.RateOptions {
	opts := programs.RateOptions{PolicyRevision: pol.Revision, MaxClockStep: pol.MaxClockStep, CleanupGrace: pol.CleanupGrace}
	if pol.Dedup.Enabled {
		opts.DedupTTL, opts.DedupMaxEntries = pol.Dedup.TTL, pol.Dedup.MaxEntries
	}
	return opts
}

// subjectMatches reports whether sub holds exactly the policy's dimensions
// with bounded values (the global dimension holds none).
func subjectMatches(pol policy.RatePolicy, sub Subject) bool {
	if len(sub) != len(pol.Dimensions) {
		return false
	}
	for _, dim := range pol.Dimensions {
		v, ok := sub[dim]
		if !ok || len(v) > MaxSubjectValueBytes || (dim == policy.DimGlobal) != (len(v) == 0) {
			return false
		}
	}
	return true
}

// subjectParts renders the key parts: dimension name and value pairs in the
// policy's canonical dimension order. The key builder length-prefixes each
// part and HMACs them, so values cannot collide by shifting bytes between
// dimensions.
func subjectParts(pol policy.RatePolicy, sub Subject) [][]byte {
	parts := make([][]byte, 0, 2*len(pol.Dimensions))
	for _, dim := range pol.Dimensions {
		parts = append(parts, []byte(dim))
		if dim != policy.DimGlobal {
			parts = append(parts, sub[dim])
		}
	}
	return parts
}

func stateKind(a policy.RateAlgorithm) string {
	switch a {
	case policy.RateTokenBucket:
		return "bucket"
	case policy.RateSlidingLog:
		return "log"
	}
	return "window"
}
