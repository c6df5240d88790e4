package runtime

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/commands"
	"github.com/caphost/caphost/runtime/certainty"
)

// admission is the outermost hook on every client of one lane: it enforces
// the lifecycle gate and the lane's in-flight bound before anything else,
// tracks what happened inside go-redis well enough to tell "never sent" from
// "maybe sent", and reports one certainty outcome per top-level call.
//
// go-redis runs a connection's handshake (HELLO, AUTH, SELECT, CLIENT
// SETNAME) and, on Cluster, the node-level call and slot-map loads through
// the same hooks with the caller's context. Those nested calls are
// recognised by the call marker in the context and pass straight through:
// they must not take a second in-flight slot (MaxInFlight 1 would deadlock)
// and must not have their errors rewritten (go-redis inspects them).
type admission struct {
	deployment string
	lane       policy.Lane
	gate       *gate
	inflight   *inflight
	acquire    time.Duration
	catalog    *commands.Catalog
	obs        Observer
}

// observed is false when obs is the no-op observer: nobody reads the
// duration or the command label, so neither the clock (two reads cost
// ~100ns on some VMs) nor the catalog is consulted for a successful
// command. (A concrete-type assertion is a single word compare.)
func (a *admission) observed() bool {
	_, nop := a.obs.(nopObserver)
	return !nop
}

func (a *admission) since(start time.Time) time.Duration {
	if start.IsZero() {
		return 0
	}
	return time.Since(start)
}

// call is the per top-level call marker. It is also the context the call
// runs under: embedding the caller's context and answering Value(callKey{})
// itself makes the marker and the derived context one allocation instead of
// three (a command slice, the marker and a context.WithValue node), which
// matters because it is paid on every command.
type call struct {
	context.Context
	owner *admission
	// cmds is the call's commands; for a single command it points into one,
	// so a single command needs no slice allocation.
	cmds []redis.Cmder
	one  [1]redis.Cmder
	// auxFailed records whether the last auxiliary nested call (handshake,
	// slot-map load) failed: go-redis only runs those before writing the
	// command, so a failure of the command right after one proves it was
	// never written. A later successful auxiliary call (AUTH after a refused
	// HELLO, the CLIENT SETNAME pipeline that always follows because the
	// client name is never empty) clears it before the write.
	auxFailed atomic.Bool
}

type callKey struct{}

// Value answers the marker key and delegates everything else (deadline,
// cancellation and the caller's values stay the caller's).
func (c *call) Value(key any) any {
	if _, ok := key.(callKey); ok {
		return c
	}
	return c.Context.Value(key)
}

func (c *call) owns(cmds []redis.Cmder) bool {
	for _, x := range cmds {
		if c.ownsOne(x) {
			return true
		}
	}
	return false
}

func (c *call) ownsOne(x redis.Cmder) bool {
	for _, y := range c.cmds {
		if x == y {
			return true
		}
	}
	return false
}

var _ redis.Hook = (*admission)(nil)

// DialHook marks every dial failure as "before send": nothing can have been
// written on a connection that was never established (this covers refused
// connections, DNS, TLS handshakes and sentinel master discovery, which
// go-redis runs inside the dialer).
func (a *admission) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, &beforeSendError{reason: "dial failed", cause: err}
		}
		return c, nil
	}
}

// ProcessHook admits one command.
func (a *admission) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c := a.marker(ctx); c != nil {
			err := next(ctx, cmd)
			if !c.ownsOne(cmd) {
				c.auxFailed.Store(err != nil)
			}
			return err
		}
		c := &call{Context: ctx, owner: a}
		c.one[0] = cmd
		c.cmds = c.one[:]
		return a.top(c, func(ctx context.Context) error { return next(ctx, cmd) })
	}
}

// ProcessPipelineHook admits a pipeline (or MULTI/EXEC) as one call.
func (a *admission) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c := a.marker(ctx); c != nil {
			err := next(ctx, cmds)
			if !c.owns(cmds) {
				c.auxFailed.Store(err != nil)
			}
			return err
		}
		return a.top(&call{Context: ctx, owner: a, cmds: cmds}, func(ctx context.Context) error { return next(ctx, cmds) })
	}
}

func (a *admission) marker(ctx context.Context) *call {
	if c, ok := ctx.Value(callKey{}).(*call); ok && c.owner == a {
		return c
	}
	return nil
}

