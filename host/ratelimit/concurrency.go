package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// The concurrency limiter (§20.8) bounds work in flight, not a rate: a
// permit is acquired for an owner token, renewed while the work runs and
// released when it ends; a holder that dies without releasing loses its
// permit when the permit's TTL runs out. It is never emulated with
// token-bucket cost. State is one Redis sorted set per (policy revision,
// subject), kept by the rate-concurrency-{acquire,renew,release}-v3
// programs (v1's state in fewer Redis calls than v2: v1, v2 and v3 hosts
// share it during a rolling upgrade). v3 never lowers the set's key TTL
// (PEXPIRE GT) and leaves expired owners for the next acquire to prune;
// both are cleanup only, every decision is v2's.

// Concurrency bounds.
const (
	// concurrencyKind is the key kind of a permit set.
	concurrencyKind = "concurrency"
	// DefaultReleaseTimeout bounds a release whose context is already done
	// (see Lease.Release) and the clean-up release after an indeterminate
	// AcquireLease; with attempt-timeout configured the bound is twice that
	// (the release and its one repeat).
	DefaultReleaseTimeout = time.Second
)

// Errors of the concurrency limiter. A *PermitError matches exactly one of
// them with errors.Is.
var (
	// ErrPermitContended: every permit is held; retry after the outcome's
	// RetryAfter (or sooner: holders usually release before they expire).
	ErrPermitContended = errors.New("ratelimit: every concurrency permit is held")
	// ErrPermitUnavailable: the limiter could not decide (Redis unavailable,
	// overloaded, clock unsafe, deadline passed, misconfiguration). A
	// concurrency limiter fails closed: the work must not start.
	ErrPermitUnavailable = errors.New("ratelimit: concurrency limiter unavailable")
	// ErrPermitIndeterminate: the call may have applied; nothing is known.
	ErrPermitIndeterminate = errors.New("ratelimit: concurrency permit state is indeterminate")
	// ErrPermitInvalid: the request itself is invalid (unknown policy, not a
	// concurrency policy, wrong subject dimensions, TTL out of bounds).
	ErrPermitInvalid = errors.New("ratelimit: invalid concurrency request")
	// ErrPermitNotHeld: renew or release found no live permit for the owner
	// (never acquired, expired and reclaimed, already released, or another
	// owner's token).
	ErrPermitNotHeld = errors.New("ratelimit: concurrency permit not held")
	// ErrInvalidOwnerToken: ParseOwnerToken was given something that is not
	// an owner token.
	ErrInvalidOwnerToken = errors.New("ratelimit: malformed owner token")
)

// OwnerToken is the secret that proves ownership of a permit: whoever holds
// it can renew and release that permit, nobody else can. It is the host's
// one owner token type (host/owner): minted from crypto/rand, redacted by
// every formatting path; only Reveal returns it.
type OwnerToken = owner.Token

func newOwnerToken() OwnerToken { return owner.New() }

// ParseOwnerToken accepts exactly the form the host mints (32 lower-case
// hex digits), so a client cannot choose a weak or oversized token.
func ParseOwnerToken(s string) (OwnerToken, error) {
	t, err := owner.Parse(s)
	if err != nil {
		return OwnerToken{}, ErrInvalidOwnerToken
	}
	return t, nil
}

// ConcurrencyOp is the operation an outcome is about.
type ConcurrencyOp uint8

// Concurrency operations.
const (
	_ ConcurrencyOp = iota
	OpAcquire
	OpRenew
	OpRelease
)

// String returns the operation's name (a metric label value).
func (o ConcurrencyOp) String() string {
	switch o {
	case OpAcquire:
		return "acquire"
	case OpRenew:
		return "renew"
	case OpRelease:
		return "release"
	}
	return "invalid"
}

// PermitStatus is what the global limiter answered to an Evaluated
// operation.
type PermitStatus uint8

// Permit statuses. The zero value is invalid.
const (
	_ PermitStatus = iota
	// PermitAcquired: the owner holds a permit until ExpiresAt.
	PermitAcquired
	// PermitContended: every permit is held; nothing changed.
	PermitContended
	// PermitRenewed: the owner's permit now lasts until ExpiresAt.
	PermitRenewed
	// PermitReleased: the owner's permit was returned.
	PermitReleased
	// PermitNotHeld: renew or release found no live permit for this owner
	// token: never acquired, expired (and reclaimed by the next call),
	// already released, or another owner's token. Nothing changed.
	PermitNotHeld
)

