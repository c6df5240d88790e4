package fenced

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/internal/hold"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/programs"
)

// Acquire acquires the fenced lease for r.Attempt, waiting up to r.Wait
// while another owner holds it or Redis is unreachable. A lost reply is
// reconciled by repeating the same attempt once (the same token, no
// increment, if the first send applied); a repeat that cannot be sent
// leaves the outcome Indeterminate. Fence refusals are outcomes, never
// errors; errors are lease.ErrInvalidRequest, lease.ErrCorrupt and ctx's.
//
// With a replication profile (Config.Replication) every acquire is
// followed by WAIT on the same connection. A grant fewer replicas
// acknowledged is NotReplicated: released best-effort, no handle, never
// retried within r.Wait. A WAIT that did not answer makes the acquire
// INDETERMINATE and takes the same one reconciling repeat (the same
// attempt: no increment, and a new WAIT).
func (c *Client) Acquire(ctx context.Context, r Request) (Acquisition, error) {
	k, err := c.prepare(&r)
	if err != nil {
		return Acquisition{}, err
	}
	a, err := c.acquire(ctx, k, r)
	c.m.acquired(k.label, a.Kind, err)
	return a, err
}

func (c *Client) acquire(ctx context.Context, k call, r Request) (Acquisition, error) {
	req := programs.FencedLeaseAcquireRequest{Registration: k.reg, Attempt: k.program(), TTL: r.TTL,
		HardFailThreshold: c.threshold}
	deadline := c.now().Add(r.Wait)
	var (
		out        Acquisition
		reconciled bool
		unsettled  bool
		pause      = backoffMin
	)
	for {
		start := c.now()
		var (
			res  programs.FencedAcquireResult
			reps programs.Replicas
			err  error
		)
		if c.repl.Enabled() {
			res, reps, err = c.exec.FencedLeaseAcquireReplicated(ctx, k.owner, k.counter, req, c.repl.wait())
		} else {
			res, err = c.exec.FencedLeaseAcquire(ctx, k.owner, k.counter, req)
		}
		out.Attempts++
		if err != nil {
			o := certainty.Classify(err, true)
			if o == certainty.Indeterminate {
				unsettled = true
			}
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) && !unsettled {
				return Acquisition{}, ctx.Err()
			}
			out = Acquisition{Kind: Unavailable, Certainty: o, Attempts: out.Attempts, Cause: err}
			if unsettled {
				out.Kind, out.Certainty = Indeterminate, certainty.Indeterminate
			}
			if o == certainty.Indeterminate {
				if !reconciled && ctx.Err() == nil {
					reconciled = true
					if c.beforeRepeat != nil {
						c.beforeRepeat()
					}
					continue
				}
				return out, nil
			}
		} else {
			out = Acquisition{Certainty: res.Outcome(), Attempts: out.Attempts, Fence: tokenOf(res.Fence)}
			held := res.Status == programs.FencedAcquired || res.Status == programs.FencedReplayedSameOperation
			if held && c.repl.Enabled() {
				out.Replicas = reps.Reached
				if reps.Refused != nil {
					out.Cause = reps.Refused
					c.log.Error("fenced: WAIT after the acquire answered an error (does the script lane's ACL user have +wait?)",
						"purpose", r.Purpose, "error", reps.Refused)
				}
				if !reps.OK() {
					return c.notReplicated(ctx, k, r, out, tokenOf(res.Token)), nil
				}
			}
			switch res.Status {
			case programs.FencedAcquired:
				out.Kind, out.Handle = Acquired, c.handle(k, r, start, res.PTTL, tokenOf(res.Token))
				return out, nil
			case programs.FencedReplayedSameOperation:
				out.Kind, out.Handle = ReplayedSameOperation, c.handle(k, r, start, res.PTTL, tokenOf(res.Token))
				return out, nil
			case programs.FencedContended:
				out.Kind, out.RetryAfter = Contended, res.PTTL
			case programs.FencedOwnerOperationConflict:
				out.Kind, out.RetryAfter = OwnerOperationConflict, res.PTTL
				return out, nil
			case programs.FencedAcquireCounterMissing:
				out.Kind = CounterMissing
				return out, nil
			case programs.FencedAcquireEpochMismatch:
				out.Kind = EpochMismatch
				return out, nil
			case programs.FencedAcquireRegistrationConflict:
				out.Kind = RegistrationConflict
				return out, nil
			case programs.FencedAcquireRegression:
				out.Kind = Regression
				c.log.Error("fence counter regression: the counter is below a live token; refusing fenced leases",
					"purpose", r.Purpose, "epoch", out.Fence.Epoch)
				return out, nil
			case programs.FencedAcquireExhausted:
				out.Kind = Exhausted
				return out, nil
			case programs.FencedAcquireWrongType:
				return Acquisition{}, lease.ErrCorrupt
			default:
				return Acquisition{}, fmt.Errorf("fenced: fenced-lease-acquire-v1 answered %s to a validated request", res.Status)
			}
		}
		left := deadline.Sub(c.now())
		if left <= 0 {
			return out, nil
		}
		d := c.jitter(int64(pause)) + 1
		if out.Kind == Contended {
			d = min(d, int64(out.RetryAfter)+1)
		}
		if err := sleep(ctx, min(time.Duration(d), left)); err != nil {
			if unsettled {
				return out, nil
			}
			return Acquisition{}, err
		}
		pause = min(2*pause, backoffMax)
	}
}

