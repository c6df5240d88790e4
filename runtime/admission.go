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
	sem        chan struct{}
	acquire    time.Duration
	catalog    *commands.Catalog
	obs        Observer
}

// call is the per top-level call marker.
type call struct {
	owner *admission
	cmds  []redis.Cmder
	// auxFailed records whether the last auxiliary nested call (handshake,
	// slot-map load) failed: go-redis only runs those before writing the
	// command, so a failure of the command right after one proves it was
	// never written. A later successful auxiliary call (AUTH after a refused
	// HELLO, the CLIENT SETNAME pipeline that always follows because the
	// client name is never empty) clears it before the write.
	auxFailed atomic.Bool
}

type callKey struct{}

func (c *call) owns(cmds []redis.Cmder) bool {
	for _, x := range cmds {
		for _, y := range c.cmds {
			if x == y {
				return true
			}
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
		cmds := []redis.Cmder{cmd}
		if c := a.marker(ctx); c != nil {
			return a.nested(c, cmds, func() error { return next(ctx, cmd) })
		}
		return a.top(ctx, cmds, func(ctx context.Context) error { return next(ctx, cmd) })
	}
}

// ProcessPipelineHook admits a pipeline (or MULTI/EXEC) as one call.
func (a *admission) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c := a.marker(ctx); c != nil {
			return a.nested(c, cmds, func() error { return next(ctx, cmds) })
		}
		return a.top(ctx, cmds, func(ctx context.Context) error { return next(ctx, cmds) })
	}
}

func (a *admission) marker(ctx context.Context) *call {
	if c, ok := ctx.Value(callKey{}).(*call); ok && c.owner == a {
		return c
	}
	return nil
}

func (a *admission) nested(c *call, cmds []redis.Cmder, run func() error) error {
	err := run()
	if !c.owns(cmds) {
		c.auxFailed.Store(err != nil)
	}
	return err
}

func (a *admission) top(ctx context.Context, cmds []redis.Cmder, run func(context.Context) error) error {
	start := time.Now()
	if err := a.admit(ctx); err != nil {
		for _, cmd := range cmds {
			name, _ := a.describe(cmd)
			wrapped := certainty.Wrap(name, err, true)
			cmd.SetErr(wrapped)
			a.obs.CommandDone(a.deployment, a.lane, name, err.CertaintyOutcome(), time.Since(start))
		}
		return certainty.Wrap(a.label(cmds), err, true)
	}
	defer a.release()

	c := &call{owner: a, cmds: cmds}
	err := run(context.WithValue(ctx, callKey{}, c))
	d := time.Since(start)

	var first error
	for _, cmd := range cmds {
		name, mutation := a.describe(cmd)
		cerr := cmd.Err()
		if cerr == nil && len(cmds) == 1 {
			// go-redis sets a single command's error after the hooks return.
			cerr = err
		}
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
	var ne net.Error
	return !errors.As(err, &ne)
}

// admit enforces the lifecycle and the in-flight bound, waiting at most
// Timeouts.Acquire (or the caller's deadline) for a slot.
func (a *admission) admit(ctx context.Context) *AdmissionError {
	if !a.gate.enter() {
		return &AdmissionError{Deployment: a.deployment, Lane: a.lane, Outcome: certainty.UnavailableBeforeSend}
	}
	select {
	case a.sem <- struct{}{}:
	default:
		t := time.NewTimer(a.acquire)
		defer t.Stop()
		select {
		case a.sem <- struct{}{}:
		case <-t.C:
			a.gate.leave()
			return &AdmissionError{Deployment: a.deployment, Lane: a.lane, Outcome: certainty.OverloadedBeforeSend}
		case <-ctx.Done():
			a.gate.leave()
			return &AdmissionError{Deployment: a.deployment, Lane: a.lane, Outcome: certainty.OverloadedBeforeSend}
		}
	}
	a.obs.InFlight(a.deployment, a.lane, len(a.sem))
	return nil
}

func (a *admission) release() {
	<-a.sem
	a.obs.InFlight(a.deployment, a.lane, len(a.sem))
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
