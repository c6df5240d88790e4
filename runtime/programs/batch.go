package programs

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/internal/natbatch"
	"github.com/caphost/caphost/runtime/keys"
)

// Batcher sends program calls with integer-only replies — rate
// evaluations (RatePlan calls of any lean rate program), durable
// notification submits (notify-submit-v3) and efficiency-lease acquires
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
// lone call). The exception is the notify submit: queued submits of one
// stream share a notify-submit-v3 call of up to four intents, each judged
// on its own inside it, all sharing its certainty. A queued call whose context ends before its batch is taken is
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
	e     *Executor
	q     *natbatch.Queue[*batchCall]
	calls sync.Pool // *batchCall
}

// batchCall is one call: its program and arguments, and the reply or
// error the send fills.
type batchCall struct {
	fp   *fastProgram
	args []any
	r    reply
	err  error
}

// NewBatcher returns a Batcher over e with at most maxFlights concurrent
// sends and at most maxBatch calls per pipeline (both at least 1).
func (e *Executor) NewBatcher(maxFlights, maxBatch int) *Batcher {
	b := &Batcher{e: e}
	b.q = natbatch.New(maxFlights, maxBatch, b.sendOne, b.send)
	b.calls.New = func() any { return new(batchCall) }
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
	c := b.calls.Get().(*batchCall)
	c.fp, c.args = fp, args
	switch b.q.Do(ctx, c) {
	case natbatch.Abandoned:
		b.recycle(c)
		// Like a call that gave up waiting for a lane slot.
		return reply{}, ctxError(ctx, fp, certainty.OverloadedBeforeSend)
	case natbatch.Left:
		// In a batch sent by another call: the sender still delivers to
		// c, which is then left to the GC.
		return reply{}, ctxError(ctx, fp, certainty.Indeterminate)
	}
	r, err := c.r, c.err
	b.recycle(c)
	return r, err
}

// recycle returns a call nobody else references any more to the pool.
func (b *Batcher) recycle(c *batchCall) {
	*c = batchCall{}
	b.calls.Put(c)
}

// sendOne sends one call alone.
func (b *Batcher) sendOne(ctx context.Context, c *batchCall) {
	c.r, c.err = b.e.runInts(ctx, c.fp, c.args)
}

// send runs batch as one pipeline (natbatch wakes the callers) and
// fills every call's result. Queued notify submits of one stream
// share notify-submit-v3 calls (groupSubmits): the server pays the script
// call once per group instead of once per intent.
func (b *Batcher) send(sctx context.Context, batch []*batchCall) {
	groups := groupSubmits(b.e.notifySubmitV3, batch)
	cmds := make([]redis.Cmder, len(groups))
	args := make([][]any, len(groups))
	for i, g := range groups {
		args[i] = g[0].args
		if len(g) > 1 {
			args[i] = mergeSubmits(g)
		}
		cmds[i] = newFastCmd(sctx, g[0].fp, args[i])
	}
	pipe := b.e.client.Pipeline()
	_ = pipe.BatchProcess(sctx, cmds...)
	_, _ = pipe.Exec(sctx) // every command carries its own error
	// The guard refuses a pipeline whole for one refused command: then
	// every call, and every intent of a shared submit, is sent again
	// alone, so each is refused only for its own.
	refused := len(batch) > 1 && guard.RefusedWhole(cmds)
	for i, g := range groups {
		if refused {
			for _, c := range g {
				c.r, c.err = b.e.runInts(sctx, c.fp, c.args)
			}
			continue
		}
		var (
			r   reply
			err = cmds[i].Err()
		)
		if err != nil && b.e.mode == policy.ProgramsEvalshaManaged && isNoScript(err) {
			// An exact NOSCRIPT ran nothing: load and send this call alone.
			r, err = b.e.runInts(sctx, g[0].fp, args[i])
		} else {
			r, err = b.e.decodeFastCmd(g[0].fp, cmds[i], err)
		}
		// Every member of a group shares its call's reply and error: a
		// lost reply is every member's.
		for j, c := range g {
			c.r, c.err = r, err
			if len(g) > 1 {
				c.r.item, c.r.items = j, len(g)
			}
		}
	}
}

// submitGroup is what the notify submits sharing one call have in common:
// the stream and the shared arguments (retention, maxLen).
type submitGroup struct {
	stream            string
	retention, maxLen int64
}

// groupSubmits splits batch into the calls to send, in order of their
// first member: a call of its own for every call that is not a lone
// notify-submit-v3 intent (fp), and for those, groups of at most
// MaxNotifySubmitGroup intents of one submitGroup whose plans total at
// most maxNotifyGroupPlanBytes (a larger plan goes alone).
func groupSubmits(fp *fastProgram, batch []*batchCall) [][]*batchCall {
	out := make([][]*batchCall, 0, len(batch))
	type open struct {
		key   submitGroup
		at    int // index in out
		bytes int
	}
	var opens []open
	for _, c := range batch {
		key, plan, ok := loneSubmit(fp, c)
		if !ok {
			out = append(out, []*batchCall{c})
			continue
		}
		o := -1
		for i := range opens {
			if opens[i].key == key {
				o = i
				break
			}
		}
		if o >= 0 && len(out[opens[o].at]) < MaxNotifySubmitGroup && opens[o].bytes+len(plan) <= maxNotifyGroupPlanBytes {
			out[opens[o].at] = append(out[opens[o].at], c)
			opens[o].bytes += len(plan)
			continue
		}
		out = append(out, []*batchCall{c})
		if o >= 0 {
			opens[o].at, opens[o].bytes = len(out)-1, len(plan)
		} else {
			opens = append(opens, open{key, len(out) - 1, len(plan)})
		}
	}
	return out
}

// loneSubmit reports whether c is a notify-submit-v3 call of one intent
// as Batcher.NotifySubmit builds it (command, target, 2, stream, record,
// retention, maxLen, id, plan, digest) and returns its group and plan.
func loneSubmit(fp *fastProgram, c *batchCall) (submitGroup, []byte, bool) {
	if fp == nil || c.fp != fp || len(c.args) != 10 {
		return submitGroup{}, nil, false
	}
	stream, ok1 := c.args[3].(string)
	ret, ok2 := c.args[5].(int64)
	maxLen, ok3 := c.args[6].(int64)
	plan, ok4 := c.args[8].([]byte)
	return submitGroup{stream, ret, maxLen}, plan, ok1 && ok2 && ok3 && ok4
}

// mergeSubmits builds one notify-submit-v3 call of the intents of g: the
// stream, every record, the shared arguments, then each intent's id, plan
// and digest, in g's order.
func mergeSubmits(g []*batchCall) []any {
	a := g[0].args
	args := make([]any, 0, 6+4*len(g))
	args = append(args, a[0], a[1], 1+len(g), a[3])
	for _, c := range g {
		args = append(args, c.args[4])
	}
	args = append(args, a[5], a[6])
	for _, c := range g {
		args = append(args, c.args[7], c.args[8], c.args[9])
	}
	return args
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
