package runtime

import (
	"context"
	"sync/atomic"
	"time"
)

// inflight bounds the commands admitted on one lane. Its fast path is one
// compare-and-swap, not a buffered-channel send: every command of every lane
// passes here, and a channel's runtime lock is a point where goroutines on
// different Ps serialise (under contention an M may even sleep on it while
// holding its P), which measurably cost throughput at 32 goroutines.
//
// Waiting happens only when the lane is full. Waiters register before they
// retry, and release wakes one when any is registered; the woken waiter
// passes the wake-up on when it cannot use it or when others still wait and
// slots are free, so no wake-up is lost and no waiter polls.
type inflight struct {
	n       atomic.Int64
	max     int64
	waiters atomic.Int64
	// wake carries wake-up tokens; a token is a hint to retry, never a slot.
	wake chan struct{}
}

func newInflight(max int) *inflight {
	return &inflight{max: int64(max), wake: make(chan struct{}, 1)}
}

// tryAcquire takes a slot if one is free. A compare-and-swap, not an add
// that is undone on failure: a transiently inflated count would make a
// concurrent caller fail spuriously while no release is coming to wake it.
func (f *inflight) tryAcquire() bool {
	for {
		c := f.n.Load()
		if c >= f.max {
			return false
		}
		if f.n.CompareAndSwap(c, c+1) {
			return true
		}
	}
}

// acquire takes a slot, waiting at most wait or until ctx ends.
func (f *inflight) acquire(ctx context.Context, wait time.Duration) bool {
	if f.tryAcquire() {
		return true
	}
	// Register before retrying: a release that happens after this point
	// sees the waiter and leaves a token; one before it freed a slot the
	// retry below finds.
	f.waiters.Add(1)
	defer f.waiters.Add(-1)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		if f.tryAcquire() {
			f.passOn()
			return true
		}
		select {
		case <-f.wake:
		case <-t.C:
			f.passOn()
			return false
		case <-ctx.Done():
			f.passOn()
			return false
		}
	}
}

// release frees a slot and wakes a waiter if there is one.
func (f *inflight) release() {
	f.n.Add(-1)
	if f.waiters.Load() > 0 {
		f.signal()
	}
}

// passOn forwards a wake-up this waiter may have absorbed (it leaves, or it
// took one slot while more may be free) to the waiters that remain.
func (f *inflight) passOn() {
	if f.waiters.Load() > 1 && f.n.Load() < f.max {
		f.signal()
	}
}

func (f *inflight) signal() {
	select {
	case f.wake <- struct{}{}:
	default: // a token is already pending: one wake-up is enough to retry
	}
}

// load is the number of commands in flight.
func (f *inflight) load() int { return int(max(f.n.Load(), 0)) }