// String returns the status name (a metric label and API value).
func (s PermitStatus) String() string {
	switch s {
	case PermitAcquired:
		return "acquired"
	case PermitContended:
		return "contended"
	case PermitRenewed:
		return "renewed"
	case PermitReleased:
		return "released"
	case PermitNotHeld:
		return "not-held"
	}
	return "invalid"
}

// ConcurrencyOutcome is the sealed result of one acquire, renew or
// release. Kind is Evaluated (the global limiter answered; Status says
// what), Unavailable (no answer, nothing happened or the request was
// invalid; Category says why) or Indeterminate (the call may have applied).
// It is never Degraded: there is no fallback for permits (§21, see
// policy.RateConcurrency's validation), so a limiter that cannot decide
// fails closed.
type ConcurrencyOutcome struct {
	op         ConcurrencyOp
	kind       Kind
	status     PermitStatus
	policy     string
	revision   string
	limit      int64
	inUse      int64
	ttl        time.Duration
	expiresAt  time.Time
	retryAfter time.Duration
	category   FailureCategory
	cert       certainty.Outcome
	reconciled bool
	lease      *Lease
}

// Op is the operation.
func (o ConcurrencyOutcome) Op() ConcurrencyOp { return o.op }

// Kind is Evaluated, Unavailable or Indeterminate.
func (o ConcurrencyOutcome) Kind() Kind { return o.kind }

// Status is the global limiter's answer; ok is false unless Kind is
// Evaluated.
func (o ConcurrencyOutcome) Status() (PermitStatus, bool) {
	return o.status, o.kind == Evaluated
}

// Acquired reports whether an acquire obtained a permit (the only outcome
// that lets work start).
func (o ConcurrencyOutcome) Acquired() bool { return o.kind == Evaluated && o.status == PermitAcquired }

// Policy and Revision identify the policy revision the permit belongs to
// ("" for an unknown policy).
func (o ConcurrencyOutcome) Policy() string { return o.policy }

// Revision is the policy revision of the permit set.
func (o ConcurrencyOutcome) Revision() string { return o.revision }

// Limit is the maximum number of permits (Evaluated acquire only).
func (o ConcurrencyOutcome) Limit() int64 { return o.limit }

// InUse is the number of live permits after the call (Evaluated only).
func (o ConcurrencyOutcome) InUse() int64 { return o.inUse }

// ExpiresAt is the permit's expiry in Redis server time after an acquire or
// renew (telemetry: the local validity of a Lease is what work must
// respect).
func (o ConcurrencyOutcome) ExpiresAt() time.Time { return o.expiresAt }

// TTL is the permit life the call applied (acquired, renewed).
func (o ConcurrencyOutcome) TTL() time.Duration { return o.ttl }

// RetryAfter is the suggested wait: until the earliest permit expires for
// a contended acquire, a short fixed back-off without an answer, 0 else.
func (o ConcurrencyOutcome) RetryAfter() time.Duration { return o.retryAfter }

// Category says why there is no answer (Unavailable, Indeterminate).
func (o ConcurrencyOutcome) Category() FailureCategory { return o.category }

// Certainty is the execution certainty of the Redis call behind the
// outcome (runtime/certainty): APPLIED for acquired/renewed/released,
// CONFLICT for contended, NOT_APPLIED for not-held,
// UNAVAILABLE_BEFORE_SEND/OVERLOADED_BEFORE_SEND when nothing was sent,
// REJECTED for invalid requests and misconfiguration, INDETERMINATE when
// the call may have applied.
func (o ConcurrencyOutcome) Certainty() certainty.Outcome { return o.cert }

// Reconciled reports that the answer came from the single repeat after a
// timeout. Acquired then means the first attempt had already taken the
// permit (ALREADY_HELD, not extended); NotHeld on release means the
// desired absence holds, possibly because the first attempt released it.
func (o ConcurrencyOutcome) Reconciled() bool { return o.reconciled }

// Lease is the permit handle of an acquire: set when Acquired, and when
// Indeterminate so the caller can release what may be held (§22.9: the
// token of an attempt is never hidden from its caller). Nil otherwise and
// for renew and release.
func (o ConcurrencyOutcome) Lease() *Lease { return o.lease }

