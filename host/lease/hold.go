package lease

import (
	"context"
	"time"
)

// ReleaseTimeout bounds the release Hold makes after its function returns
// (also when the caller's context is already done).
const ReleaseTimeout = 2 * time.Second

// Hold acquires r and, if the lease is held, runs fn under a watchdog, then
// releases the lease. The watchdog renews at a third of the TTL (sooner
// when a renew could not be sent), never after ctx's deadline, and cancels
// fn's context — with the handle's cause (ErrLost, ErrValidityExpired, the
// runtime's error for UNKNOWN) or ErrClosed — as soon as the handle leaves
// ACTIVE or its validity runs out. fn must stop its protected work when its
// context ends. When the lease is not held, fn does not run and Hold
// returns the acquisition. The error is fn's, or Acquire's.
func (c *Client) Hold(ctx context.Context, r Request, fn func(ctx context.Context, h *Handle) error) (Acquisition, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Acquisition{}, ErrClosed
	}
	c.holds.Add(1)
	c.mu.Unlock()
	defer c.holds.Done()

	a, err := c.Acquire(ctx, r)
	if err != nil || !a.Kind.Held() {
		return a, err
	}
	h := a.Handle
	fctx, cancel := context.WithCancelCause(ctx)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		c.watch(ctx, h, cancel, stop)
	}()
	ferr := fn(fctx, h)
	close(stop)
	<-stopped
	cancel(nil)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer rcancel()
	if _, err := h.Release(rctx); err != nil {
		c.log.Warn("lease: release after Hold failed", "error", err)
	}
	return a, ferr
}

// watch is Hold's watchdog. Losing the lease is decided by the validity
// deadline (its own timer) or by Redis's answer, never by counting failed
// renews.
func (c *Client) watch(ctx context.Context, h *Handle, cancel context.CancelCauseFunc, stop <-chan struct{}) {
	every := h.ttl / 3
	next := every
	for {
		tick := time.NewTimer(next)
		expiry := time.NewTimer(max(h.validity().Sub(c.now()), 0))
		select {
		case <-stop:
		case <-c.closing:
			cancel(ErrClosed)
		case <-h.Done():
			cancel(h.Cause())
		case <-ctx.Done():
			// No renew after the caller's deadline: fn's context is done too.
		case <-expiry.C:
			h.State() // moves an expired handle to LOST; Done fires next
			next = 0
			tick.Stop()
			continue
		case <-tick.C:
			expiry.Stop()
			left := h.Remaining()
			if left <= 0 {
				next = 0
				continue
			}
			rctx, rcancel := context.WithTimeout(ctx, left)
			kind, _ := h.Renew(rctx)
			rcancel()
			if c.afterRenew != nil {
				c.afterRenew(kind)
			}
			next = every
			if kind == RenewUnavailable {
				// Nothing was sent: try again well inside the validity left.
				next = max(min(every, h.Remaining()/4), time.Millisecond)
			}
			continue
		}
		tick.Stop()
		expiry.Stop()
		return
	}
}
