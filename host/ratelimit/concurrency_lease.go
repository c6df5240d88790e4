package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
)

// LeaseState is the local view of a permit.
type LeaseState uint8

// Lease states. The zero value is invalid.
const (
	_ LeaseState = iota
	// LeaseActive: the permit is held and locally valid.
	LeaseActive
	// LeaseUnknown: the acquire was indeterminate or a release failed; the
	// permit may be held until it expires in Redis.
	LeaseUnknown
	// LeaseLost: the local validity ran out, or a renew found the permit
	// gone. The work it guarded must stop.
	LeaseLost
	// LeaseReleased: the permit was released (or confirmed absent).
	LeaseReleased
)

// String returns the state's name.
func (s LeaseState) String() string {
	switch s {
	case LeaseActive:
		return "active"
	case LeaseUnknown:
		return "unknown"
	case LeaseLost:
		return "lost"
	case LeaseReleased:
		return "released"
	}
	return "invalid"
}

// ErrLeaseOption rejects an invalid AcquireLease or AutoRenew option.
var ErrLeaseOption = errors.New("ratelimit: invalid lease option")

// minRenewRetry is the shortest wait between failed renew attempts.
const minRenewRetry = 5 * time.Millisecond

// driftBudget is subtracted from a permit's TTL for its local validity: the
// local monotonic clock and Redis's clock may run at slightly different
// rates, and validity must never outlast the server's expiry.
func driftBudget(ttl time.Duration) time.Duration { return ttl/100 + time.Millisecond }

// Lease is an in-process handle of one permit: the owner token stays inside
// it (Owner reveals it only on purpose), and it tracks the permit's local
// validity on the monotonic clock, measured from the start of the acquire
// or renew that set it (§22.8), never from wall-clock or server times.
//
//	lease, err := conc.AcquireLease(ctx, req)
//	if err != nil {
//		return err // contended, unavailable, indeterminate or invalid
//	}
//	defer lease.Release(ctx)
//
// It is safe for concurrent use. A permit survives policy swaps: the lease
// renews and releases in the revision it was acquired under.
type Lease struct {
	c     *ConcurrencyLimiter
	pp    permitPolicy
	owner OwnerToken
	ttl   time.Duration

	// op serialises renew and release calls of this lease.
	op sync.Mutex

	mu         sync.Mutex
	state      LeaseState
	validUntil time.Time // monotonic
	expiresAt  time.Time // server time, telemetry only
	acquiredAt time.Time // monotonic
	done       chan struct{}
	expiry     *time.Timer // armed by Done and AutoRenew only
	released   *ConcurrencyOutcome
	// Auto renewal: stop cancels the renewer, renewing is closed when it
	// has returned. Both nil unless AutoRenew started it.
	stop     context.CancelFunc
	renewing chan struct{}
}

func newLease(c *ConcurrencyLimiter, pp permitPolicy, owner OwnerToken, ttl time.Duration, start, expiresAt time.Time, unknown bool) *Lease {
	l := &Lease{c: c, pp: pp, owner: owner, ttl: ttl, acquiredAt: start, expiresAt: expiresAt, done: make(chan struct{})}
	if unknown {
		l.state = LeaseUnknown
		close(l.done)
		return l
	}
	l.state = LeaseActive
	l.validUntil = start.Add(ttl - driftBudget(ttl))
	return l
}

// Owner returns the owner token (for a client that renews and releases
// through the sidecar API). Never log it.
func (l *Lease) Owner() OwnerToken { return l.owner }

// Policy is the policy id of the permit.
func (l *Lease) Policy() string { return l.pp.pol.ID }

// Revision is the policy revision whose permit set holds the permit.
func (l *Lease) Revision() string { return l.pp.pol.Revision }

// TTL is the permit's life per acquire or renew.
func (l *Lease) TTL() time.Duration { return l.ttl }

// ExpiresAt is the last server-reported expiry (telemetry; zero when
// unknown). RemainingValidity is what work must respect.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// State returns the lease's state. An active lease whose validity has
// run out is lost from then on.
func (l *Lease) State() LeaseState {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkValidityLocked()
	return l.state
}

// RemainingValidity is how long the permit is still certainly held:
// TTL minus the monotonic time since the acquire or last renew began,
// minus a drift budget; 0 unless the lease is active.
func (l *Lease) RemainingValidity() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkValidityLocked()
	if l.state != LeaseActive {
		return 0
	}
	return time.Until(l.validUntil)
}

