package idempotency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/host/internal/hold"
	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Defaults.
const (
	DefaultLease          = 30 * time.Second
	DefaultRetention      = 10 * time.Minute
	DefaultReplayTTL      = 24 * time.Hour
	DefaultFailedTTL      = time.Hour
	DefaultPolicyRevision = "1"
	keyVersion            = 1
)

// Errors: outages and conflicts are outcomes (Execution.Kind), never
// errors; an error is a caller mistake or ctx's.
var (
	// ErrInvalidRequest: a scope, fingerprint or attempt out of bounds;
	// nothing was sent.
	ErrInvalidRequest = errors.New("idempotency: invalid request")
	// ErrCorrupt: the record key holds something no idempotency program
	// wrote.
	ErrCorrupt = errors.New("idempotency: record corrupt")
	// ErrUnknownRoute: the route is not on Config.Routes (it also matches
	// ErrInvalidRequest); nothing was sent.
	ErrUnknownRoute = errors.New("idempotency: route not on the allowlist")
	// ErrLeaseLost is the cause (context.Cause) of an action's context
	// that Execute ended because the processing lease is no longer this
	// attempt's: a renew found the record gone, another attempt's or no
	// longer in progress. It also matches ErrLeaseExpiredLocally.
	ErrLeaseLost = errors.New("idempotency: processing lease lost")
	// ErrLeaseExpiredLocally is the cause of an action's context that
	// Execute ended because no renew was confirmed before the lease's
	// local validity ran out (Redis unreachable, or its replies lost): the
	// record may be taken over or found ABANDONED by another claimer from
	// then on. It matches ErrLeaseLost.
	ErrLeaseExpiredLocally = fmt.Errorf("%w: its local validity ran out without a confirmed renew", ErrLeaseLost)
)

// Config configures an Executor.
type Config struct {
	// Role is the Redis role (default coordination; never the evictable
	// cache: a lost record runs the action again).
	Role policy.Role
	// Lease is the processing lease while a request is claimed or
	// executing (default 30 s); the executor renews it at a third while the
	// action runs, and ends the action's context when a tenth of it is
	// left (on the local monotonic clock) with no renew confirmed.
	Lease time.Duration
	// Retention is how long a claimed or executing record outlives its
	// lease (default 10 min): an owner that vanished mid-action is seen,
	// and its record goes ABANDONED instead of being taken over.
	Retention time.Duration
	// ReplayTTL is how long a completed response is replayed (default
	// 24 h), independent of the lease.
	ReplayTTL time.Duration
	// FailedTTL is how long FAILED_RETRYABLE and ABANDONED records stay
	// (default 1 h).
	FailedTTL time.Duration
	// MaxResponseBytes bounds a stored response (default 64 KiB).
	MaxResponseBytes int
	// PolicyRevision is stored with each record; a response is replayed
	// only under the same revision (default "1").
	PolicyRevision string
	// Routes, when set, is the closed list of routes (slugs, at most
	// MaxRoutes): a request for another route is ErrInvalidRequest, and the
	// metrics' route label is one of them. Empty: any route slug.
	Routes []string
}

