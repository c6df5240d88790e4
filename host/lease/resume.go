package lease

import (
	"context"
	"fmt"
)

// Renew renews the lease r.Attempt holds on (r.Purpose, r.Resource) for
// r.TTL without a Handle: for a holder that keeps only its attempt (a
// sidecar caller, a process restarted with its stored owner token). The
// program checks the owner and operation exactly as Handle.Renew's does,
// and a lost reply is never resent (the outcome is RenewIndeterminate:
// treat the lease as lost). On Renewed, Validity is the validity left: r.TTL
// from just before the send, minus the drift budget and the time since.
// r.Wait is ignored. Errors are ErrInvalidRequest, ErrClosed, ErrCorrupt and
// ctx's.
func (c *Client) Renew(ctx context.Context, r Request) (RenewResult, error) {
	key, err := c.key(&r)
	if err != nil {
		return RenewResult{}, err
	}
	if c.isClosed() {
		return RenewResult{}, ErrClosed
	}
	label := c.m.purpose(r.Purpose)
	res, start, err := c.renewCall(ctx, key, label, r.Attempt, r.TTL)
	if err != nil {
		return RenewResult{}, err
	}
	switch res.Kind {
	case Renewed:
		res.Validity = max(start.Add(r.TTL-c.drift).Sub(c.now()), 0)
	case RenewLost:
		c.m.lostLabel(label, Lost, ErrLost)
	case RenewIndeterminate:
		c.m.lostLabel(label, Unknown, res.Cause)
	}
	return res, nil
}

// Release deletes the lease of (purpose, resource) if attempt still holds
// it, without a Handle (never a blind DEL: another owner's lease stays). A
// lost reply is repeated once, as Handle.Release does, and when the repeat
// is lost too (ReleaseIndeterminate) it is counted as a handle's would be:
// caphost_lease_lost_total{cause="unknown"}. Errors are ErrInvalidRequest,
// ErrClosed, ErrCorrupt and ctx's.
func (c *Client) Release(ctx context.Context, purpose string, resource []byte, attempt Attempt) (ReleaseResult, error) {
	if attempt.IsZero() {
		return ReleaseResult{}, fmt.Errorf("%w: no attempt (mint one with NewAttempt)", ErrInvalidRequest)
	}
	key, err := c.resourceKey(purpose, resource)
	if err != nil {
		return ReleaseResult{}, err
	}
	if c.isClosed() {
		return ReleaseResult{}, ErrClosed
	}
	label := c.m.purpose(purpose)
	res, err := c.releaseCall(ctx, key, label, attempt)
	if err == nil && res.Kind == ReleaseIndeterminate {
		c.m.lostLabel(label, Unknown, res.Cause)
	}
	return res, err
}