// IsUsableFor reports whether the lease stays valid for work that takes
// d: start such work only if it is true.
func (l *Lease) IsUsableFor(d time.Duration) bool { return l.RemainingValidity() > d }

// Done is closed when the lease stops being active: released, lost
// (validity ran out or a renew found the permit gone) or unknown. Work
// guarded by the lease should select on it.
func (l *Lease) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armExpiryLocked()
	return l.done
}

// armExpiryLocked starts the timer that closes done when the validity runs
// out. It is armed lazily so that a lease nobody watches (the sidecar API
// hands the token to its client and drops the lease) holds no timer.
func (l *Lease) armExpiryLocked() {
	if l.expiry != nil || l.state != LeaseActive {
		return
	}
	l.expiry = time.AfterFunc(time.Until(l.validUntil), func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.checkValidityLocked()
	})
}

// checkValidityLocked turns an active lease whose validity has passed into
// a lost one.
func (l *Lease) checkValidityLocked() {
	if l.state == LeaseActive && !time.Now().Before(l.validUntil) {
		l.endLocked(LeaseLost)
	}
}

// endLocked leaves the active state (once).
func (l *Lease) endLocked(s LeaseState) {
	if l.state == LeaseActive && s == LeaseLost {
		l.c.m.lost.WithLabelValues(l.pp.pol.ID).Inc()
		l.c.log.Warn("concurrency lease lost", "policy", l.pp.pol.ID, "revision", l.pp.pol.Revision)
	}
	l.state = s
	if l.expiry != nil {
		l.expiry.Stop()
	}
	select {
	case <-l.done:
	default:
		close(l.done)
	}
}

// Renew extends the permit by its TTL. On Renewed the local validity
// restarts from the start of this renew; on NotHeld the lease is lost; on
// Unavailable or Indeterminate nothing changes locally — the permit is
// still held until the current validity runs out, which is what decides
// loss (§22.7), not a count of failures. Only an active lease renews.
func (l *Lease) Renew(ctx context.Context) ConcurrencyOutcome {
	l.op.Lock()
	defer l.op.Unlock()
	return l.renewLocked(ctx)
}

func (l *Lease) renewLocked(ctx context.Context) ConcurrencyOutcome {
	if st := l.State(); st != LeaseActive {
		o := l.c.fail(OpRenew, l.pp.pol, Unavailable, CategoryInvalidRequest, certainty.Rejected)
		l.c.m.record(o)
		return o
	}
	o, start := l.c.renew(ctx, l.pp, l.owner, l.ttl, time.Time{})
	l.c.m.record(o)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st, _ := o.Status(); {
	case st == PermitRenewed:
		if v := start.Add(l.ttl - driftBudget(l.ttl)); v.After(l.validUntil) {
			l.validUntil = v
		}
		l.expiresAt = o.expiresAt
		if l.expiry != nil && l.state == LeaseActive {
			l.expiry.Reset(time.Until(l.validUntil))
		}
	case st == PermitNotHeld:
		l.endLocked(LeaseLost)
	}
	l.checkValidityLocked()
	return o
}

// Release stops auto renewal (waiting for the renewer to return) and
// returns the permit. It runs even when ctx is already done: it then
// detaches from ctx's cancellation (keeping its values) and bounds itself
// by the limiter's release timeout, so `defer lease.Release(ctx)` returns
// the permit after a cancelled request too. Released and NotHeld (the
// permit had expired, or a timed-out first attempt released it) both end
// the lease as released; a later Release returns the same outcome without
// a call. On Unavailable or Indeterminate the lease is unknown — the
// permit expires by its TTL — and Release may be called again.
func (l *Lease) Release(ctx context.Context) ConcurrencyOutcome {
	l.stopRenewer()
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	if l.released != nil {
		o := *l.released
		l.mu.Unlock()
		return o
	}
	l.mu.Unlock()
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), l.c.releaseTimeout)
		defer cancel()
	}
	o := l.c.release(ctx, l.pp, l.owner, time.Time{})
	l.c.m.record(o)
	l.mu.Lock()
	defer l.mu.Unlock()
	if o.kind == Evaluated {
		l.released = &o
		l.endLocked(LeaseReleased)
	} else if l.state == LeaseActive || l.state == LeaseUnknown {
		l.endLocked(LeaseUnknown)
	}
	return o
}