func (c *Config) fill() error {
	if c.Role == "" {
		c.Role = policy.RoleCoordination
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.ReplayTTL == 0 {
		c.ReplayTTL = DefaultReplayTTL
	}
	if c.FailedTTL == 0 {
		c.FailedTTL = DefaultFailedTTL
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.PolicyRevision == "" {
		c.PolicyRevision = DefaultPolicyRevision
	}
	ms := func(d time.Duration) bool {
		return d >= time.Millisecond && d%time.Millisecond == 0 && d <= programs.MaxIdemTTL
	}
	switch {
	case c.Role == policy.RoleCache:
		return fmt.Errorf("%w: idempotency records never live on the evictable cache role", ErrInvalidRequest)
	case !ms(c.Lease) || !ms(c.Retention) || !ms(c.ReplayTTL) || !ms(c.FailedTTL) || c.Lease+c.Retention > programs.MaxIdemTTL:
		return fmt.Errorf("%w: durations must be whole milliseconds within 1ms..%s", ErrInvalidRequest, programs.MaxIdemTTL)
	case c.MaxResponseBytes < 1 || c.MaxResponseBytes > programs.MaxIdemResponseBytes:
		return fmt.Errorf("%w: max response bytes must be within 1..%d", ErrInvalidRequest, programs.MaxIdemResponseBytes)
	case len(c.PolicyRevision) > MaxPolicyRevisionBytes:
		return fmt.Errorf("%w: policy revision longer than %d bytes", ErrInvalidRequest, MaxPolicyRevisionBytes)
	case len(c.Routes) > MaxRoutes:
		return fmt.Errorf("%w: at most %d routes", ErrInvalidRequest, MaxRoutes)
	}
	for i, r := range c.Routes {
		if !ValidRoute(r) || slices.Contains(c.Routes[:i], r) {
			return fmt.Errorf("%w: routes must be distinct slugs of 1..64 lower-case letters, digits and '-'", ErrInvalidRequest)
		}
	}
	return nil
}

// budgetOverhead bounds what an idempotency call sends or receives
// besides the response payload: the record key, owner token, operation
// id, digest, codec id, numbers and the RESP framing.
const budgetOverhead = 2048

// checkBudgets refuses a response bound the deployment's guard would not
// let through: a complete sends the payload with its other arguments, a
// replaying claim receives it with the record's fields.
func checkBudgets(maxResponse int, b policy.Budgets) error {
	var errs []error
	if need := maxResponse + budgetOverhead; b.MaxRequestBytes > 0 && need > b.MaxRequestBytes {
		errs = append(errs, fmt.Errorf("idempotency: max-response-bytes %d needs budgets.max-request-bytes of at least %d on the role's deployment (it is %d): lower max-response-bytes or raise the budget",
			maxResponse, need, b.MaxRequestBytes))
	}
	if need := maxResponse + budgetOverhead; b.MaxReplyBytes > 0 && need > b.MaxReplyBytes {
		errs = append(errs, fmt.Errorf("idempotency: max-response-bytes %d needs budgets.max-reply-bytes of at least %d on the role's deployment (it is %d): lower max-response-bytes or raise the budget",
			maxResponse, need, b.MaxReplyBytes))
	}
	return errors.Join(errs...)
}

// Option configures an Executor beyond Config.
type Option func(*Executor)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(e *Executor) { e.log = l } }

// Executor runs actions at most once per claim attempt and replays
// completed responses. It is safe for concurrent use.
type Executor struct {
	exec *programs.Executor
	keys *keys.Builder
	cfg  Config
	log  *slog.Logger
	reg  prometheus.Registerer
	m    *metrics
	// routes is the allowlist (nil: any route slug).
	routes map[string]bool

	// running holds the attempts whose action this process may be running:
	// a second call of the same attempt never sends a start of its own.
	running sync.Map // string → struct{}

	// now and after are the monotonic clock and timers of the lease's
	// local validity (time.Now, time.After; a fake clock in tests).
	now   func() time.Time
	after func(time.Duration) <-chan time.Time

	// Test hooks.
	beforeStart  func()
	beforeRepeat func(step string)
	afterRenew   func(programs.IdemRenewStatus, error)
}

// batchFlights and batchSize bound the batching of the idempotency
// programs' calls (programs.Executor.Batched): a lone call is sent at
// once; calls arriving while 4 are in flight leave together, at most 64
// per pipeline, each its own atomic call with its own certainty. A
// processing lease's validity is measured from before its call is handed
// over, so time spent queued only shortens it.
const (
	batchFlights = 4
	batchSize    = 64
)

// New binds an executor to cfg.Role of rt.
func New(rt *runtime.Runtime, cfg Config, opts ...Option) (*Executor, error) {
	if rt == nil {
		return nil, fmt.Errorf("%w: New needs a runtime", ErrInvalidRequest)
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	dep, err := rt.Role(cfg.Role)
	if err != nil {
		return nil, err
	}
	if err := checkBudgets(cfg.MaxResponseBytes, dep.Budgets()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	e := &Executor{exec: dep.Programs().Batched(batchFlights, batchSize), keys: rt.Keys(), cfg: cfg, log: slog.Default(), now: time.Now, after: time.After}
	for _, o := range opts {
		if o != nil {
			o(e)
		}
	}
	if len(cfg.Routes) > 0 {
		e.routes = map[string]bool{}
		for _, r := range cfg.Routes {
			e.routes[r] = true
		}
	}
	if e.m, err = newMetrics(e.reg, cfg.Routes); err != nil {
		return nil, err
	}
	return e, nil
}

// Scope names one idempotent request family: the route (a key region slug
// such as "create-payment"), the principal it acts for, and the client's
// idempotency key. Principal and key are digested by the host's key
// builder (HMAC) into the record key; neither reaches Redis raw.
type Scope struct {
	Route     string
	Principal []byte
	Key       string
}

// Request is one execution.
type Request struct {
	Scope       Scope
	Fingerprint Fingerprint
	// Attempt is minted before the first send (owner.NewAttempt) and kept:
	// a retry after a lost reply repeats the same attempt.
	Attempt owner.Attempt
	// CodecID names the response encoding (default ResponseCodec).
	CodecID string
}

// Result is what an action reports. Build it with Committed,
// RetryableNoEffect or EffectUnknown; a panic or a zero Result counts as
// EffectUnknown.
type Result struct {
	kind     resultKind
	response []byte
	err      error
}

type resultKind uint8

const (
	resultUnknown resultKind = iota
	resultCommitted
	resultNoEffect
)

// Committed: the action's effect is durable; response (encoded with the
// request's codec) is what every replay returns.
func Committed(response []byte) Result { return Result{kind: resultCommitted, response: response} }

// RetryableNoEffect: the action provably changed nothing (validation
// refused, a transaction rolled back); the record becomes FAILED_RETRYABLE
// and a retry runs the action again.
func RetryableNoEffect(err error) Result { return Result{kind: resultNoEffect, err: err} }

// EffectUnknown: the action may or may not have had its effect (a timeout
// after a remote call, a commit whose reply was lost); the record becomes
// ABANDONED and every retry is RECOVERY_REQUIRED until reconciled.
func EffectUnknown(err error) Result { return Result{kind: resultUnknown, err: err} }

// Action is the work done at most once per attempt. Its context is
// cancelled, with cause ErrLeaseLost or ErrLeaseExpiredLocally, when the
// processing lease is lost or may have run out: the action must stop its
// work then. What it reports after that is never stored as a completion
// (see Abandoned).
type Action func(ctx context.Context) Result

// Kind is what an execution came to.
type Kind uint8

// Execution outcomes.
const (
	// Executed: the action ran and its response is stored (Recorded) —
	// or, when Recorded is false, ran but the completion could not be
	// confirmed: Response is the action's, and a retry may find the record
	// ABANDONED.
	Executed Kind = iota + 1
	// Replayed: the request completed before; Response is the stored one
	// and the action did not run.
	Replayed
	// InProgress: another owner (or another call of this attempt) holds
	// the request; RetryAfter is its remaining lease.
	InProgress
	// FingerprintMismatch: the key was used for another request.
	FingerprintMismatch
	// RecoveryRequired: a previous attempt's effect is unknown; nothing
	// runs until the record is reconciled.
	RecoveryRequired
	// PolicyMismatch: the stored response belongs to another codec or
	// policy revision and is not replayed.
	PolicyMismatch
	// FailedRetryable: the action reported no effect; a retry runs it
	// again (once Recorded; without it, the record may still be
	// EXECUTING: Inspect before concluding).
	FailedRetryable
	// Abandoned: the action's effect is unknown (it said so, panicked, or
	// its response could not be stored, or its processing lease was lost
	// or ran out while it ran: ActionErr then matches ErrLeaseLost);
	// retries are RECOVERY_REQUIRED.
	Abandoned
	// Conflict: the attempt's owner token holds this record under another
	// operation id (a caller bug).
	Conflict
	// Unavailable: Redis could not be reached before anything was sent;
	// the action did not run.
	Unavailable
	// Indeterminate: a claim or start reply was lost and could not be
	// reconciled; the action did not run. Retry with the same attempt.
	Indeterminate
)

var kindNames = [...]string{Executed: "EXECUTED", Replayed: "REPLAYED", InProgress: "IN_PROGRESS",
	FingerprintMismatch: "FINGERPRINT_MISMATCH", RecoveryRequired: "RECOVERY_REQUIRED", PolicyMismatch: "POLICY_MISMATCH",
	FailedRetryable: "FAILED_RETRYABLE", Abandoned: "ABANDONED", Conflict: "CONFLICT", Unavailable: "UNAVAILABLE",
	Indeterminate: "INDETERMINATE"}

func (k Kind) String() string {
	if int(k) <= 0 || int(k) >= len(kindNames) {
		return "INVALID"
	}
	return kindNames[k]
}

// Execution is the outcome of Execute.
type Execution struct {
	Kind Kind
	// Response is the stored response (Replayed) or the action's
	// (Executed).
	Response []byte
	// Recorded: Redis confirmed the outcome's record — the response stored
	// for replay (Executed), or the record marked FAILED_RETRYABLE or
	// ABANDONED (FailedRetryable, Abandoned). False when that write's
	// reply was lost (it may have applied: Inspect with the same attempt
	// reconciles) or it did not apply; never true on a guess.
	Recorded bool
	// RetryAfter is the holder's remaining lease (InProgress).
	RetryAfter time.Duration
	// Attempt is the record's attempt number when this call owned it.
	Attempt int64
	// ActionErr is the error the action reported (FailedRetryable,
	// Abandoned).
	ActionErr error
	// Cause is the runtime's error (Unavailable, Indeterminate).
	Cause error
}

// call is one Execute's resolved request.
type call struct {
	key     keys.Key
	req     Request
	attempt programs.IdemAttempt
	fp      string
}

func (e *Executor) prepare(r Request) (call, error) {
	switch {
	case r.Attempt.IsZero():
		return call{}, fmt.Errorf("%w: no attempt (mint one with owner.NewAttempt)", ErrInvalidRequest)
	case len(r.Scope.Principal) == 0 || len(r.Scope.Principal) > 1024:
		return call{}, fmt.Errorf("%w: principal must be 1..1024 bytes", ErrInvalidRequest)
	case len(r.Scope.Key) == 0 || len(r.Scope.Key) > MaxKeyBytes:
		return call{}, fmt.Errorf("%w: key must be 1..%d bytes", ErrInvalidRequest, MaxKeyBytes)
	case r.Fingerprint == Fingerprint{}:
		return call{}, fmt.Errorf("%w: no fingerprint", ErrInvalidRequest)
	}
	if r.CodecID == "" {
		r.CodecID = ResponseCodec
	}
	if len(r.CodecID) > 64 {
		return call{}, fmt.Errorf("%w: codec id longer than 64 bytes", ErrInvalidRequest)
	}
	if e.routes != nil && !e.routes[r.Scope.Route] {
		return call{}, fmt.Errorf("%w: %w", ErrInvalidRequest, ErrUnknownRoute)
	}
	k, err := e.keys.Build(keys.Spec{Capability: keys.CapIdem, Region: r.Scope.Route, KeyVersion: keyVersion, Kind: "record",
		Parts: [][]byte{r.Scope.Principal, []byte(r.Scope.Key)}})
	if err != nil {
		return call{}, fmt.Errorf("%w: route must be a slug of 1..64 lower-case letters, digits and '-'", ErrInvalidRequest)
	}
	return call{key: k, req: r, fp: r.Fingerprint.String(), attempt: programs.IdemAttempt{
		Owner: []byte(r.Attempt.Owner().Reveal()), OperationID: []byte(r.Attempt.OperationID())}}, nil
}

// newOpID names one transition of one call: a repeat after a lost reply
// reuses it (the program answers ALREADY_..._SAME_OPERATION), and no other
// call can know it.
func newOpID(step string) []byte {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return []byte(step + "-" + hex.EncodeToString(b[:]))
}

// Execute claims the request, runs action at most once for this attempt
// and stores its response, or replays the stored one. See Kind for what
// each outcome means; the action runs only after a start this call sent
// was confirmed. A stored response that no longer matches its digest is
// ErrCorruptResponse, never replayed.
func (e *Executor) Execute(ctx context.Context, r Request, action Action) (Execution, error) {
	c, err := e.prepare(r)
	if err != nil {
		return Execution{}, err
	}
	ex, err := e.execute(ctx, c, action)
	e.m.executed(r.Scope.Route, ex, err)
	return ex, err
}

func (e *Executor) execute(ctx context.Context, c call, action Action) (Execution, error) {
	ex, own, err := e.claim(ctx, c)
	if err != nil || ex.Kind != 0 {
		return ex, err
	}
	// One call per attempt at a time in this process: a re-entrant call
	// of the same attempt never starts (it could not tell its own lost
	// start from the other call's running action).
	slot := c.key.Redis() + "\x00" + string(c.attempt.Owner) + "\x00" + string(c.attempt.OperationID)
	if _, busy := e.running.LoadOrStore(slot, struct{}{}); busy {
		return Execution{Kind: InProgress, Attempt: own.Attempt, RetryAfter: e.cfg.Lease}, nil
	}
	defer e.running.Delete(slot)
	return e.startAndRun(ctx, c, own, action)
}

// claim claims c; a lost reply is repeated once with the same attempt and
// then inspected. It returns the owner handle (Kind 0) or the outcome.
func (e *Executor) claim(ctx context.Context, c call) (Execution, programs.IdemOwner, error) {
	req := programs.IdemClaimRequest{Attempt: c.attempt, Fingerprint: c.fp, Lease: e.cfg.Lease, Retention: e.cfg.Retention,
		CodecID: c.req.CodecID, PolicyRevision: e.cfg.PolicyRevision}
	// A repeat that fails before sending does not undo the first send's
	// uncertainty (repeatable keeps the first lost reply's error).
	res, err := repeatable(ctx, e, "claim", func() (programs.IdemClaimResult, error) { return e.exec.IdempotencyClaim(ctx, c.key, req) })
	if err != nil {
		if certainty.Classify(err, true) == certainty.Indeterminate {
			e.m.claimed(c.req.Scope.Route, "INDETERMINATE")
		} else if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
			e.m.claimed(c.req.Scope.Route, "UNAVAILABLE")
		}
		return e.claimFailed(ctx, c, err)
	}
	e.m.claimed(c.req.Scope.Route, res.Status.String())
	switch res.Status {
	case programs.IdemClaimAcquired, programs.IdemClaimTakenOverClaimed:
		own, _ := res.Owned(c.attempt)
		return Execution{}, own, nil
	case programs.IdemClaimReplayedAcquire:
		own, _ := res.Owned(c.attempt)
		if res.Record.State == programs.IdemStateExecuting {
			// This attempt's action already started (another call, or a
			// crashed one): never run it again on that alone.
			return Execution{Kind: InProgress, Attempt: own.Attempt, RetryAfter: res.Record.Lease}, own, nil
		}
		return Execution{}, own, nil
	case programs.IdemClaimCompletedReplay:
		return e.replay(c, res.Response)
	case programs.IdemClaimInProgress:
		return Execution{Kind: InProgress, RetryAfter: res.RetryAfter(), Attempt: res.Record.Attempt}, programs.IdemOwner{}, nil
	case programs.IdemClaimRecoveryRequired:
		return Execution{Kind: RecoveryRequired, Attempt: res.Record.Attempt}, programs.IdemOwner{}, nil
	case programs.IdemClaimFingerprintMismatch:
		return Execution{Kind: FingerprintMismatch}, programs.IdemOwner{}, nil
	case programs.IdemClaimOwnerOperationConflict:
		return Execution{Kind: Conflict}, programs.IdemOwner{}, nil
	case programs.IdemClaimPolicyMismatch:
		return Execution{Kind: PolicyMismatch}, programs.IdemOwner{}, nil
	case programs.IdemClaimWrongType:
		return Execution{}, programs.IdemOwner{}, ErrCorrupt
	}
	return Execution{}, programs.IdemOwner{}, fmt.Errorf("idempotency: idempotency-claim-v1 answered %s to a validated request", res.Status)
}

// claimFailed maps a claim that got no answer: before the send it is
// Unavailable; after, the inspection with the same attempt decides.
func (e *Executor) claimFailed(ctx context.Context, c call, err error) (Execution, programs.IdemOwner, error) {
	o := certainty.Classify(err, true)
	if o != certainty.Indeterminate {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return Execution{}, programs.IdemOwner{}, ctx.Err()
		}
		return Execution{Kind: Unavailable, Cause: err}, programs.IdemOwner{}, nil
	}
	ins, ierr := e.exec.IdempotencyInspect(ctx, c.key, programs.IdemInspectRequest{Attempt: c.attempt, Fingerprint: c.fp,
		CodecID: c.req.CodecID, PolicyRevision: e.cfg.PolicyRevision})
	if ierr != nil {
		return Execution{Kind: Indeterminate, Cause: err}, programs.IdemOwner{}, nil
	}
	switch ins.Status {
	case programs.IdemInspectClaimedSameOperation:
		return Execution{}, programs.IdemOwner{Owner: c.attempt.Owner, Attempt: ins.Record.Attempt}, nil
	case programs.IdemInspectCompletedReplay:
		return e.replay(c, ins.Response)
	case programs.IdemInspectExecutingSameOperation:
		return Execution{Kind: InProgress, Attempt: ins.Record.Attempt, RetryAfter: ins.Record.Lease}, programs.IdemOwner{}, nil
	case programs.IdemInspectInProgressOther:
		return Execution{Kind: InProgress, RetryAfter: ins.Record.Lease}, programs.IdemOwner{}, nil
	case programs.IdemInspectAbandoned:
		return Execution{Kind: RecoveryRequired}, programs.IdemOwner{}, nil
	case programs.IdemInspectFingerprintMismatch:
		return Execution{Kind: FingerprintMismatch}, programs.IdemOwner{}, nil
	case programs.IdemInspectPolicyMismatch:
		return Execution{Kind: PolicyMismatch}, programs.IdemOwner{}, nil
	}
	// ABSENT or FAILED_RETRYABLE: the lost claim did not apply, or was
	// overtaken; nothing ran. The caller retries with the same attempt.
	return Execution{Kind: Indeterminate, Cause: err}, programs.IdemOwner{}, nil
}

func (e *Executor) replay(c call, resp programs.IdemResponse) (Execution, programs.IdemOwner, error) {
	payload, err := storedPayload(resp)
	if err != nil {
		e.log.Warn("idempotency: a stored response does not match its digest; not replayed", "route", c.req.Scope.Route)
		return Execution{}, programs.IdemOwner{}, err
	}
	e.m.bytes(c.req.Scope.Route, "replay", len(payload))
	return Execution{Kind: Replayed, Response: payload}, programs.IdemOwner{}, nil
}

// storedPayload returns a completed record's response after checking it
// against the digest stored beside it (the host's SHA-256 of the payload,
// written by the same complete): a response that changed at rest, or that
// another writer stored, is ErrCorruptResponse and never replayed.
func storedPayload(resp programs.IdemResponse) ([]byte, error) {
	sum := sha256.Sum256(resp.Payload)
	if resp.Digest != hex.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("%w: the payload does not match its stored digest", ErrCorruptResponse)
	}
	return resp.Payload, nil
}