// Err maps the outcome to nil (acquired, renewed, released) or a
// *PermitError matching ErrPermitContended, ErrPermitNotHeld,
// ErrPermitUnavailable, ErrPermitIndeterminate or ErrPermitInvalid.
func (o ConcurrencyOutcome) Err() error {
	if o.kind == Evaluated && (o.status == PermitAcquired || o.status == PermitRenewed || o.status == PermitReleased) {
		return nil
	}
	return &PermitError{Outcome: o}
}

// PermitError is the error form of an outcome that did not do what was
// asked. It carries no owner token and no subject.
type PermitError struct{ Outcome ConcurrencyOutcome }

func (e *PermitError) sentinel() error {
	o := e.Outcome
	switch {
	case o.kind == Evaluated && o.status == PermitContended:
		return ErrPermitContended
	case o.kind == Evaluated && o.status == PermitNotHeld:
		return ErrPermitNotHeld
	case o.kind == Indeterminate:
		return ErrPermitIndeterminate
	case o.category == CategoryInvalidRequest:
		return ErrPermitInvalid
	}
	return ErrPermitUnavailable
}

// Error implements error (operation, policy id and category only).
func (e *PermitError) Error() string {
	msg := fmt.Sprintf("%s: %s policy %s", e.sentinel().Error(), e.Outcome.op, e.Outcome.policy)
	if e.Outcome.category != CategoryNone {
		msg += " (" + string(e.Outcome.category) + ")"
	}
	return msg
}

// Is matches the error's sentinel.
func (e *PermitError) Is(target error) bool { return target == e.sentinel() }

// ConcurrencyRequest is one acquire.
type ConcurrencyRequest struct {
	// Policy is the id of a concurrency policy in the active set.
	Policy string
	// Subject holds exactly the policy's dimensions (raw values, only ever
	// digested into the permit set's key).
	Subject Subject
	// TTL is the permit's life: 0 takes the policy's permit-ttl, anything
	// else must be whole milliseconds within policy.RateMinPermitTTL and
	// the policy's permit-ttl.
	TTL time.Duration
	// Deadline bounds the call including its single repeat (zero: ctx only).
	Deadline time.Time
}

// PermitRef names a permit held by a client that keeps the owner token
// itself (the sidecar API): the limiter keeps no per-permit state, so the
// client sends back the policy, revision, subject and token it acquired
// with. In-process callers use a *Lease instead.
type PermitRef struct {
	Policy string
	// Revision is the revision the permit was acquired under ("" = the
	// active one). A permit lives in its revision's set: after a policy
	// swap it stays renewable and releasable there, while new acquires
	// count in the new revision's set.
	Revision string
	Subject  Subject
	Owner    OwnerToken
	// TTL of a renew, as in ConcurrencyRequest (ignored by release).
	TTL      time.Duration
	Deadline time.Time
}

// ConcurrencyLimiter is the concurrency-permit port of §20.8
// (acquire(subject, ttl), renew(owner), release(owner)): a separate port
// from rate evaluation, over the same policy set (concurrency policies are
// declared with the others and swapped with them). It is safe for
// concurrent use and keeps no per-permit state: a Lease does.
type ConcurrencyLimiter struct {
	lim            *Limiter
	log            *slog.Logger
	m              *concurrencyMetrics
	releaseTimeout time.Duration
	// beforeRetry runs before a repeat, beforeCleanup before AcquireLease
	// releases after an indeterminate acquire (tests heal faults with them).
	beforeRetry   func()
	beforeCleanup func()
}

// NewConcurrencyLimiter returns the concurrency port of l. WithRegisterer
// registers its metrics (caphost_rate_concurrency_*); WithLogger overrides
// l's logger.
func NewConcurrencyLimiter(l *Limiter, opts ...Option) (*ConcurrencyLimiter, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: NewConcurrencyLimiter needs a limiter", ErrConfig)
	}
	o := options{log: l.log}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	m, err := newConcurrencyMetrics(o.reg)
	if err != nil {
		return nil, err
	}
	rt := DefaultReleaseTimeout
	if l.cfg.AttemptTimeout > 0 {
		// Room for the release and its one repeat.
		rt = 2 * l.cfg.AttemptTimeout
	}
	return &ConcurrencyLimiter{lim: l, log: o.log, m: m, releaseTimeout: rt, beforeRetry: o.beforeRetry}, nil
}

