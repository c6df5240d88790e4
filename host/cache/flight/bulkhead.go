package flight

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
)

// Bounds of NewBulkhead: typo guards, at least the cache policy's limits.
const (
	MaxConcurrencyLimit = 1 << 20
	MaxQueuedLimit      = 1 << 20
)

// BulkheadStats is a snapshot of a Bulkhead: its bounds, gauges, then
// counters since NewBulkhead.
type BulkheadStats struct {
	// MaxConcurrent and MaxQueued are the bounds it was built with.
	MaxConcurrent, MaxQueued int
	// InUse is the number of permits held; Queued the callers waiting.
	InUse, Queued int

	// Acquired counts permits handed out; Waited those that were queued
	// first.
	Acquired, Waited uint64
	// RefusedFull counts ErrBulkheadFull; TimedOut callers whose deadline
	// passed while queued; Canceled callers cancelled while queued.
	RefusedFull, TimedOut, Canceled uint64
	// DoubleReleases counts release calls after the first for one permit
	// (a caller bug the Bulkhead absorbs).
	DoubleReleases uint64
}

// waiter is one queued Acquire. granted is guarded by the Bulkhead's mutex.
type waiter struct {
	ready   chan struct{}
	granted bool
}

// Bulkhead bounds the concurrent source loads of a region, with a bounded
// FIFO queue in front of the permits: a source that slows down fills the
// permits, then the queue, and then callers are refused at once instead of
// piling up. Cache fail-open is not unlimited fail-open. The zero value is
// not usable; call NewBulkhead. A Bulkhead is safe for concurrent use.
type Bulkhead struct {
	max, maxQueued int

	mu    sync.Mutex
	inUse int
	queue list.List // of *waiter, oldest first
	st    BulkheadStats
}

// NewBulkhead returns a Bulkhead with maxConcurrent permits and room for
// maxQueued waiting callers (0: refuse at once when every permit is
// taken), or a Reason matching ErrInvalid.
func NewBulkhead(maxConcurrent, maxQueued int) (*Bulkhead, error) {
	switch {
	case maxConcurrent < 1 || maxConcurrent > MaxConcurrencyLimit:
		return nil, ErrConcurrencyOutOfRange
	case maxQueued < 0 || maxQueued > MaxQueuedLimit:
		return nil, ErrQueueOutOfRange
	}
	return &Bulkhead{max: maxConcurrent, maxQueued: maxQueued}, nil
}

// Acquire takes a permit and returns the function that gives it back.
// When every permit is taken the caller waits in a FIFO queue of at most
// maxQueued callers; when the queue is full too, Acquire fails at once
// with ErrBulkheadFull. A permit freed while others wait goes to the
// oldest waiter, never to a newcomer, so a busy region cannot starve its
// queue.
//
// When ctx ends first (or has ended already), Acquire returns ctx.Err();
// a deadline comes wrapped so that errors.Is(err, ErrBulkheadTimeout) holds
// too. release is idempotent: calling it again does nothing (and is
// counted in DoubleReleases), so a double release can never free a second
// permit.
func (b *Bulkhead) Acquire(ctx context.Context) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, queueErr(err)
	}
	b.mu.Lock()
	if b.inUse < b.max && b.queue.Len() == 0 {
		b.inUse++
		b.st.Acquired++
		b.mu.Unlock()
		return b.permit(), nil
	}
	if b.queue.Len() >= b.maxQueued {
		b.st.RefusedFull++
		b.mu.Unlock()
		return nil, ErrBulkheadFull
	}
	w := &waiter{ready: make(chan struct{})}
	e := b.queue.PushBack(w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return b.permit(), nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	if w.granted {
		// The permit arrived as ctx ended: pass it on rather than hand a
		// permit to a caller that has given up.
		b.st.Acquired--
		b.st.Waited--
		b.handOff()
	} else {
		b.queue.Remove(e)
	}
	err = queueErr(ctx.Err())
	if isDeadline(ctx.Err()) {
		b.st.TimedOut++
	} else {
		b.st.Canceled++
	}
	b.mu.Unlock()
	return nil, err
}

// queueErr wraps a deadline as ErrBulkheadTimeout.
func queueErr(err error) error {
	if isDeadline(err) {
		return &reasonError{reason: ErrBulkheadTimeout, err: err}
	}
	return err
}

// isDeadline reports whether a context's Err is its deadline.
// ctx.Err() returns exactly one of the two sentinels.
func isDeadline(err error) bool { return err == context.DeadlineExceeded }

// permit returns the idempotent release of one permit.
func (b *Bulkhead) permit() func() {
	var released atomic.Bool
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !released.CompareAndSwap(false, true) {
			b.st.DoubleReleases++
			return
		}
		b.handOff()
	}
}

// handOff gives a freed permit to the oldest waiter, or back to the pool;
// b.mu is held.
func (b *Bulkhead) handOff() {
	if f := b.queue.Front(); f != nil {
		w := b.queue.Remove(f).(*waiter)
		w.granted = true
		b.st.Acquired++
		b.st.Waited++
		close(w.ready)
		return
	}
	b.inUse--
}

// Stats returns a snapshot of the bounds, gauges and counters.
func (b *Bulkhead) Stats() BulkheadStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.st
	s.MaxConcurrent, s.MaxQueued, s.InUse, s.Queued = b.max, b.maxQueued, b.inUse, b.queue.Len()
	return s
}
