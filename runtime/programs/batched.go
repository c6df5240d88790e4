package programs

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/internal/natbatch"
)

// Batched returns an Executor that runs every program call of its
// methods with natural batching, as a Batcher does for the integer-only
// programs: a call goes out at once, alone, while fewer than maxFlights
// calls of this Executor are in flight; otherwise it queues, and when a
// call completes the queued calls (at most maxBatch) leave as one
// pipeline, sent by the first of them. Nothing waits for a timer, so a
// lone caller's latency is that of the unbatched call; under load the
// client and the server pay one write, one read and one lane turn per
// pipeline instead of per call.
//
// Each call stays its own EVALSHA/FCALL, atomic on its own, decoded and
// certainty-classified on its own, with the NOSCRIPT recovery of a lone
// call (an exact NOSCRIPT ran nothing: the source is loaded and that call
// sent again alone). A queued call whose context ends before its batch is
// taken is never sent (OVERLOADED_BEFORE_SEND); one whose batch was taken
// reports INDETERMINATE at once while the batch completes for the others,
// sent under the sending call's context values without its cancellation,
// bounded by the lane's command timeouts. The replicated variants
// (program then WAIT in one pipeline) are not batched.
//
// The returned Executor shares e's catalog, mode and client; e itself is
// unchanged. The integer-only path (RatePlan, NotifySubmit, the v2 and v3
// lease and permit calls) is not affected: a Batcher batches those.
func (e *Executor) Batched(maxFlights, maxBatch int) *Executor {
	b := *e
	b.calls = natbatch.New(maxFlights, maxBatch, e.sendCall, e.sendCalls)
	return &b
}

// programCall is one queued call of run: its program, keys and
// arguments, and the raw reply or error that the send fills.
type programCall struct {
	p    Program
	wire []string
	args []any
	v    any
	err  error
}

// runQueued sends one call through e.calls.
func (e *Executor) runQueued(ctx context.Context, p Program, wire []string, args []any) (any, error) {
	c := &programCall{p: p, wire: wire, args: args}
	switch e.calls.Do(ctx, c) {
	case natbatch.Abandoned:
		// Like a call that gave up waiting for a lane slot.
		return nil, batchCtxError(ctx, certainty.OverloadedBeforeSend)
	case natbatch.Left:
		return nil, batchCtxError(ctx, certainty.Indeterminate)
	}
	return c.v, c.err
}

// sendCall sends one call alone.
func (e *Executor) sendCall(ctx context.Context, c *programCall) {
	c.v, c.err = e.call(ctx, c.p, c.wire, c.args)
}

// sendCalls sends calls as one pipeline. A call answered with an exact
// NOSCRIPT ran nothing: it is sent again alone, which loads the source.
func (e *Executor) sendCalls(ctx context.Context, cs []*programCall) {
	if len(cs) == 1 {
		e.sendCall(ctx, cs[0])
		return
	}
	pipe := e.client.Pipeline()
	cmds := make([]redis.Cmder, len(cs))
	for i, c := range cs {
		switch {
		case e.mode != policy.ProgramsFunctionsProvisioned:
			cmds[i] = pipe.EvalSha(ctx, c.p.spec.SHA1, c.wire, c.args...)
		case c.p.spec.ReadOnly != nil && *c.p.spec.ReadOnly:
			cmds[i] = pipe.FCallRO(ctx, c.p.spec.Function, c.wire, c.args...)
		default:
			cmds[i] = pipe.FCall(ctx, c.p.spec.Function, c.wire, c.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
	if guard.RefusedWhole(cmds) {
		// The guard refuses a pipeline whole for one refused command: each
		// call is sent again alone, so a call is refused only for its own.
		for _, c := range cs {
			e.sendCall(ctx, c)
		}
		return
	}
	for i, c := range cs {
		c.v, c.err = cmds[i].(*redis.Cmd).Result()
		if c.err != nil && e.mode != policy.ProgramsFunctionsProvisioned && isNoScript(c.err) {
			e.sendCall(ctx, c)
		}
	}
}

// batchCtxError reports a queued call that ended with its context: o
// says whether it can have been sent.
func batchCtxError(ctx context.Context, o certainty.Outcome) error {
	code := "batch-canceled"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = "batch-deadline"
	}
	return &certainty.Error{Outcome: o, Op: "batch", Code: code, Cause: ctx.Err()}
}