// Policies returns the active policy set (the limiter's: concurrency
// policies are declared and swapped with the rate policies).
func (c *ConcurrencyLimiter) Policies() *policy.RatePolicySet { return c.lim.Policies() }

// permitSender sends the v3 permit programs: the limiter's Batcher, so
// that concurrent acquires, renews and releases share pipelines with each
// other and with rate evaluations (each still its own atomic call with its
// own certainty), or its Executor when batching is off.
type permitSender interface {
	RateConcurrencyAcquireV3(context.Context, keys.Key, programs.PermitAcquireRequest) (programs.PermitAcquireResult, error)
	RateConcurrencyRenewV3(context.Context, keys.Key, programs.PermitRenewRequest) (programs.PermitRenewResult, error)
	RateConcurrencyReleaseV3(context.Context, keys.Key, programs.PermitReleaseRequest) (programs.PermitReleaseResult, error)
}

// permits is where the permit programs are sent.
func (c *ConcurrencyLimiter) permits() permitSender {
	if c.lim.batch != nil {
		return c.lim.batch
	}
	return c.lim.exec
}

// permitPolicy is what one operation needs of its policy revision.
type permitPolicy struct {
	pol policy.RatePolicy
	key keys.Key
}

// resolve finds the concurrency policy id (at revision rev, "" = active)
// and builds the permit set's key from the subject. Failures are the
// request's own (invalid-request) except a key-builder failure
// (misconfigured).
func (c *ConcurrencyLimiter) resolve(op ConcurrencyOp, id, rev string, sub Subject) (permitPolicy, *ConcurrencyOutcome) {
	pol, ok := c.lim.Policies().Policy(id)
	if !ok {
		o := c.fail(op, policy.RatePolicy{}, Unavailable, CategoryInvalidRequest, certainty.Rejected)
		return permitPolicy{}, &o
	}
	if pol.Algorithm != policy.RateConcurrency || !subjectMatches(pol, sub) {
		o := c.fail(op, pol, Unavailable, CategoryInvalidRequest, certainty.Rejected)
		return permitPolicy{}, &o
	}
	if rev != "" && rev != pol.Revision {
		// An older revision's permit set: same id, the client's revision.
		// The slug check keeps the key region unambiguous (id--revision).
		if !validRevision(rev) {
			o := c.fail(op, pol, Unavailable, CategoryInvalidRequest, certainty.Rejected)
			return permitPolicy{}, &o
		}
		pol.Revision = rev
	}
	key, err := c.lim.keys.Build(keys.Spec{Capability: keys.CapRate, Region: pol.KeyRegion(), KeyVersion: keyVersion,
		Kind: concurrencyKind, Parts: subjectParts(pol, sub)})
	if err != nil {
		o := c.fail(op, pol, Unavailable, CategoryMisconfigured, certainty.Rejected)
		return permitPolicy{}, &o
	}
	return permitPolicy{pol: pol, key: key}, nil
}

// validRevision is the policy compiler's revision slug rule.
func validRevision(s string) bool {
	if s == "" || len(s) > policy.RateMaxRevisionBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1 && s[i-1] != '-':
		default:
			return false
		}
	}
	return true
}

// permitTTL applies the TTL rule: 0 → the policy's permit-ttl; else whole
// milliseconds within [RateMinPermitTTL, permit-ttl].
func permitTTL(pol policy.RatePolicy, ttl time.Duration) (time.Duration, bool) {
	if ttl == 0 {
		return pol.Parameters.PermitTTL, true
	}
	return ttl, ttl >= policy.RateMinPermitTTL && ttl <= pol.Parameters.PermitTTL && ttl%time.Millisecond == 0
}

// Acquire takes a permit of req.Policy for req.Subject under a fresh owner
// token. It never waits for a permit (a program never blocks): a full set
// answers Contended at once and the caller retries with back-off, so there
// is no queue to bound. A timeout is repeated once with the same token
// (acquire is idempotent per owner); a second timeout is Indeterminate and
// carries the Lease so the caller can release it. Redis unavailable or
// overloaded fails closed (Unavailable).
func (c *ConcurrencyLimiter) Acquire(ctx context.Context, req ConcurrencyRequest) ConcurrencyOutcome {
	o := c.acquire(ctx, req)
	c.m.record(o)
	return o
}