// startAndRun marks the record EXECUTING and runs the action only on a
// start this call sent and saw confirmed.
func (e *Executor) startAndRun(ctx context.Context, c call, own programs.IdemOwner, action Action) (Execution, error) {
	op := newOpID("start")
	// The lease a confirmed start sets runs from when Redis applied it:
	// not before this first send (a repeat's ALREADY_STARTED names it).
	sent := e.now()
	if e.beforeStart != nil {
		e.beforeStart()
	}
	res, err := repeatable(ctx, e, "start", func() (programs.IdemTransitionResult[programs.IdemStartStatus], error) {
		return e.exec.IdempotencyStart(ctx, c.key, own, op, e.cfg.Lease)
	})
	if err != nil {
		// Not started as far as this call knows: the action never ran, so
		// give the claim back (or mark it retryable if the start did apply).
		e.giveBack(c, own)
		if certainty.Classify(err, true) == certainty.Indeterminate {
			e.m.lost(c.req.Scope.Route, "start")
			return Execution{Kind: Indeterminate, Attempt: own.Attempt, Cause: err}, nil
		}
		return Execution{Kind: Unavailable, Attempt: own.Attempt, Cause: err}, nil
	}
	switch res.Status {
	case programs.IdemStarted, programs.IdemAlreadyStartedSameOperation:
		// ALREADY_STARTED_SAME_OPERATION names this call's own op id: its
		// first start applied and the reply was lost; nothing ran yet.
	case programs.IdemStartNotOwner, programs.IdemStartAbsent, programs.IdemStartNotClaimed:
		return Execution{Kind: InProgress, Attempt: own.Attempt}, nil
	case programs.IdemStartWrongType:
		return Execution{}, ErrCorrupt
	default:
		return Execution{}, fmt.Errorf("idempotency: idempotency-start-v1 answered %s", res.Status)
	}
	result, lost := e.run(ctx, c, own, sent, action)
	return e.finish(c, own, result, lost), nil
}