// top runs one top-level call under its marker c (which is also its
// context).
func (a *admission) top(c *call, run func(context.Context) error) error {
	cmds := c.cmds
	observed := a.observed()
	var start time.Time
	if observed {
		start = time.Now()
	}
	if err := a.admit(c.Context); err != nil {
		for _, cmd := range cmds {
			name, _ := a.describe(cmd)
			wrapped := certainty.Wrap(name, err, true)
			cmd.SetErr(wrapped)
			a.obs.CommandDone(a.deployment, a.lane, name, err.CertaintyOutcome(), a.since(start))
		}
		return certainty.Wrap(a.label(cmds), err, true)
	}
	defer a.release()

	err := run(c)
	d := a.since(start)

	var first error
	for _, cmd := range cmds {
		cerr := cmd.Err()
		if cerr == nil && len(cmds) == 1 {
			// go-redis sets a single command's error after the hooks return.
			cerr = err
		}
		if !observed && (cerr == nil || cerr == redis.Nil) {
			// A reply (or a nil reply: the exact sentinel; anything
			// wrapping it takes the full path) needs no refinement and
			// there is nobody to report its label to: skip the lookup.
			if cerr != nil {
				cmd.SetErr(cerr)
			}
			if len(cmds) == 1 {
				return cerr
			}
			continue
		}
		name, mutation := a.describe(cmd)
		wrapped := a.refine(c, name, cerr, mutation)
		if wrapped != nil {
			cmd.SetErr(wrapped)
		}
		a.obs.CommandDone(a.deployment, a.lane, name, certainty.Classify(wrapped, mutation), d)
		if len(cmds) == 1 {
			return wrapped
		}
		if first == nil && wrapped != nil && !errors.Is(wrapped, redis.Nil) {
			first = wrapped
		}
	}
	if err == nil {
		return nil
	}
	if first != nil {
		return first
	}
	return certainty.Wrap(a.label(cmds), err, true)
}

// refine turns a call error into a *certainty.Error using what the hook
// observed; redis.Nil and nil pass through.
func (a *admission) refine(c *call, name string, err error, mutation bool) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	var ce *certainty.Error
	if errors.As(err, &ce) {
		return err
	}
	var oc certainty.Outcomer
	if !errors.As(err, &oc) {
		switch {
		case c.auxFailed.Load():
			// The connection handshake (or Cluster slot-map load) that had
			// to precede the write failed.
			err = &beforeSendError{reason: "handshake failed", cause: err}
		case bareContextError(err):
			// go-redis returns the caller's ctx.Err() unwrapped only while
			// waiting for a pool turn or for a dial; once the command is on
			// a connection, deadlines surface as net timeouts (the socket
			// deadline is derived from ctx with ContextTimeoutEnabled), and a
			// cancellation does not interrupt the read.
			err = &beforeSendError{reason: "no connection before deadline", cause: err}
		}
	}
	return certainty.Wrap(name, err, mutation)
}

func bareContextError(err error) bool {
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	// context.DeadlineExceeded is itself a net.Error (it has Timeout), so
	// only a net.Error other than it means the deadline hit a socket.
	var ne net.Error
	return !errors.As(err, &ne) || error(ne) == context.DeadlineExceeded
}

// admit enforces the lifecycle and the in-flight bound, waiting at most
// Timeouts.Acquire (or the caller's deadline) for a slot.
func (a *admission) admit(ctx context.Context) *AdmissionError {
	if !a.gate.enter() {
		return &AdmissionError{Deployment: a.deployment, Lane: a.lane, Outcome: certainty.UnavailableBeforeSend}
	}
	if !a.inflight.acquire(ctx, a.acquire) {
		a.gate.leave()
		return &AdmissionError{Deployment: a.deployment, Lane: a.lane, Outcome: certainty.OverloadedBeforeSend}
	}
	a.obs.InFlight(a.deployment, a.lane, a.inflight.load())
	return nil
}

func (a *admission) release() {
	a.inflight.release()
	a.obs.InFlight(a.deployment, a.lane, a.inflight.load())
	a.gate.leave()
}

// PipelineLabel is the command label of a multi-command pipeline.
const PipelineLabel = "pipeline"

// describe returns a bounded label for cmd (the catalog's canonical name,
// e.g. "GET" or "CONFIG|GET", or "unknown") and
// whether it may mutate (unknown commands are treated as mutations).
func (a *admission) describe(cmd redis.Cmder) (string, bool) {
	e, ok := a.catalog.Lookup(cmd.Args())
	if !ok {
		return "unknown", true
	}
	return e.Name, !e.ReadOnly
}

func (a *admission) label(cmds []redis.Cmder) string {
	if len(cmds) == 1 {
		n, _ := a.describe(cmds[0])
		return n
	}
	return PipelineLabel
}
