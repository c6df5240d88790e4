package fenced

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/programs"
)

// Renew renews the fenced lease r.Attempt holds under tok for r.TTL
// without a Handle: for a holder that keeps only its attempt and token (a
// sidecar caller, a process restarted with both stored). The program
// checks owner, token and fence exactly as Handle.Renew's does, and a lost
// reply is never resent (RenewIndeterminate: treat the lease as lost). On
// Renewed, Validity is r.TTL from just before the send minus the drift
// budget and the time since. A fence that no longer matches is RenewLost.
// r.Wait is ignored. Errors are lease.ErrInvalidRequest, lease.ErrCorrupt
// and ctx's.
func (c *Client) Renew(ctx context.Context, r Request, tok fence.Token) (lease.RenewResult, error) {
	r.Wait = 0
	k, err := c.resume(&r, tok)
	if err != nil {
		return lease.RenewResult{}, err
	}
	res, err := c.renewCall(ctx, k, tok.Counter, r.TTL)
	if err != nil {
		return lease.RenewResult{}, err
	}
	switch res.Kind {
	case lease.Renewed:
		res.Validity = max(res.start.Add(r.TTL-c.drift).Sub(c.now()), 0)
	case lease.RenewLost:
		c.m.ended(k.label, Lost, res.lostCause)
	case lease.RenewIndeterminate:
		c.m.ended(k.label, Unknown, res.Cause)
	}
	return res.RenewResult, nil
}

// Release deletes the fenced lease r.Attempt holds under tok without a
// Handle (never a blind DEL; the counter is never touched). A lost reply
// is repeated once, as Handle.Release does; when the repeat is lost too
// (ReleaseIndeterminate) it is counted as a handle's would be. r.TTL and
// r.Wait are ignored. Errors are lease.ErrInvalidRequest,
// lease.ErrCorrupt and ctx's.
func (c *Client) Release(ctx context.Context, r Request, tok fence.Token) (lease.ReleaseResult, error) {
	r.Wait, r.TTL = 0, c.maxTTL
	k, err := c.resume(&r, tok)
	if err != nil {
		return lease.ReleaseResult{}, err
	}
	res, err := c.releaseCall(ctx, k, tok.Counter)
	if err == nil && res.Kind == lease.ReleaseIndeterminate {
		c.m.ended(k.label, Unknown, res.Cause)
	}
	return res.ReleaseResult, err
}

func (c *Client) resume(r *Request, tok fence.Token) (call, error) {
	k, err := c.prepare(r)
	if err != nil {
		return call{}, err
	}
	if err := tok.Validate(); err != nil || tok.Epoch != r.Registration.Epoch {
		return call{}, fmt.Errorf("%w: the token must be in range and of the registration's epoch", lease.ErrInvalidRequest)
	}
	return k, nil
}

// renewed is one renew's outcome with what a handle needs besides.
type renewed struct {
	lease.RenewResult
	start     time.Time // the clock reading just before the send
	lostCause error     // RenewLost: lease.ErrLost or ErrFenceBroken
}

// renewCall sends one renew (never resent) and counts it.
func (c *Client) renewCall(ctx context.Context, k call, counter int64, ttl time.Duration) (renewed, error) {
	start := c.now()
	res, regressed, err := c.renewOnce(ctx, k, counter, ttl)
	res.start = start
	c.m.renewed(k.label, res.Kind, regressed, err)
	return res, err
}