// giveBack releases a claim whose action never ran, or marks it
// retryable if its start applied after all. Best effort: if Redis is
// unreachable the lease runs out and the record is taken over or
// abandoned by the rules.
func (e *Executor) giveBack(c call, own programs.IdemOwner) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rel, err := e.exec.IdempotencyRelease(ctx, c.key, own, newOpID("release"))
	if err != nil && certainty.Classify(err, true) == certainty.Indeterminate {
		e.m.lost(c.req.Scope.Route, "release")
	}
	if err == nil && rel.Status == programs.IdemReleaseExecutionAlreadyStarted {
		_, err = e.exec.IdempotencyFail(ctx, c.key, own, newOpID("fail"), programs.IdemRetryable, e.cfg.FailedTTL)
		if err != nil && certainty.Classify(err, true) == certainty.Indeterminate {
			e.m.lost(c.req.Scope.Route, "fail")
		}
	}
}

// run runs the action under the processing lease's watchdog (hold.Watch),
// which renews the lease every third of it and ends the action's context
// when the record is no longer this owner's (ErrLeaseLost) or the lease's
// local validity runs out with no renew confirmed
// (ErrLeaseExpiredLocally); sent is the local time just before the
// confirmed start was sent. lost is the watchdog's cause when it ended the
// context. A panic is an unknown effect.
//
// The validity is the hold's: validity(lease) — the lease minus its drift
// budget, a tenth — from just before the send of the last confirmed start
// or renew, on the monotonic clock (the lease on Redis runs from when it
// applied, which is later). Only a confirmed renew extends it; losing the
// lease is decided by it, never by counting failed renews.
func (e *Executor) run(ctx context.Context, c call, own programs.IdemOwner, sent time.Time, action Action) (res Result, lost error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h := hold.New(e.now, driftBudget(e.cfg.Lease), ErrLeaseExpiredLocally, sent, e.cfg.Lease, nil)
	stop, stopped := make(chan struct{}), make(chan struct{})
	end := func(cause error) {
		if errors.Is(cause, ErrLeaseExpiredLocally) {
			e.log.Warn("idempotency: the processing lease ran out with no confirmed renew; the action's context is cancelled",
				"route", c.req.Scope.Route)
		}
		cancel(cause)
	}
	go func() {
		defer close(stopped)
		hold.Watch(actx, h, e.cfg.Lease/3, func(rctx context.Context) bool { return e.renew(rctx, c, own, h, cancel) },
			end, stop, hold.Options{After: e.after, From: sent})
	}()
	defer func() {
		close(stop)
		<-stopped
		if p := recover(); p != nil {
			res = EffectUnknown(fmt.Errorf("idempotency: the action panicked: %v", p))
		}
		if cause := context.Cause(actx); errors.Is(cause, ErrLeaseLost) {
			lost = cause
		}
	}()
	return action(actx), nil
}