// AutoRenew starts one goroutine that renews the lease every `every`
// (0: a third of the TTL; it must be shorter than the TTL) until Release,
// until the lease is lost, and — when maxHold > 0 — no longer than maxHold
// after the acquire began: then renewals stop and the lease lapses when its
// validity runs out. A failed renew is retried sooner, at most until the
// validity runs out (then the lease is lost and Done closes). The goroutine
// never outlives the lease's validity without a successful renew, and
// Release waits for it, so it cannot leak past either.
func (l *Lease) AutoRenew(every, maxHold time.Duration) error {
	if every == 0 {
		every = l.ttl / 3
	}
	if every <= 0 || every >= l.ttl || maxHold < 0 {
		return fmt.Errorf("%w: renew interval must be within (0, %s) and max hold >= 0", ErrLeaseOption, l.ttl)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checkValidityLocked()
	if l.state != LeaseActive {
		return fmt.Errorf("%w: lease is %s", ErrLeaseOption, l.state)
	}
	if l.stop != nil {
		return fmt.Errorf("%w: auto renewal already running", ErrLeaseOption)
	}
	l.armExpiryLocked()
	ctx, cancel := context.WithCancel(context.Background())
	l.stop, l.renewing = cancel, make(chan struct{})
	go l.renewLoop(ctx, every, maxHold, l.renewing)
	return nil
}

// stopRenewer cancels the renewer and waits until it has returned.
func (l *Lease) stopRenewer() {
	l.mu.Lock()
	stop, renewing := l.stop, l.renewing
	l.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-renewing
}

func (l *Lease) renewLoop(ctx context.Context, every, maxHold time.Duration, finished chan struct{}) {
	defer close(finished)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			return
		case <-t.C:
		}
		if maxHold > 0 && time.Since(l.acquiredAt) >= maxHold {
			// Stop renewing; the expiry timer closes done at lapse.
			return
		}
		remaining := l.RemainingValidity()
		if remaining <= 0 {
			return
		}
		l.op.Lock()
		rctx, cancel := context.WithTimeout(ctx, remaining)
		o := l.renewLocked(rctx)
		cancel()
		l.op.Unlock()
		if l.State() != LeaseActive {
			return
		}
		next := every
		if o.kind != Evaluated {
			next = min(every, max(l.RemainingValidity()/4, minRenewRetry))
		}
		t.Reset(next)
	}
}

// LeaseOption configures AcquireLease.
type LeaseOption func(*leaseOptions)

type leaseOptions struct {
	renew          bool
	every, maxHold time.Duration
}

// WithAutoRenew renews the lease every `every` (0: a third of its TTL)
// until it is released (see Lease.AutoRenew).
func WithAutoRenew(every time.Duration) LeaseOption {
	return func(o *leaseOptions) { o.renew, o.every = true, every }
}

// WithMaxHold bounds auto renewal to d after the acquire began.
func WithMaxHold(d time.Duration) LeaseOption {
	return func(o *leaseOptions) { o.maxHold = d }
}

// AcquireLease is Acquire for in-process work: it returns the lease, or an
// error matching ErrPermitContended, ErrPermitUnavailable,
// ErrPermitIndeterminate or ErrPermitInvalid (a *PermitError with the
// outcome). After an indeterminate acquire it releases what may be held
// (bounded by the release timeout, detached from ctx's cancellation), so
// the pattern below never leaks a permit beyond its TTL:
//
//	lease, err := conc.AcquireLease(ctx, req, ratelimit.WithAutoRenew(0))
//	if err != nil {
//		return err
//	}
//	defer lease.Release(ctx)
func (c *ConcurrencyLimiter) AcquireLease(ctx context.Context, req ConcurrencyRequest, opts ...LeaseOption) (*Lease, error) {
	var lo leaseOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&lo)
		}
	}
	if lo.renew && (lo.every < 0 || lo.maxHold < 0) {
		return nil, fmt.Errorf("%w: negative renew interval or max hold", ErrLeaseOption)
	}
	if lo.renew && lo.every > 0 && req.TTL > 0 && lo.every >= req.TTL {
		return nil, fmt.Errorf("%w: renew interval must be shorter than the TTL", ErrLeaseOption)
	}
	o := c.Acquire(ctx, req)
	switch {
	case o.Acquired():
		lease := o.lease
		if lo.renew {
			if err := lease.AutoRenew(lo.every, lo.maxHold); err != nil {
				lease.Release(ctx)
				return nil, err
			}
		}
		return lease, nil
	case o.kind == Indeterminate && o.lease != nil:
		if c.beforeCleanup != nil {
			c.beforeCleanup()
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.releaseTimeout)
		o.lease.Release(rctx)
		cancel()
	}
	return nil, o.Err()
}