func (c *ConcurrencyLimiter) acquire(ctx context.Context, req ConcurrencyRequest) ConcurrencyOutcome {
	pp, bad := c.resolve(OpAcquire, req.Policy, "", req.Subject)
	if bad != nil {
		return *bad
	}
	ttl, ok := permitTTL(pp.pol, req.TTL)
	if !ok {
		return c.fail(OpAcquire, pp.pol, Unavailable, CategoryInvalidRequest, certainty.Rejected)
	}
	ctx, cancel := withDeadline(ctx, req.Deadline)
	defer cancel()
	if ctx.Err() != nil {
		return c.fail(OpAcquire, pp.pol, Unavailable, CategoryDeadline, certainty.UnavailableBeforeSend)
	}
	owner := newOwnerToken()
	p := pp.pol
	call := programs.PermitAcquireRequest{PolicyRevision: p.Revision, MaxPermits: p.Parameters.Limit, Owner: []byte(owner.Reveal()),
		TTL: ttl, MaxClockStep: p.MaxClockStep, CleanupGrace: p.CleanupGrace}
	// Validity is measured from before the first send: whichever attempt
	// applied, the permit lasts at least ttl from here (§22.8).
	start := time.Now()
	o := callPermit(ctx, c, func(ctx context.Context) (programs.PermitAcquireResult, error) {
		return c.permits().RateConcurrencyAcquireV3(ctx, pp.key, call)
	}, func(r programs.PermitAcquireResult, err error, retried bool) ConcurrencyOutcome {
		return c.acquired(p, r, err, retried)
	})
	if o.Acquired() {
		o.ttl = ttl
	}
	if o.Acquired() || o.kind == Indeterminate {
		o.lease = newLease(c, pp, owner, ttl, start, o.expiresAt, o.kind == Indeterminate)
	}
	return o
}

// acquired interprets one acquire attempt.
func (c *ConcurrencyLimiter) acquired(p policy.RatePolicy, r programs.PermitAcquireResult, err error, retried bool) ConcurrencyOutcome {
	if err != nil {
		return c.failed(OpAcquire, p, err, retried)
	}
	o := ConcurrencyOutcome{op: OpAcquire, kind: Evaluated, policy: p.ID, revision: p.Revision, limit: r.MaxPermits,
		inUse: r.InUse, cert: r.Status.Outcome(), reconciled: retried}
	switch r.Status {
	case programs.PermitAcquired, programs.PermitAlreadyHeld:
		// ALREADY_HELD answers only our own token: the repeat found the
		// first attempt's permit (not extended).
		o.status, o.expiresAt = PermitAcquired, time.UnixMilli(r.ExpiresAtMillis)
		o.cert = certainty.Applied
	case programs.PermitContended:
		o.status, o.retryAfter = PermitContended, r.RetryAfter
	case programs.PermitAcquireClockUnsafe:
		return c.clockUnsafe(OpAcquire, p, retried)
	default: // WRONG_TYPE, INVALID: state or arguments the program refuses
		return c.fail(OpAcquire, p, Unavailable, CategoryMisconfigured, certainty.Rejected)
	}
	return o
}

// Renew extends ref's permit to TTL from now. NotHeld means the permit is
// gone (expired and possibly taken, released, or not this owner's): stop
// the work and acquire again. Renew is safe to repeat; a timeout is
// repeated once.
func (c *ConcurrencyLimiter) Renew(ctx context.Context, ref PermitRef) ConcurrencyOutcome {
	pp, bad := c.resolve(OpRenew, ref.Policy, ref.Revision, ref.Subject)
	if bad != nil {
		c.m.record(*bad)
		return *bad
	}
	o, _ := c.renew(ctx, pp, ref.Owner, ref.TTL, ref.Deadline)
	c.m.record(o)
	return o
}