// driftBudget is the part of the lease that a confirmed start or renew
// does not count as valid locally: a tenth, which covers the clock-rate
// difference between this process and Redis and the time the action takes
// to stop once its context ends.
func driftBudget(lease time.Duration) time.Duration { return lease / 10 }

// validity is how long a confirmed start or renew keeps the lease valid
// locally: the lease minus its drift budget (nine tenths).
func validity(lease time.Duration) time.Duration { return lease - driftBudget(lease) }

// renew is the watchdog's renew of the processing lease. It reports false
// when the renew was not confirmed (Redis unreachable, or the reply lost:
// it may have applied, but only a confirmed renew extends the validity),
// so that the next comes sooner, well inside what is left. When Redis
// answers that the record is no longer this owner's, the action's context
// ends with ErrLeaseLost at once, even if the action has just returned:
// what it reports is then not stored as a completion.
func (e *Executor) renew(ctx context.Context, c call, own programs.IdemOwner, h *hold.Hold, cancel context.CancelCauseFunc) bool {
	sent := e.now()
	res, err := e.exec.IdempotencyRenew(ctx, c.key, own, newOpID("renew"), e.cfg.Lease)
	if e.afterRenew != nil {
		e.afterRenew(res.Status, err)
	}
	e.m.renewed(c.req.Scope.Route, renewLabel(res.Status, err))
	switch {
	case err == nil && (res.Status == programs.IdemRenewed || res.Status == programs.IdemAlreadyRenewedSameOperation):
		h.Extend(sent, e.cfg.Lease)
		return true
	case err == nil:
		cancel(ErrLeaseLost)
		h.End(hold.Lost, ErrLeaseLost)
		return true
	}
	if certainty.Classify(err, true) == certainty.Indeterminate {
		e.m.lost(c.req.Scope.Route, "renew")
	}
	return false
}