// notReplicated settles a grant fewer replicas acknowledged than
// configured: it is released at once (best-effort, within
// ReleaseTimeout even when ctx has ended) and no handle is made, so the
// token is never handed out.
func (c *Client) notReplicated(ctx context.Context, k call, r Request, out Acquisition, tok fence.Token) Acquisition {
	out.Kind = NotReplicated
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	rel, err := c.releaseCall(rctx, k, tok.Counter)
	out.Release = rel.Kind
	if err != nil || (rel.Kind != lease.ReleaseDone && rel.Kind != lease.ReleaseAlreadyAbsent) {
		c.log.Warn("fenced: an unreplicated grant could not be released; it stays held until its TTL",
			"purpose", r.Purpose, "release", rel.Kind, "error", err)
	}
	c.log.Warn("fenced: grant not acknowledged by enough replicas; released, no token handed out",
		"purpose", r.Purpose, "replicas", out.Replicas, "wanted", c.repl.Acks)
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Inspect reports whether r.Attempt holds the fenced lease, without
// changing anything. When it does, the outcome is ReplayedSameOperation
// with a handle (its token, validity from the server's remaining TTL):
// this is how a lost acquire reply is reconciled. r.Wait is ignored.
// Inspect sends no WAIT, even with a replication profile: the handle it
// returns proves the grant is on the primary, not on any replica
// (Replicas is 0). Repeat the acquire with the same attempt instead to
// have the grant's replication checked again.
func (c *Client) Inspect(ctx context.Context, r Request) (Acquisition, error) {
	r.Wait = 0
	k, err := c.prepare(&r)
	if err != nil {
		return Acquisition{}, err
	}
	a, err := c.inspect(ctx, k, r)
	c.m.inspected(k.label, a.Kind, err)
	return a, err
}

func (c *Client) inspect(ctx context.Context, k call, r Request) (Acquisition, error) {
	start := c.now()
	res, err := c.exec.FencedLeaseInspect(ctx, k.owner, k.counter, k.reg, k.program())
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return Acquisition{}, ctx.Err()
		}
		o := certainty.Classify(err, false)
		kind := Unavailable
		if o == certainty.Indeterminate {
			kind = Indeterminate
		}
		return Acquisition{Kind: kind, Certainty: o, Attempts: 1, Cause: err}, nil
	}
	out := Acquisition{Certainty: res.Outcome(), Attempts: 1, Fence: tokenOf(res.Fence)}
	switch res.Status {
	case programs.FencedOwned:
		out.Kind, out.Handle = ReplayedSameOperation, c.handle(k, r, start, res.PTTL, tokenOf(res.Token))
	case programs.FencedInspectAbsent:
		out.Kind = Absent
	case programs.FencedInspectNotOwner:
		out.Kind = Contended
	case programs.FencedInspectOwnerOperationConflict:
		out.Kind = OwnerOperationConflict
	case programs.FencedInspectCounterMissing:
		out.Kind = CounterMissing
	case programs.FencedInspectEpochMismatch:
		out.Kind = EpochMismatch
	case programs.FencedInspectRegistrationConflict:
		out.Kind = RegistrationConflict
	case programs.FencedInspectRegression:
		out.Kind = Regression
	case programs.FencedInspectWrongType:
		return Acquisition{}, lease.ErrCorrupt
	default:
		return Acquisition{}, fmt.Errorf("fenced: fenced-lease-inspect-v1 answered %s to a validated request", res.Status)
	}
	return out, nil
}

// Handle is a held fenced lease. It is safe for concurrent use.
type Handle struct {
	c       *Client
	k       call
	attempt lease.Attempt
	ttl     time.Duration
	token   fence.Token
	h       *hold.Hold
}

func (c *Client) handle(k call, r Request, sent time.Time, serverTTL time.Duration, tok fence.Token) *Handle {
	return &Handle{c: c, k: k, attempt: r.Attempt, ttl: r.TTL, token: tok,
		h: hold.New(c.now, c.drift, lease.ErrValidityExpired, sent, serverTTL, func(s State, cause error) {
			c.m.ended(k.label, s, cause)
		})}
}

