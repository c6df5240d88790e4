package hold

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/clocktest"
)

const (
	ttl   = 30 * time.Second
	drift = 3 * time.Second
	every = ttl / 3
)

// watched is one Watch running on a fake clock, over a hold granted by a
// send at t0.
type watched struct {
	clk    *clocktest.Clock
	t0     time.Time
	h      *Hold
	work   context.Context
	stop   chan struct{}
	ended  chan struct{}
	renews chan time.Time // the clock reading at each renew call
}

// watch starts Watch with renew (nil: a renew that applies, extending the
// hold from just before its send) after the clock has moved by late since
// the granting send.
func watch(t *testing.T, late time.Duration, o Options, renew func(w *watched, rctx context.Context) bool) *watched {
	t.Helper()
	clk := clocktest.New()
	w := &watched{clk: clk, t0: clk.Now(), stop: make(chan struct{}), ended: make(chan struct{}), renews: make(chan time.Time, 16)}
	w.h = New(clk.Now, drift, errExpired, w.t0, ttl, nil)
	if renew == nil {
		renew = func(w *watched, _ context.Context) bool { w.h.Extend(w.clk.Now(), ttl); return true }
	}
	clk.Advance(late)
	work, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	w.work = work
	o.After = clk.After
	go func() {
		defer close(w.ended)
		Watch(context.Background(), w.h, every, func(rctx context.Context) bool {
			at := clk.Now()
			ok := renew(w, rctx)
			w.renews <- at
			return ok
		}, cancel, w.stop, o)
	}()
	t.Cleanup(func() {
		select {
		case <-w.stop:
		default:
			close(w.stop)
		}
		<-w.ended
	})
	return w
}

// TestWatchRenewsOnTheCadenceFromEachSend: the first renew is due a
// cadence after From (the granting send, not when Watch got to run), each
// next one a cadence after the previous renew's send (not its reply), and
// each confirmed renew extends the validity from its send.
func TestWatchRenewsOnTheCadenceFromEachSend(t *testing.T) {
	const late, roundTrip = 2 * time.Second, time.Second
	w := watch(t, late, Options{From: clocktest.Start}, func(w *watched, _ context.Context) bool {
		sent := w.clk.Now()
		w.clk.Advance(roundTrip)
		w.h.Extend(sent, ttl)
		return true
	})
	for i := range 3 {
		due := w.t0.Add(time.Duration(i+1) * every)
		w.clk.Armed(t, due)
		w.clk.Advance(due.Sub(w.clk.Now()))
		assert.Equal(t, due, clocktest.Recv(t, w.renews), "renew %d", i+1)
		assert.Equal(t, due.Add(ttl-drift), w.h.ValidUntil(), "renew %d extended the validity from its send", i+1)
	}
	assert.Equal(t, Active, w.h.State())
	assert.NoError(t, context.Cause(w.work))
}

// TestWatchCountsFromItsStartByDefault: without From, the first renew is
// due a cadence after Watch started (the lease's behaviour).
func TestWatchCountsFromItsStartByDefault(t *testing.T) {
	const late = 2 * time.Second
	w := watch(t, late, Options{}, nil)
	due := w.t0.Add(late + every)
	w.clk.Armed(t, due)
	w.clk.Advance(due.Sub(w.clk.Now()))
	assert.Equal(t, due, clocktest.Recv(t, w.renews))
}

// TestWatchRetriesSoonerAndEndsWhenTheValidityRunsOut: renews that do not
// renew are tried again sooner, a quarter of the validity left (at most a
// cadence), each bounded by the validity left; when it runs out the work's
// context ends with the hold's expiry cause, however many renews failed.
func TestWatchRetriesSoonerAndEndsWhenTheValidityRunsOut(t *testing.T) {
	w := watch(t, 0, Options{From: clocktest.Start}, func(w *watched, rctx context.Context) bool {
		_, bounded := rctx.Deadline()
		assert.True(t, bounded, "a renew is bounded by the validity left")
		return false
	})
	validUntil := w.t0.Add(ttl - drift)
	due := w.t0.Add(every)
	for i := range 3 {
		w.clk.Armed(t, due)
		w.clk.Advance(due.Sub(w.clk.Now()))
		assert.Equal(t, due, clocktest.Recv(t, w.renews), "renew %d", i+1)
		due = due.Add(min(every, validUntil.Sub(due)/4))
	}
	assert.NoError(t, context.Cause(w.work), "failed renews alone never end the work")
	w.clk.Armed(t, validUntil)
	w.clk.Advance(validUntil.Sub(w.clk.Now()))
	<-w.ended
	assert.ErrorIs(t, context.Cause(w.work), errExpired)
	assert.Equal(t, Lost, w.h.State())
}

// TestWatchEndsTheWorkWithTheHoldsCause: a renew that finds the lease gone
// ends the hold; the work's context ends with that cause.
func TestWatchEndsTheWorkWithTheHoldsCause(t *testing.T) {
	errGone := errors.New("gone")
	w := watch(t, 0, Options{From: clocktest.Start}, func(w *watched, _ context.Context) bool {
		w.h.End(Lost, errGone)
		return true
	})
	w.clk.Armed(t, w.t0.Add(every))
	w.clk.Advance(every)
	clocktest.Recv(t, w.renews)
	<-w.ended
	assert.ErrorIs(t, context.Cause(w.work), errGone)
}

// TestWatchEndsTheWorkWhenClosing: Closing ends the work with Closed.
func TestWatchEndsTheWorkWhenClosing(t *testing.T) {
	errClosed := errors.New("closed")
	closing := make(chan struct{})
	w := watch(t, 0, Options{Closing: closing, Closed: errClosed}, nil)
	close(closing)
	<-w.ended
	assert.ErrorIs(t, context.Cause(w.work), errClosed)
}

// TestWatchNeverCancelsOnceStopped: when the work has returned (stop is
// closed), an end that is ready at the same time does not cancel its
// context: the caller decides from the cause whether the work was cut
// short, and it was not.
func TestWatchNeverCancelsOnceStopped(t *testing.T) {
	for range 20 { // the select would otherwise pick either at random
		clk := clocktest.New()
		h := New(clk.Now, drift, errExpired, clk.Now(), ttl, nil)
		closing := make(chan struct{})
		stop := make(chan struct{})
		close(stop)
		close(closing)
		h.End(Lost, errors.New("gone"))
		work, cancel := context.WithCancelCause(context.Background())
		Watch(context.Background(), h, every, func(context.Context) bool { t.Error("no renew"); return true },
			cancel, stop, Options{After: clk.After, Closing: closing, Closed: errors.New("closed")})
		require.NoError(t, context.Cause(work))
	}
}

// TestWatchStopsAtTheCallersDeadline: no renew once ctx has ended.
func TestWatchStopsAtTheCallersDeadline(t *testing.T) {
	for range 20 { // the select would otherwise pick either at random
		clk := clocktest.New()
		h := New(clk.Now, drift, errExpired, clk.Now(), ttl, nil)
		ctx, cancelCtx := context.WithCancel(context.Background())
		cancelCtx()
		clk.Advance(every) // a renew is due, and so is the caller's deadline
		work, cancel := context.WithCancelCause(context.Background())
		Watch(ctx, h, every, func(context.Context) bool { t.Error("no renew after the deadline"); return true },
			cancel, make(chan struct{}), Options{After: clk.After, From: clocktest.Start})
		require.NoError(t, context.Cause(work))
		require.Equal(t, Active, h.State())
	}
}