// renew runs one renew (with its repeat) for a resolved permit; start is
// when the first attempt began.
func (c *ConcurrencyLimiter) renew(ctx context.Context, pp permitPolicy, owner OwnerToken, ttl time.Duration, deadline time.Time) (ConcurrencyOutcome, time.Time) {
	p := pp.pol
	ttl, ok := permitTTL(p, ttl)
	if !ok || owner.IsZero() {
		return c.fail(OpRenew, p, Unavailable, CategoryInvalidRequest, certainty.Rejected), time.Time{}
	}
	ctx, cancel := withDeadline(ctx, deadline)
	defer cancel()
	if ctx.Err() != nil {
		return c.fail(OpRenew, p, Unavailable, CategoryDeadline, certainty.UnavailableBeforeSend), time.Time{}
	}
	call := programs.PermitRenewRequest{PolicyRevision: p.Revision, Owner: []byte(owner.Reveal()), TTL: ttl,
		MaxClockStep: p.MaxClockStep, CleanupGrace: p.CleanupGrace}
	start := time.Now()
	o := callPermit(ctx, c, func(ctx context.Context) (programs.PermitRenewResult, error) {
		return c.permits().RateConcurrencyRenewV3(ctx, pp.key, call)
	}, func(r programs.PermitRenewResult, err error, retried bool) ConcurrencyOutcome {
		return c.renewed(p, r, err, retried)
	})
	if st, _ := o.Status(); st == PermitRenewed {
		o.ttl = ttl
	}
	return o, start
}

func (c *ConcurrencyLimiter) renewed(p policy.RatePolicy, r programs.PermitRenewResult, err error, retried bool) ConcurrencyOutcome {
	if err != nil {
		return c.failed(OpRenew, p, err, retried)
	}
	o := ConcurrencyOutcome{op: OpRenew, kind: Evaluated, policy: p.ID, revision: p.Revision, limit: p.Parameters.Limit,
		inUse: r.InUse, cert: r.Status.Outcome(), reconciled: retried}
	switch r.Status {
	case programs.PermitRenewed:
		o.status, o.expiresAt = PermitRenewed, time.UnixMilli(r.ExpiresAtMillis)
	case programs.PermitRenewNotHeld:
		o.status = PermitNotHeld
	case programs.PermitRenewClockUnsafe:
		return c.clockUnsafe(OpRenew, p, retried)
	default:
		return c.fail(OpRenew, p, Unavailable, CategoryMisconfigured, certainty.Rejected)
	}
	return o
}

// Release returns ref's permit. Only its owner token can: another token
// is NotHeld and changes nothing, as is an expired or already released
// permit. Release is safe to repeat; a timeout is repeated once.
func (c *ConcurrencyLimiter) Release(ctx context.Context, ref PermitRef) ConcurrencyOutcome {
	pp, bad := c.resolve(OpRelease, ref.Policy, ref.Revision, ref.Subject)
	if bad != nil {
		c.m.record(*bad)
		return *bad
	}
	o := c.release(ctx, pp, ref.Owner, ref.Deadline)
	c.m.record(o)
	return o
}

func (c *ConcurrencyLimiter) release(ctx context.Context, pp permitPolicy, owner OwnerToken, deadline time.Time) ConcurrencyOutcome {
	p := pp.pol
	if owner.IsZero() {
		return c.fail(OpRelease, p, Unavailable, CategoryInvalidRequest, certainty.Rejected)
	}
	ctx, cancel := withDeadline(ctx, deadline)
	defer cancel()
	if ctx.Err() != nil {
		return c.fail(OpRelease, p, Unavailable, CategoryDeadline, certainty.UnavailableBeforeSend)
	}
	call := programs.PermitReleaseRequest{PolicyRevision: p.Revision, Owner: []byte(owner.Reveal()), MaxClockStep: p.MaxClockStep}
	return callPermit(ctx, c, func(ctx context.Context) (programs.PermitReleaseResult, error) {
		return c.permits().RateConcurrencyReleaseV3(ctx, pp.key, call)
	}, func(r programs.PermitReleaseResult, err error, retried bool) ConcurrencyOutcome {
		return c.released(p, r, err, retried)
	})
}

func (c *ConcurrencyLimiter) released(p policy.RatePolicy, r programs.PermitReleaseResult, err error, retried bool) ConcurrencyOutcome {
	if err != nil {
		return c.failed(OpRelease, p, err, retried)
	}
	o := ConcurrencyOutcome{op: OpRelease, kind: Evaluated, policy: p.ID, revision: p.Revision, limit: p.Parameters.Limit,
		inUse: r.InUse, cert: r.Status.Outcome(), reconciled: retried}
	switch r.Status {
	case programs.PermitReleased:
		o.status = PermitReleased
	case programs.PermitReleaseNotHeld:
		o.status = PermitNotHeld
	case programs.PermitReleaseClockUnsafe:
		return c.clockUnsafe(OpRelease, p, retried)
	default:
		return c.fail(OpRelease, p, Unavailable, CategoryMisconfigured, certainty.Rejected)
	}
	return o
}