// Token is the lease's fencing token: pass it with every write to the
// protected resource, which rejects it once a newer token has written.
func (h *Handle) Token() fence.Token { return h.token }

// Attempt returns the attempt holding the lease.
func (h *Handle) Attempt() lease.Attempt { return h.attempt }

// TTL is the lease's TTL.
func (h *Handle) TTL() time.Duration { return h.ttl }

// State returns the state, moving an expired handle to LOST first.
func (h *Handle) State() State { return h.h.State() }

// Cause says why the handle left ACTIVE: lease.ErrLost,
// lease.ErrValidityExpired, ErrFenceBroken or the runtime's error.
func (h *Handle) Cause() error { return h.h.Cause() }

// Done is closed when the handle leaves ACTIVE.
func (h *Handle) Done() <-chan struct{} { return h.h.Done() }

// Remaining is the validity left (0 when not ACTIVE).
func (h *Handle) Remaining() time.Duration { return h.h.Remaining() }

// UsableFor reports whether work of the given budget fits in the validity
// left.
func (h *Handle) UsableFor(work time.Duration) bool { return h.h.UsableFor(work) }

// Renew sets the TTL again if the attempt still holds the lease under its
// token and the fence still matches. Not ACTIVE: lease.ErrNotActive,
// nothing sent. A lost reply makes the handle UNKNOWN (never resent).
func (h *Handle) Renew(ctx context.Context) (lease.RenewKind, error) {
	if h.State() != Active {
		return 0, lease.ErrNotActive
	}
	res, err := h.c.renewCall(ctx, h.k, h.token.Counter, h.ttl)
	if err != nil {
		if errors.Is(err, lease.ErrCorrupt) {
			h.h.End(Lost, lease.ErrCorrupt)
		}
		return 0, err
	}
	switch res.Kind {
	case lease.Renewed:
		h.h.Extend(res.start, h.ttl)
	case lease.RenewLost:
		h.h.End(Lost, res.lostCause)
	case lease.RenewIndeterminate:
		h.h.End(Unknown, res.Cause)
	}
	return res.Kind, nil
}

// Release deletes the lease if the attempt still holds it under its token
// (the counter is never touched). It sends from ACTIVE, UNKNOWN and LOST;
// a released handle answers lease.ReleaseAlreadyReleased without sending. A lost
// reply is repeated once (ABSENT then means it applied).
func (h *Handle) Release(ctx context.Context) (lease.ReleaseKind, error) {
	if h.State() == Released {
		return lease.ReleaseAlreadyReleased, nil
	}
	res, err := h.c.releaseCall(ctx, h.k, h.token.Counter)
	if err != nil {
		return 0, err
	}
	switch res.Kind {
	case lease.ReleaseIndeterminate:
		h.h.End(Unknown, res.Cause)
	case lease.ReleaseDone, lease.ReleaseAlreadyAbsent:
		h.h.End(Released, nil)
	case lease.ReleaseNotOwner:
		h.h.End(Lost, res.lostCause)
	}
	return res.Kind, nil
}

// ReleaseTimeout bounds the release Hold makes after its function returns.
const ReleaseTimeout = 2 * time.Second

// Hold acquires r and, if the lease is held, runs fn under the efficiency
// lease's watchdog (renew at a third of the TTL, never after ctx's
// deadline; fn's context cancelled with the handle's cause the moment it
// leaves ACTIVE or its validity runs out), then releases the lease. fn
// passes h.Token() with every protected write and stops when its context
// ends. When the lease is not held, fn does not run and Hold returns the
// acquisition. The error is fn's, or Acquire's.
func (c *Client) Hold(ctx context.Context, r Request, fn func(ctx context.Context, h *Handle) error) (Acquisition, error) {
	a, err := c.Acquire(ctx, r)
	if err != nil || !a.Kind.Held() {
		return a, err
	}
	h := a.Handle
	fctx, cancel := context.WithCancelCause(ctx)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		hold.Watch(ctx, h.h, h.ttl/3, func(rctx context.Context) bool {
			kind, _ := h.Renew(rctx)
			if c.afterRenew != nil {
				c.afterRenew(kind)
			}
			return kind != lease.RenewUnavailable
		}, cancel, stop, hold.Options{})
	}()
	ferr := fn(fctx, h)
	close(stop)
	<-stopped
	cancel(nil)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer rcancel()
	if _, err := h.Release(rctx); err != nil {
		c.log.Warn("fenced: release after Hold failed", "error", err)
	}
	return a, ferr
}