// finish records the action's result: complete, mark retryable or
// abandon. It runs on a context of its own: the caller giving up must not
// leave a finished action unrecorded. lost (ErrLeaseLost or
// ErrLeaseExpiredLocally) is why the watchdog ended the action's context,
// if it did: a response the action commits after that is not stored — the
// lease may have run out and the record been found ABANDONED or even taken
// over meanwhile — and the record is marked ABANDONED instead.
func (e *Executor) finish(c call, own programs.IdemOwner, r Result, lost error) Execution {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if lost != nil {
		switch {
		case r.kind == resultCommitted:
			r = EffectUnknown(fmt.Errorf("%w: the action committed after its context ended", lost))
		case !errors.Is(r.err, lost):
			r.err = errors.Join(lost, r.err)
		}
	}
	out := Execution{Attempt: own.Attempt, ActionErr: r.err}
	switch r.kind {
	case resultCommitted:
		out.Kind, out.Response = Executed, r.response
		if len(r.response) > e.cfg.MaxResponseBytes {
			out.Kind, out.ActionErr = Abandoned, fmt.Errorf("%w: %d bytes", programs.ErrResponseTooLarge, len(r.response))
			out.Recorded = e.fail(ctx, c, own, programs.IdemAbandon)
			return out
		}
		sum := sha256.Sum256(r.response)
		req := programs.IdemCompleteRequest{Owner: own, OperationID: newOpID("complete"),
			Response:  programs.IdemResponse{Version: 1, Digest: hex.EncodeToString(sum[:]), Payload: r.response},
			ReplayTTL: e.cfg.ReplayTTL, MaxResponseBytes: e.cfg.MaxResponseBytes}
		for try := 0; try < 2; try++ {
			res, err := e.exec.IdempotencyComplete(ctx, c.key, req)
			if err == nil {
				out.Recorded = res.Status == programs.IdemCompleted || res.Status == programs.IdemAlreadyCompletedSameResult
				if out.Recorded {
					e.m.bytes(c.req.Scope.Route, "complete", len(r.response))
				}
				if !out.Recorded {
					e.log.Warn("idempotency: an executed action's response was not recorded", "route", c.req.Scope.Route,
						"status", res.Status.String())
				}
				return out
			}
			if certainty.Classify(err, true) != certainty.Indeterminate {
				break
			}
			if e.beforeRepeat != nil {
				e.beforeRepeat("complete")
			}
		}
		e.m.lost(c.req.Scope.Route, "complete")
		e.log.Warn("idempotency: an executed action's completion could not be confirmed", "route", c.req.Scope.Route)
		return out
	case resultNoEffect:
		out.Kind = FailedRetryable
		out.Recorded = e.fail(ctx, c, own, programs.IdemRetryable)
	default:
		out.Kind = Abandoned
		out.Recorded = e.fail(ctx, c, own, programs.IdemAbandon)
	}
	return out
}

