package lease

import (
	"context"
	"time"

	"github.com/caphost/caphost/host/internal/hold"
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

// watch is Hold's watchdog (host/internal/hold.Watch).
func (c *Client) watch(ctx context.Context, h *Handle, cancel context.CancelCauseFunc, stop <-chan struct{}) {
	hold.Watch(ctx, h.st, h.ttl/3, func(rctx context.Context) bool {
		kind, _ := h.Renew(rctx)
		if c.afterRenew != nil {
			c.afterRenew(kind)
		}
		return kind != RenewUnavailable
	}, cancel, stop, hold.Options{Closing: c.closing, Closed: ErrClosed})
}
