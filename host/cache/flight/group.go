package flight

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Bounds of a Config: typo guards well above any sane setting, and at
// least the cache policy's own limits.
const (
	MaxKeysLimit    = 1 << 20
	MaxWaitersLimit = 1 << 20
	MinLoadTimeout  = time.Millisecond
	MaxLoadTimeout  = time.Hour
	// MaxStackBytes bounds PanicError.Stack.
	MaxStackBytes = 64 << 10
)

// Config bounds a Group. Every field is required.
type Config struct {
	// MaxKeys bounds the loads running at once. A load counts from its
	// start until fn returns, even after every caller left it or its
	// LoadTimeout passed: a loader that ignores its context keeps its slot
	// (see the package documentation). A call that would start one more is
	// refused with ErrTooManyKeys; joining a running load needs no slot.
	MaxKeys int
	// MaxWaiters bounds the callers attached to one load, the one that
	// started it included; one more is refused with ErrTooManyWaiters.
	MaxWaiters int
	// LoadTimeout is the deadline of every load, from its start. When it
	// passes, fn's context ends (cause ErrLoadTimeout) and every attached
	// caller returns an error matching ErrLoadTimeout at once, whether or
	// not fn has returned.
	LoadTimeout time.Duration
}

// Validate reports the first problem with c as a Reason matching ErrInvalid.
func (c Config) Validate() error {
	switch {
	case c.MaxKeys < 1 || c.MaxKeys > MaxKeysLimit:
		return ErrKeysOutOfRange
	case c.MaxWaiters < 1 || c.MaxWaiters > MaxWaitersLimit:
		return ErrWaitersOutOfRange
	case c.LoadTimeout < MinLoadTimeout || c.LoadTimeout > MaxLoadTimeout:
		return ErrLoadTimeoutOutOfRange
	}
	return nil
}

// Stats is a snapshot of a Group: gauges, then counters since New. It
// never names a key.
type Stats struct {
	// InFlight is the number of keys with a load callers can join.
	InFlight int
	// Running is the number of load goroutines whose fn has not returned:
	// InFlight plus loads that were abandoned, timed out or cancelled but
	// whose fn ignores its context. At most MaxKeys.
	Running int
	// Waiters is the number of callers attached to loads now.
	Waiters int

	// Loads counts loads started; Joins callers that joined a running
	// load; Skips Lead calls that found one running and did not join.
	Loads, Joins, Skips uint64
	// Abandoned counts loads cancelled because every caller left;
	// TimedOut loads whose LoadTimeout passed before fn returned; Panics
	// loads whose fn panicked (or called runtime.Goexit).
	Abandoned, TimedOut, Panics uint64
	// RefusedKeys, RefusedWaiters and RefusedClosed count calls refused
	// with ErrTooManyKeys, ErrTooManyWaiters and ErrClosed.
	RefusedKeys, RefusedWaiters, RefusedClosed uint64
}

// PanicError is what every caller attached to a load gets when its fn
// panicked or called runtime.Goexit. The panic is recovered on the load's
// goroutine and never re-raised: one bad load must not take the process
// down. Error() names only the panic value's type; Value and Stack are for
// a deliberate log line, since either may contain caller data.
type PanicError struct {
	// Value is what fn panicked with; nil when it called runtime.Goexit.
	Value any
	// Stack is the load goroutine's stack at the panic, cut at
	// MaxStackBytes.
	Stack []byte
}

// Error names the panic value's type only, never its text.
func (e *PanicError) Error() string {
	if e.Value == nil {
		return "cache flight: the load called runtime.Goexit"
	}
	return fmt.Sprintf("cache flight: the load panicked (%T)", e.Value)
}

// call is one load and the callers attached to it. Every field but ctx,
// cancel, key and done is guarded by the Group's mutex; val and err are
// final once done is closed.
type call[K comparable, V any] struct {
	key    K
	ctx    context.Context // fn's
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when fn returned

	val V
	err error

	waiters  int
	attached bool // g.calls[key] is this call: new callers may join it
	finished bool // fn returned and done is closed
	ended    bool // an end of ctx (timeout or Close) was counted
}