// fail marks the attempt's record retryable or abandoned and reports
// whether Redis confirmed the mark. A lost reply (also on the repeat)
// leaves it unconfirmed: the mark may have applied.
func (e *Executor) fail(ctx context.Context, c call, own programs.IdemOwner, d programs.IdemDisposition) bool {
	op := newOpID("fail")
	for try := 0; try < 2; try++ {
		res, err := e.exec.IdempotencyFail(ctx, c.key, own, op, d, e.cfg.FailedTTL)
		if err == nil {
			switch res.Status {
			case programs.IdemMarkedRetryable, programs.IdemMarkedAbandoned, programs.IdemAlreadyMarkedSameOperation:
				return true
			}
			e.log.Warn("idempotency: marking a failed action did not apply", "route", c.req.Scope.Route, "status", res.Status.String())
			return false
		}
		if certainty.Classify(err, true) != certainty.Indeterminate {
			e.log.Warn("idempotency: marking a failed action did not apply; its lease will expire", "route", c.req.Scope.Route, "error", err)
			return false
		}
		if try == 0 && e.beforeRepeat != nil {
			e.beforeRepeat("fail")
		}
	}
	e.m.lost(c.req.Scope.Route, "fail")
	e.log.Warn("idempotency: marking a failed action could not be confirmed", "route", c.req.Scope.Route)
	return false
}

// renewLabel is the result label of one renew.
func renewLabel(st programs.IdemRenewStatus, err error) string {
	switch {
	case err == nil:
		return st.String()
	case certainty.Classify(err, true) == certainty.Indeterminate:
		return "INDETERMINATE"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return resultError
	}
	return "UNAVAILABLE"
}