func (c *Client) renewOnce(ctx context.Context, k call, counter int64, ttl time.Duration) (renewed, bool, error) {
	res, err := c.exec.FencedLeaseRenew(ctx, k.owner, k.counter, k.hold(counter), ttl)
	if err != nil {
		o := certainty.Classify(err, true)
		if o == certainty.Indeterminate {
			return renewed{RenewResult: lease.RenewResult{Kind: lease.RenewIndeterminate, Certainty: o, Cause: err}}, false, nil
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return renewed{}, false, ctx.Err()
		}
		return renewed{RenewResult: lease.RenewResult{Kind: lease.RenewUnavailable, Certainty: o, Cause: err,
			Overloaded: o == certainty.OverloadedBeforeSend}}, false, nil
	}
	out := renewed{RenewResult: lease.RenewResult{Certainty: res.Outcome()}}
	switch res.Status {
	case programs.FencedRenewed:
		out.Kind = lease.Renewed
	case programs.FencedRenewAbsent, programs.FencedRenewNotOwner, programs.FencedRenewTokenMismatch:
		out.Kind, out.lostCause = lease.RenewLost, lease.ErrLost
	case programs.FencedRenewEpochMismatch, programs.FencedRenewRegistrationConflict, programs.FencedRenewCounterMissing:
		out.Kind, out.lostCause = lease.RenewLost, ErrFenceBroken
	case programs.FencedRenewRegression:
		out.Kind, out.lostCause = lease.RenewLost, ErrFenceBroken
		return out, true, nil
	case programs.FencedRenewWrongType:
		return renewed{}, false, lease.ErrCorrupt
	default:
		return renewed{}, false, fmt.Errorf("fenced: fenced-lease-renew-v1 answered %s to a validated request", res.Status)
	}
	return out, false, nil
}

// released is one release's outcome with what a handle needs besides.
type released struct {
	lease.ReleaseResult
	lostCause error // ReleaseNotOwner: lease.ErrLost or ErrFenceBroken
}

// releaseCall sends a release, repeats it once after a lost reply, and
// counts it.
func (c *Client) releaseCall(ctx context.Context, k call, counter int64) (released, error) {
	res, regressed, err := c.releaseTwice(ctx, k, counter)
	c.m.released(k.label, res.Kind, regressed, err)
	return res, err
}

func (c *Client) releaseTwice(ctx context.Context, k call, counter int64) (released, bool, error) {
	var (
		res  programs.FencedReleaseResult
		err  error
		lost error // the first send's, when its reply was lost
	)
	for try := 0; try < 2; try++ {
		res, err = c.exec.FencedLeaseRelease(ctx, k.owner, k.counter, k.hold(counter))
		if err == nil || certainty.Classify(err, true) != certainty.Indeterminate || ctx.Err() != nil {
			break
		}
		lost = err
		if c.beforeReleaseRepeat != nil {
			c.beforeReleaseRepeat()
		}
	}
	// A repeat that fails before it is sent does not undo the first
	// send's uncertainty: the release may have applied.
	if err != nil && lost != nil && !(ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		err = lost
	}
	if err != nil {
		o := certainty.Classify(err, true)
		if o == certainty.Indeterminate {
			return released{ReleaseResult: lease.ReleaseResult{Kind: lease.ReleaseIndeterminate, Certainty: o, Cause: err}}, false, nil
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return released{}, false, ctx.Err()
		}
		return released{ReleaseResult: lease.ReleaseResult{Kind: lease.ReleaseUnavailable, Certainty: o, Cause: err,
			Overloaded: o == certainty.OverloadedBeforeSend}}, false, nil
	}
	out := released{ReleaseResult: lease.ReleaseResult{Certainty: res.Outcome()}}
	switch res.Status {
	case programs.FencedReleased:
		out.Kind = lease.ReleaseDone
	case programs.FencedReleaseAbsent:
		out.Kind = lease.ReleaseAlreadyAbsent
	case programs.FencedReleaseNotOwner, programs.FencedReleaseTokenMismatch:
		out.Kind, out.lostCause = lease.ReleaseNotOwner, lease.ErrLost
	case programs.FencedReleaseEpochMismatch, programs.FencedReleaseRegistrationConflict, programs.FencedReleaseCounterMissing:
		out.Kind, out.lostCause = lease.ReleaseNotOwner, ErrFenceBroken
	case programs.FencedReleaseRegression:
		out.Kind, out.lostCause = lease.ReleaseNotOwner, ErrFenceBroken
		return out, true, nil
	case programs.FencedReleaseWrongType:
		return released{}, false, lease.ErrCorrupt
	default:
		return released{}, false, fmt.Errorf("fenced: fenced-lease-release-v1 answered %s to a validated request", res.Status)
	}
	return out, false, nil
}

func (k call) hold(counter int64) programs.FencedLeaseHold {
	return programs.FencedLeaseHold{Registration: k.reg, Owner: []byte(k.attempt.Owner().Reveal()), Counter: counter}
}