// Group runs at most one load per key for the callers that arrive while it
// runs, within the bounds of its Config. The zero value is not usable;
// call New. A Group is safe for concurrent use.
type Group[K comparable, V any] struct {
	cfg Config

	mu      sync.Mutex
	calls   map[K]*call[K, V]        // loads callers can join
	running map[*call[K, V]]struct{} // every load whose fn has not returned
	closed  bool
	wg      sync.WaitGroup // load goroutines
	st      Stats          // counters; gauges are computed by Stats
	waiters int
}

// New returns an empty Group bounded by cfg, or a Reason matching
// ErrInvalid.
func New[K comparable, V any](cfg Config) (*Group[K, V], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Group[K, V]{cfg: cfg, calls: map[K]*call[K, V]{}, running: map[*call[K, V]]struct{}{}}, nil
}

// Do returns the result of fn for key, running fn at most once for all the
// callers that arrive while it runs.
//
// fn runs on a goroutine of its own with a context that keeps the values of
// the ctx of the caller that started it but none of its cancellation or
// deadline: the load belongs to every attached caller, not to the first.
// That context ends when LoadTimeout passes (cause ErrLoadTimeout), when
// the last attached caller has gone (cause ErrAbandoned; the key is free
// at once, so a later caller starts a fresh load) or when the Group is
// closed (cause ErrClosed). A result fn returns after its context ended is
// discarded. The entry is removed the moment fn returns, so a later call
// loads again: the Group never becomes a cache.
//
// Each caller returns when the result is ready, with fn's value and error
// (the same V for every caller: share only values that are safe to share);
// when its own ctx ends, with ctx.Err() while the load goes on for the
// others; or when the load's context ends, with an error matching
// ErrLoadTimeout or ErrClosed. shared reports whether the caller joined a
// load another caller started. A panic in fn reaches every attached caller
// as a *PanicError.
//
// Refusals return at once without running anything: ErrTooManyKeys,
// ErrTooManyWaiters, ErrClosed, or ctx.Err() when ctx has already ended.
func (g *Group[K, V]) Do(ctx context.Context, key K, fn func(ctx context.Context) (V, error)) (v V, shared bool, err error) {
	return g.do(ctx, key, fn, true)
}

// Lead is Do for a caller that has something to serve while a load runs
// (a stale value): when a load for key is already running and joinable it
// returns ErrRunning at once instead of joining it, and otherwise starts
// the load and waits for it as Do does. So one caller per key waits for
// the refresh and the others answer at once. The refusals are Do's.
func (g *Group[K, V]) Lead(ctx context.Context, key K, fn func(ctx context.Context) (V, error)) (V, error) {
	v, _, err := g.do(ctx, key, fn, false)
	return v, err
}

func (g *Group[K, V]) do(ctx context.Context, key K, fn func(ctx context.Context) (V, error), join bool) (v V, shared bool, err error) {
	if err := ctx.Err(); err != nil {
		return v, false, err
	}
	g.mu.Lock()
	if g.closed {
		g.st.RefusedClosed++
		g.mu.Unlock()
		return v, false, ErrClosed
	}
	c, ok := g.calls[key]
	if ok && c.ctx.Err() != nil {
		// Its deadline passed and fn has not returned: nobody may join a
		// load that can no longer deliver.
		g.detach(c)
		g.noteEnd(c)
		ok = false
	}
	if ok && !join {
		g.st.Skips++
		g.mu.Unlock()
		return v, false, ErrRunning
	}
	if ok {
		if c.waiters >= g.cfg.MaxWaiters {
			g.st.RefusedWaiters++
			g.mu.Unlock()
			return v, false, ErrTooManyWaiters
		}
		c.waiters++
		g.waiters++
		g.st.Joins++
		g.mu.Unlock()
		return g.wait(ctx, c, true)
	}
	if len(g.running) >= g.cfg.MaxKeys {
		g.st.RefusedKeys++
		g.mu.Unlock()
		return v, false, ErrTooManyKeys
	}
	c = g.start(ctx, key, fn)
	g.mu.Unlock()
	return g.wait(ctx, c, false)
}

