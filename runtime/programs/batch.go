package programs

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/keys"
)

// Batcher sends program calls with integer-only replies — rate
// evaluations (RatePlan calls of any lean rate program), durable
// notification submits (notify-submit-v2) and efficiency-lease acquires
// and releases (lease-{acquire,release}-v2 and -v3) — that arrive while
// the script lane is busy as one pipeline ("natural batching"); one
// pipeline may mix programs and policies. A call goes out at once, alone,
// while fewer than maxFlights sends of this Batcher are in flight;
// otherwise it queues, and when a send completes, the queued calls (at
// most maxBatch) go out together, sent by the first of them. Nothing ever
// waits for a timer or for more calls, so a lone caller's latency is that
// of the unbatched call; under load the client and the server pay one
// write, one read and one lane turn per batch instead of per call.
//
// Each call stays its own EVALSHA/FCALL: atomic on its own, decoded and
// certainty-classified on its own (a connection lost mid-pipeline leaves
// each call it affected never-sent or INDETERMINATE, exactly as it would a
// lone call). A queued call whose context ends before its batch is taken is
// removed and reported OVERLOADED_BEFORE_SEND (never sent, like a call that
// gave up waiting for a lane slot); one whose batch was taken reports
// INDETERMINATE at once, while the batch completes for the others. The
// call that sends a batch does so under its context's values without its
// cancellation (the others depend on the send), bounded by the lane's
// command timeouts.
//
// The queue holds at most maxFlights*maxBatch calls; a call finding it full
// is sent alone, so beyond that the lane's own in-flight bound (and its
// OVERLOADED_BEFORE_SEND) applies exactly as without a Batcher.
//
// A Batcher is safe for concurrent use. Its only state is the queue.
type Batcher struct {
	e          *Executor
	maxFlights int
	maxBatch   int

	mu      sync.Mutex
	flights int          // sends in flight (lone calls and batches)
	queue   []*batchCall // waiting, oldest first
	calls   sync.Pool    // *batchCall
}

// batchCall is one queued evaluation.
type batchCall struct {
	fp   *fastProgram
	args []any
	r    reply
	err  error
	// wake receives exactly one signal: "send this batch" (batch set) or
	// "your result is ready".
	wake  chan struct{}
	batch []*batchCall // set when this call sends the batch it heads
	taken bool         // under mu: left the queue as part of a batch
}

// NewBatcher returns a Batcher over e with at most maxFlights concurrent
// sends and at most maxBatch calls per pipeline (both at least 1).
func (e *Executor) NewBatcher(maxFlights, maxBatch int) *Batcher {
	b := &Batcher{e: e, maxFlights: max(1, maxFlights), maxBatch: max(1, maxBatch)}
	b.calls.New = func() any { return &batchCall{wake: make(chan struct{}, 1)} }
	return b
}

// RatePlan is Executor.RatePlan, batched.
func (b *Batcher) RatePlan(ctx context.Context, state, dedup keys.Key, plan *RatePlan, cost int64, evaluationID string) (RateResult, error) {
	fp, args, err := b.e.planArgs(state, dedup, plan, cost, evaluationID)
	if err != nil {
		return RateResult{}, err
	}
	r, err := b.do(ctx, fp, args)
	if err != nil {
		return RateResult{}, err
	}
	return rateResult(&r), nil
}

// RateTokenBucketPlan is RatePlan (kept for callers of the token-bucket
// name).
func (b *Batcher) RateTokenBucketPlan(ctx context.Context, state, dedup keys.Key, plan *TokenBucketPlan, costScaled int64, evaluationID string) (RateResult, error) {
	return b.RatePlan(ctx, state, dedup, plan, costScaled, evaluationID)
}

func (b *Batcher) do(ctx context.Context, fp *fastProgram, args []any) (reply, error) {
	b.mu.Lock()
	if b.flights < b.maxFlights {
		b.flights++
		b.mu.Unlock()
		defer b.next()
		return b.e.runInts(ctx, fp, args)
	}
	if len(b.queue) >= b.maxFlights*b.maxBatch {
		b.mu.Unlock()
		return b.e.runInts(ctx, fp, args) // alone, under the lane's bound
	}
	c := b.calls.Get().(*batchCall)
	c.fp, c.args = fp, args
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	select {
	case <-c.wake:
	case <-ctx.Done():
		b.mu.Lock()
		if !c.taken {
			b.unqueue(c)
			b.mu.Unlock()
			b.recycle(c)
			// Like a call that gave up waiting for a lane slot.
			return reply{}, ctxError(ctx, fp, certainty.OverloadedBeforeSend)
		}
		lead := c.batch != nil
		b.mu.Unlock()
		if lead {
			<-c.wake // the "send" signal is on its way; the others need it sent
			break
		}
		select {
		case <-c.wake: // the result arrived after all
		default:
			// In a batch sent by another call: stop waiting. The sender
			// still delivers to c, which is then left to the GC.
			return reply{}, ctxError(ctx, fp, certainty.Indeterminate)
		}
	}
	if c.batch != nil {
		b.sendBatch(ctx, c.batch)
	}
	r, err := c.r, c.err
	b.recycle(c)
	return r, err
}