// callPermit sends one permit program call and interprets it. Every permit
// program is idempotent per owner token (acquire → ALREADY_HELD, renew →
// RENEWED, release → NOT_HELD), so a timeout is repeated once with the same
// token while the deadline allows: the token plays the role of the rate
// programs' evaluation id. With the repeat still possible, the first
// attempt gets AttemptTimeout, or half of the remaining deadline, so that
// the repeat has time too (as Limiter.attempt does).
func callPermit[R any](ctx context.Context, c *ConcurrencyLimiter, run func(context.Context) (R, error),
	interpret func(R, error, bool) ConcurrencyOutcome) ConcurrencyOutcome {
	attempt := func(repeatable bool) (R, error) {
		actx := ctx
		switch dl, has := ctx.Deadline(); {
		case c.lim.cfg.AttemptTimeout > 0:
			var cancel context.CancelFunc
			actx, cancel = context.WithTimeout(ctx, c.lim.cfg.AttemptTimeout)
			defer cancel()
		case repeatable && has:
			var cancel context.CancelFunc
			actx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
			defer cancel()
		}
		return run(actx)
	}
	r, err := attempt(true)
	o := interpret(r, err, false)
	if o.kind != Indeterminate || ctx.Err() != nil {
		return o
	}
	if c.beforeRetry != nil {
		c.beforeRetry()
	}
	r, err = attempt(false)
	return interpret(r, err, true)
}

// failed maps a transport or server error (§19.3, §21.4, §21.6): provably
// not sent or refused before executing → Unavailable (fail closed; there is
// no fallback for permits); program, codec, key or permission errors →
// Unavailable misconfigured, never a fallback; anything that may have been
// sent → Indeterminate. After the repeat, "not sent" proves nothing about
// the first attempt, so it stays Indeterminate.
func (c *ConcurrencyLimiter) failed(op ConcurrencyOp, p policy.RatePolicy, err error, retried bool) ConcurrencyOutcome {
	if errors.Is(err, programs.ErrIncompatible) || errors.Is(err, programs.ErrZeroKey) ||
		errors.Is(err, programs.ErrSHAMismatch) || errors.Is(err, keys.ErrInvalidSpec) {
		return c.fail(op, p, Unavailable, CategoryMisconfigured, certainty.Rejected)
	}
	cert := certainty.Classify(err, true)
	var cat FailureCategory
	switch cert {
	case certainty.UnavailableBeforeSend:
		cat = CategoryRedisUnavailable
	case certainty.OverloadedBeforeSend:
		cat = CategoryOverloaded
	case certainty.NotApplied:
		if certainty.Reason(err, true) == "NOSCRIPT" {
			return c.fail(op, p, Unavailable, CategoryMisconfigured, certainty.Rejected)
		}
		// LOADING, READONLY, BUSY, CLUSTERDOWN, ...: refused before executing.
		cat = CategoryRedisUnavailable
	case certainty.Rejected:
		return c.fail(op, p, Unavailable, CategoryMisconfigured, certainty.Rejected)
	default:
		return c.fail(op, p, Indeterminate, CategoryTimeout, certainty.Indeterminate)
	}
	if retried {
		return c.fail(op, p, Indeterminate, CategoryTimeout, certainty.Indeterminate)
	}
	return c.fail(op, p, Unavailable, cat, cert)
}

// clockUnsafe: the program refused (Redis clock behind the permit set's
// last observation by more than max-clock-step); fail closed.
func (c *ConcurrencyLimiter) clockUnsafe(op ConcurrencyOp, p policy.RatePolicy, retried bool) ConcurrencyOutcome {
	if retried {
		return c.fail(op, p, Indeterminate, CategoryTimeout, certainty.Indeterminate)
	}
	return c.fail(op, p, Unavailable, CategoryClockUnsafe, certainty.Rejected)
}

func (c *ConcurrencyLimiter) fail(op ConcurrencyOp, p policy.RatePolicy, kind Kind, cat FailureCategory, cert certainty.Outcome) ConcurrencyOutcome {
	return ConcurrencyOutcome{op: op, kind: kind, policy: p.ID, revision: p.Revision, limit: p.Parameters.Limit,
		category: cat, cert: cert, retryAfter: unavailableRetryAfter}
}

// withDeadline narrows ctx to deadline when one is set.
func withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}
