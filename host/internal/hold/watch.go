package hold

import (
	"context"
	"time"
)

// Options are Watch's optional inputs. The zero value waits on the real
// clock's timers, counts the first renew from when Watch starts and has no
// closing signal.
type Options struct {
	// After returns a channel that receives once d has passed on the clock
	// of the hold's now, at once when d ≤ 0 (nil: time.After). A test
	// passes a fake clock's timers, together with its now to New.
	After func(d time.Duration) <-chan time.Time
	// From is the instant, on the clock of the hold's now, that the first
	// renew is counted from (zero: when Watch starts) — for a caller whose
	// lease runs from just before the send that granted it.
	From time.Time
	// Closing, when closed, ends the watch and cancels the work's context
	// with Closed (nil: never).
	Closing <-chan struct{}
	Closed  error
}

// Watch keeps an ACTIVE hold alive until stop is closed. It calls renew
// every cadence, counted from just before the previous renew was called
// (the first from o.From) — sooner, well inside the validity left, when
// renew reports false (the lease was not renewed and the hold is still
// ACTIVE: nothing was sent, or no renew was confirmed) — with a context
// bounded by the validity left, and never after ctx ends (the caller's
// deadline). It cancels the protected work's context when the hold leaves
// ACTIVE (with the hold's cause), when its validity runs out (its own
// timer: losing a lease is decided by the deadline, never by counting
// failed renews), or when o.Closing is closed (with o.Closed); never once
// stop is closed, whichever came first.
//
// Every timer is set at an instant read from the hold's clock before
// anything Watch waits on could move that clock (the renew's own call
// included), so when Watch's goroutine gets to run does not change what
// fires: on a fake clock the outcome is decided by the test alone.
func Watch(ctx context.Context, h *Hold, every time.Duration, renew func(context.Context) (ok bool),
	cancel context.CancelCauseFunc, stop <-chan struct{}, o Options) {
	after := o.After
	if after == nil {
		after = time.After
	}
	next := o.From
	if next.IsZero() {
		next = h.now()
	}
	next = next.Add(every)
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for {
		now := h.now()
		tick, expiry := after(next.Sub(now)), after(h.ValidUntil().Sub(now))
		select {
		case <-stop:
			return
		case <-ctx.Done():
			// No renew after the caller's deadline: the work's context is
			// done too.
			return
		case <-o.Closing:
			if !stopped() {
				cancel(o.Closed)
			}
			return
		case <-h.Done():
			if !stopped() {
				cancel(h.Cause())
			}
			return
		case <-expiry:
			h.State() // moves an expired hold to LOST; Done fires next
			continue
		case <-tick:
			if ctx.Err() != nil {
				return // both were ready: the deadline wins
			}
		}
		sent := h.now()
		left := h.Remaining()
		if left <= 0 {
			continue // LOST (or ended meanwhile): Done fires next
		}
		rctx, rcancel := context.WithTimeout(ctx, left)
		ok := renew(rctx)
		rcancel()
		if ok {
			next = sent.Add(every)
			continue
		}
		now = h.now()
		next = now.Add(max(min(every, h.Remaining()/4), time.Millisecond))
	}
}
