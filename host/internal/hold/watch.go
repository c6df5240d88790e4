package hold

import (
	"context"
	"time"
)

// Watch keeps an ACTIVE hold alive until stop is closed. It calls renew
// every cadence — sooner, well inside the validity left, when renew reports
// that nothing was sent — with a context bounded by the validity left, and
// never after ctx ends (the caller's deadline). It cancels the protected
// work's context when the hold leaves ACTIVE (with the hold's cause), when
// its validity runs out (its own timer: losing a lease is decided by the
// deadline, never by counting failed renews), or when closing is closed
// (with closed). closing may be nil.
func Watch(ctx context.Context, h *Hold, every time.Duration, renew func(context.Context) (sent bool),
	cancel context.CancelCauseFunc, stop, closing <-chan struct{}, closed error) {
	next := every
	for {
		tick := time.NewTimer(next)
		expiry := time.NewTimer(max(h.ValidUntil().Sub(h.now()), 0))
		select {
		case <-stop:
		case <-closing:
			cancel(closed)
		case <-h.Done():
			cancel(h.Cause())
		case <-ctx.Done():
			// No renew after the caller's deadline: the work's context is
			// done too.
		case <-expiry.C:
			h.State() // moves an expired hold to LOST; Done fires next
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
			sent := renew(rctx)
			rcancel()
			next = every
			if !sent {
				next = max(min(every, h.Remaining()/4), time.Millisecond)
			}
			continue
		}
		tick.Stop()
		expiry.Stop()
		return
	}
}