// start registers and starts a load for key; g.mu is held.
func (g *Group[K, V]) start(ctx context.Context, key K, fn func(context.Context) (V, error)) *call[K, V] {
	lctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	tctx, stop := context.WithTimeoutCause(lctx, g.cfg.LoadTimeout, ErrLoadTimeout)
	c := &call[K, V]{key: key, ctx: tctx, cancel: cancel, done: make(chan struct{}), waiters: 1, attached: true}
	g.calls[key] = c
	g.running[c] = struct{}{}
	g.waiters++
	g.st.Loads++
	g.wg.Add(1)
	go g.run(c, stop, fn)
	return c
}

// run is a load's goroutine.
func (g *Group[K, V]) run(c *call[K, V], stop context.CancelFunc, fn func(context.Context) (V, error)) {
	defer g.wg.Done()
	var (
		v        V
		err      error
		returned bool
	)
	defer func() {
		var pe *PanicError
		if !returned {
			// recover is nil after runtime.Goexit: report that too, or the
			// callers would wait for a result that never comes.
			pe = &PanicError{Value: recover(), Stack: stack()}
			err = pe
		}
		g.finish(c, v, err, pe != nil)
		stop()
		c.cancel(context.Canceled)
	}()
	v, err = fn(c.ctx)
	returned = true
}

// stack returns the current goroutine's stack, at most MaxStackBytes.
func stack() []byte {
	buf := make([]byte, MaxStackBytes)
	return bytes.Clone(buf[:runtime.Stack(buf, false)])
}

// finish records fn's return and releases the callers.
func (g *Group[K, V]) finish(c *call[K, V], v V, err error, panicked bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.running, c)
	g.detach(c)
	g.waiters -= c.waiters // released by done, they touch nothing after it
	c.waiters = 0
	if panicked {
		g.st.Panics++
	}
	if c.ctx.Err() != nil {
		// Late: the callers were told (or are being told) why the load
		// ended; what fn returned now is discarded.
		c.err = g.noteEnd(c)
	} else {
		c.val, c.err = v, err
	}
	c.finished = true
	close(c.done)
}

// wait blocks one attached caller until the result, its own ctx's end or
// the load's end.
func (g *Group[K, V]) wait(ctx context.Context, c *call[K, V], shared bool) (v V, _ bool, err error) {
	select {
	case <-c.done:
		return c.val, shared, c.err
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	g.mu.Lock()
	if c.finished { // a ready result wins over an end that raced with it
		g.mu.Unlock()
		return c.val, shared, c.err
	}
	c.waiters--
	g.waiters--
	abandon := false
	if err = ctx.Err(); err == nil {
		err = g.noteEnd(c)
	}
	if c.waiters == 0 {
		g.detach(c)
		if c.ctx.Err() == nil {
			abandon = true
			g.st.Abandoned++
		}
	}
	g.mu.Unlock()
	if abandon {
		c.cancel(ErrAbandoned)
	}
	return v, shared, err
}

// detach makes c unreachable for new callers; g.mu is held.
func (g *Group[K, V]) detach(c *call[K, V]) {
	if c.attached {
		delete(g.calls, c.key)
		c.attached = false
	}
}

// noteEnd counts, once, why c's context ended and returns the error its
// callers get for it; g.mu is held.
func (g *Group[K, V]) noteEnd(c *call[K, V]) error {
	cause := context.Cause(c.ctx)
	if !c.ended {
		c.ended = true
		if cause == ErrLoadTimeout {
			g.st.TimedOut++
		}
	}
	switch cause {
	case ErrLoadTimeout:
		return loadTimeout()
	case ErrClosed:
		return ErrClosed
	}
	return cause // ErrAbandoned: there is nobody to tell
}

// Stats returns a snapshot of the gauges and counters.
func (g *Group[K, V]) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.st
	s.InFlight, s.Running, s.Waiters = len(g.calls), len(g.running), g.waiters
	return s
}

// Close refuses new calls with ErrClosed, cancels every running load
// (cause ErrClosed; attached callers return ErrClosed at once) and waits
// until every load's fn has returned: a loader that ignores its context
// holds Close up. Close is idempotent.
func (g *Group[K, V]) Close() {
	g.mu.Lock()
	g.closed = true
	cs := make([]*call[K, V], 0, len(g.running))
	for c := range g.running {
		cs = append(cs, c)
	}
	g.mu.Unlock()
	for _, c := range cs {
		c.cancel(ErrClosed)
	}
	g.wg.Wait()
}