// sendBatch sends batch and then hands the flight on, even if sending
// panicked.
func (b *Batcher) sendBatch(ctx context.Context, batch []*batchCall) {
	defer b.next()
	b.send(ctx, batch)
}

// next hands the finished send's slot to the queue: the oldest queued calls
// (at most maxBatch) become a batch sent by its first call.
func (b *Batcher) next() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.flights--
		b.mu.Unlock()
		return
	}
	n := min(len(b.queue), b.maxBatch)
	batch := make([]*batchCall, n)
	copy(batch, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	for _, c := range batch {
		c.taken = true
	}
	batch[0].batch = batch
	b.mu.Unlock()
	batch[0].wake <- struct{}{}
}

// send runs batch as one pipeline and delivers every result, waking every
// call but the sender (batch[0]).
func (b *Batcher) send(ctx context.Context, batch []*batchCall) {
	sctx := context.WithoutCancel(ctx)
	cmds := make([]redis.Cmder, len(batch))
	for i, c := range batch {
		cmds[i] = newFastCmd(sctx, c.fp, c.args)
	}
	pipe := b.e.client.Pipeline()
	_ = pipe.BatchProcess(sctx, cmds...)
	_, _ = pipe.Exec(sctx) // every command carries its own error
	refused := len(cmds) > 1 && guard.RefusedWhole(cmds)
	for i, c := range batch {
		err := cmds[i].Err()
		if refused || err != nil && b.e.mode == policy.ProgramsEvalshaManaged && isNoScript(err) {
			// Refused whole for one call's command, or an exact NOSCRIPT
			// (nothing ran): this call is sent again alone.
			c.r, c.err = b.e.runInts(sctx, c.fp, c.args)
		} else {
			c.r, c.err = b.e.decodeFastCmd(c.fp, cmds[i], err)
		}
		if i > 0 {
			c.wake <- struct{}{}
		}
	}
}

func (b *Batcher) unqueue(c *batchCall) {
	for i, q := range b.queue {
		if q == c {
			copy(b.queue[i:], b.queue[i+1:])
			b.queue[len(b.queue)-1] = nil
			b.queue = b.queue[:len(b.queue)-1]
			return
		}
	}
}

// recycle returns a call nobody else references any more to the pool.
func (b *Batcher) recycle(c *batchCall) {
	*c = batchCall{wake: c.wake}
	b.calls.Put(c)
}

// intsSender sends one call of a program prepared for the integer-only
// path: an Executor alone, or a Batcher, pipelined with other calls. The
// facades that exist in both forms are written once against it.
type intsSender interface {
	sendInts(ctx context.Context, fp *fastProgram, args []any) (reply, error)
	executor() *Executor
}

func (e *Executor) sendInts(ctx context.Context, fp *fastProgram, args []any) (reply, error) {
	return e.runInts(ctx, fp, args)
}

func (e *Executor) executor() *Executor { return e }

func (b *Batcher) sendInts(ctx context.Context, fp *fastProgram, args []any) (reply, error) {
	return b.do(ctx, fp, args)
}

func (b *Batcher) executor() *Executor { return b.e }

// sendFast sends program id, prepared as fp (nil: not in the catalog),
// with ks and argv through s. Every key must be set and, with two or more,
// share a slot; both are refused before anything is sent.
func sendFast(ctx context.Context, s intsSender, fp *fastProgram, id string, ks []keys.Key, argv ...any) (reply, error) {
	if fp == nil {
		return reply{}, &CompatibilityError{Program: id, Reason: "program not in catalog"}
	}
	args := make([]any, 0, 3+len(ks)+len(argv))
	args = append(args, fp.command, fp.target, len(ks))
	for i, k := range ks {
		if k.IsZero() {
			return reply{}, &Error{Program: id, Err: ErrZeroKey}
		}
		if i > 0 {
			if err := sameSlot(id, ks[0], k); err != nil {
				return reply{}, err
			}
		}
		args = append(args, k.Redis())
	}
	return s.sendInts(ctx, fp, append(args, argv...))
}

// ctxError reports a call that ended with its context: o says whether it
// can have been sent.
func ctxError(ctx context.Context, fp *fastProgram, o certainty.Outcome) error {
	return &Error{Program: fp.program.spec.ID, Err: batchCtxError(ctx, o)}
}
