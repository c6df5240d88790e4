// Package natbatch owns natural batching: calls that arrive while enough
// sends are already in flight queue, and leave together as one send when
// a send completes. Nothing waits for a timer or for more calls, so a lone
// caller's latency is that of the unbatched call; under load the client
// and the server pay one write, one read and one lane turn per batch
// instead of per call.
//
// What a send is (a pipeline of scripts, of reads) belongs to the user of
// a Queue; this package only decides which calls leave together and who
// sends them. What may change here: the admission policy, never the
// outcomes a caller sees.
package natbatch

import (
	"context"
	"sync"
)

// Outcome is what became of one call.
type Outcome int

const (
	// Sent: the call was sent, alone or in a batch, and send filled its
	// item before Do returned.
	Sent Outcome = iota
	// Abandoned: the caller's context ended while the call was still
	// queued; nothing of it was sent.
	Abandoned
	// Left: the caller's context ended after its batch was taken. The
	// batch is (being) sent by another call, which will still write the
	// result into the item: the caller must not reuse the item.
	Left
)

// Queue batches calls of one kind. T is the call's item, normally a
// pointer that send fills with the call's result. A Queue is safe for
// concurrent use; its only state is the queue.
type Queue[T any] struct {
	one        func(ctx context.Context, item T)
	many       func(ctx context.Context, items []T)
	maxFlights int
	maxBatch   int

	mu      sync.Mutex
	flights int          // sends in flight (lone calls and batches)
	queue   []*waiter[T] // waiting, oldest first
	pool    sync.Pool    // *waiter[T]
}

type waiter[T any] struct {
	item T
	// wake receives exactly one signal: "send this batch" (batch set) or
	// "your result is ready".
	wake  chan struct{}
	batch []*waiter[T] // set when this call sends the batch it heads
	taken bool         // under mu: left the queue as part of a batch
}

// New returns a Queue with at most maxFlights sends in flight and at most
// maxBatch items per send (both at least 1). A call sent alone is sent by
// one, under its caller's context; a batch (two items or more, or one
// left over) by many, under the sending call's context without its
// cancellation (the others depend on the send), so many must bound
// itself. Both must fill every item they get before they return.
//
// The queue holds at most maxFlights*maxBatch calls; a call finding it
// full is sent alone at once, not counted as a flight, so beyond that the
// sender's own bounds apply exactly as without a Queue.
func New[T any](maxFlights, maxBatch int, one func(ctx context.Context, item T), many func(ctx context.Context, items []T)) *Queue[T] {
	q := &Queue[T]{one: one, many: many, maxFlights: max(1, maxFlights), maxBatch: max(1, maxBatch)}
	q.pool.New = func() any { return &waiter[T]{wake: make(chan struct{}, 1)} }
	return q
}

// Do sends item: at once and alone while fewer than maxFlights sends are
// in flight; otherwise queued, to leave with the oldest queued calls when
// a send completes.
func (q *Queue[T]) Do(ctx context.Context, item T) Outcome {
	q.mu.Lock()
	if q.flights < q.maxFlights {
		q.flights++
		q.mu.Unlock()
		defer q.next()
		q.one(ctx, item)
		return Sent
	}
	if len(q.queue) >= q.maxFlights*q.maxBatch {
		q.mu.Unlock()
		q.one(ctx, item)
		return Sent
	}
	w := q.pool.Get().(*waiter[T])
	w.item = item
	q.queue = append(q.queue, w)
	q.mu.Unlock()

	select {
	case <-w.wake:
	case <-ctx.Done():
		q.mu.Lock()
		if !w.taken {
			q.unqueue(w)
			q.mu.Unlock()
			q.recycle(w)
			return Abandoned
		}
		lead := w.batch != nil
		q.mu.Unlock()
		if lead {
			<-w.wake // the "send" signal is on its way; the others need it sent
			break
		}
		select {
		case <-w.wake: // the result arrived after all
		default:
			// The sender still wakes w, which is then left to the GC.
			return Left
		}
	}
	if w.batch != nil {
		q.sendBatch(ctx, w.batch)
	}
	q.recycle(w)
	return Sent
}

// sendBatch sends batch under ctx's values without its cancellation,
// wakes every call but the sender (batch[0]), and then hands the flight
// on, even if sending panicked.
func (q *Queue[T]) sendBatch(ctx context.Context, batch []*waiter[T]) {
	defer q.next()
	items := make([]T, len(batch))
	for i, w := range batch {
		items[i] = w.item
	}
	q.many(context.WithoutCancel(ctx), items)
	for _, w := range batch[1:] {
		w.wake <- struct{}{}
	}
}

// next hands the finished send's slot to the queue: the oldest queued
// calls (at most maxBatch) become a batch sent by its first call.
func (q *Queue[T]) next() {
	q.mu.Lock()
	if len(q.queue) == 0 {
		q.flights--
		q.mu.Unlock()
		return
	}
	n := min(len(q.queue), q.maxBatch)
	batch := make([]*waiter[T], n)
	copy(batch, q.queue)
	rest := copy(q.queue, q.queue[n:])
	clear(q.queue[rest:])
	q.queue = q.queue[:rest]
	for _, w := range batch {
		w.taken = true
	}
	batch[0].batch = batch
	q.mu.Unlock()
	batch[0].wake <- struct{}{}
}

func (q *Queue[T]) unqueue(w *waiter[T]) {
	for i, x := range q.queue {
		if x == w {
			copy(q.queue[i:], q.queue[i+1:])
			q.queue[len(q.queue)-1] = nil
			q.queue = q.queue[:len(q.queue)-1]
			return
		}
	}
}

// recycle returns a waiter nobody else references any more to the pool.
func (q *Queue[T]) recycle(w *waiter[T]) {
	*w = waiter[T]{wake: w.wake}
	q.pool.Put(w)
}

// InFlight is the number of sends in flight, lone calls and batches (for
// tests and gauges).
func (q *Queue[T]) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.flights
}

// Queued is the number of calls waiting (for tests and gauges).
func (q *Queue[T]) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}
