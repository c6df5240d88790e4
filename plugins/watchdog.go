package plugins

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Why a watchdog: a fresh context.WithTimeout per call costs (~1.5 µs, three
// allocations), and upstream wazero's WithCloseOnContextDone starts a
// goroutine per call to watch it. Instead each instance owns one long-lived
// callCtx that only this engine-wide goroutine ends, once, when the
// instance's call is overdue or its caller's context has ended. callCtx
// implements AfterFunc, which the patched wazero (third_party/wazero,
// CAPHOST.md) registers instead of starting that goroutine: ending the call
// sets the module's exit code, compiled code sees it at the next loop header
// and the guest is interrupted through wazero's own safe path; the instance
// is then discarded.

// The watchdog's resolution (its tick) is a tenth of the shortest call
// timeout of any module loaded so far, within [minWatchTick, maxWatchTick]:
// a call is stopped at most 10% late (1 ms for timeouts under 10 ms). The
// tick is what the watchdog costs: every tick wakes a thread, which on a
// VM with expensive syscalls was measured at a sixth of a 1-goroutine rate
// decision's client CPU with a fixed 1 ms tick; 10 ms made it noise.
const (
	minWatchTick = time.Millisecond
	maxWatchTick = 10 * time.Millisecond
	// watchIdle is how long the watchdog ticks without a call in flight
	// before it parks.
	watchIdle = time.Second
)

// tickFor is the watchdog tick a call timeout asks for.
func tickFor(callTimeout time.Duration) time.Duration {
	return min(max(callTimeout/10, minWatchTick), maxWatchTick)
}

// watchdog enforces per-call deadlines and caller cancellation for every
// module of one engine.
type watchdog struct {
	epoch    time.Time    // deadlines are monotonic ns since epoch
	tick     atomic.Int64 // ns; only ever lowered (see noteCallTimeout)
	mods     sync.Map     // *Module -> struct{}: every module from Load to Close
	inflight atomic.Int64
	parked   atomic.Bool
	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func newWatchdog() *watchdog {
	w := &watchdog{epoch: time.Now(), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.tick.Store(int64(maxWatchTick))
	go w.run()
	return w
}

// noteCallTimeout lowers the tick to what a module's call timeout needs.
// It is never raised again: a finer tick than needed is only a cost.
func (w *watchdog) noteCallTimeout(d time.Duration) {
	want := int64(tickFor(d))
	for {
		cur := w.tick.Load()
		if want >= cur || w.tick.CompareAndSwap(cur, want) {
			return
		}
	}
}

// now is the monotonic time in ns since the watchdog started: one clock
// read, where time.Now takes two.
func (w *watchdog) now() int64 { return int64(time.Since(w.epoch)) }

// at converts t to the watchdog's clock.
func (w *watchdog) at(t time.Time) int64 { return int64(t.Sub(w.epoch)) }

func (w *watchdog) close() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// begin registers a call on inst with a deadline on the watchdog clock
// (now). It wakes a parked watchdog; the order of the two atomics (inflight
// first, then parked, mirrored in park) means either this call sees parked
// or the watchdog sees the call.
func (w *watchdog) begin(inst *instance, ctx context.Context, deadline int64) {
	inst.wmu.Lock()
	inst.deadline = deadline
	inst.cctx.parent = ctx
	inst.wmu.Unlock()
	if w.inflight.Add(1) == 1 && w.parked.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// end unregisters the call and reports whether the watchdog stopped it (the
// instance must then be discarded even if the guest had already returned).
func (w *watchdog) end(inst *instance) (killed bool) {
	inst.wmu.Lock()
	inst.deadline = 0
	inst.cctx.parent = nil
	killed = inst.cctx.reason.Load() != 0
	inst.wmu.Unlock()
	w.inflight.Add(-1)
	return killed
}

func (w *watchdog) run() {
	defer close(w.done)
	tick := time.Duration(w.tick.Load())
	t := time.NewTicker(tick)
	defer t.Stop()
	idleSince := time.Now()
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			if cur := time.Duration(w.tick.Load()); cur != tick {
				tick = cur
				t.Reset(tick)
			}
			if w.inflight.Load() > 0 {
				idleSince = now
				w.scan(w.at(now))
				continue
			}
			if now.Sub(idleSince) < watchIdle {
				continue
			}
			// Park: no ticks while the engine is idle.
			w.parked.Store(true)
			if w.inflight.Load() == 0 {
				t.Stop()
				select {
				case <-w.stop:
					return
				case <-w.wake:
				}
				tick = time.Duration(w.tick.Load())
				t.Reset(tick)
			}
			w.parked.Store(false)
			idleSince = time.Now()
		}
	}
}

// scan stops every overdue or abandoned call.
func (w *watchdog) scan(now int64) {
	w.mods.Range(func(k, _ any) bool {
		k.(*Module).live.Range(func(_, v any) bool {
			v.(*instance).watch(now)
			return true
		})
		return true
	})
}

// watch stops inst's call if it is overdue or its caller gave up.
func (inst *instance) watch(now int64) {
	inst.wmu.Lock()
	defer inst.wmu.Unlock()
	if inst.deadline == 0 || inst.cctx.reason.Load() != 0 {
		return
	}
	switch {
	case now >= inst.deadline:
		inst.cctx.kill(reasonDeadline)
	case inst.cctx.parent.Err() != nil:
		if inst.cctx.parent.Err() == context.DeadlineExceeded {
			inst.cctx.kill(reasonDeadline)
		} else {
			inst.cctx.kill(reasonCanceled)
		}
	}
}

const (
	reasonDeadline = 1
	reasonCanceled = 2
)

// callCtx is the context wazero sees for every call into one instance: no
// deadline, a Done channel closed only by the watchdog, and values from the
// caller's context (for host functions' logging). It is reused across calls,
// so a call allocates no context. parent is only read on the calling
// goroutine (Value) or under wmu (watch).
type callCtx struct {
	parent context.Context
	done   chan struct{}
	reason atomic.Uint32

	// after is the first function registered through AfterFunc (wazero's,
	// at the start of every call) and stop, c.stopAfter bound once, its stop
	// function, so the per-call registration allocates nothing; more holds
	// any further registration (code deriving contexts from this one).
	// Guarded by afterMu.
	afterMu sync.Mutex
	after   func()
	stop    func() bool
	more    map[*func()]struct{}
}

// init prepares a callCtx in place (it holds a mutex: never copied).
func (c *callCtx) init() {
	c.done = make(chan struct{})
	c.stop = c.stopAfter
}

func (c *callCtx) kill(reason uint32) {
	if c.reason.CompareAndSwap(0, reason) {
		close(c.done)
		c.afterMu.Lock()
		f, more := c.after, c.more
		c.after, c.more = nil, nil
		c.afterMu.Unlock()
		if f != nil {
			go f()
		}
		for g := range more {
			go (*g)()
		}
	}
}

// AfterFunc is the method context.AfterFunc looks for, and the patched
// wazero too: it runs f (for wazero, setting the module's exit code) in its
// own goroutine once the call is ended, unless stop is called first, so
// wazero needs no goroutine per call to watch Done.
func (c *callCtx) AfterFunc(f func()) (stop func() bool) {
	c.afterMu.Lock()
	defer c.afterMu.Unlock()
	switch {
	case c.reason.Load() != 0:
		go f()
		return func() bool { return false }
	case c.after == nil:
		c.after = f
		return c.stop
	}
	return c.addMore(f)
}

// addMore registers a further AfterFunc function; called with afterMu held.
// (Apart from AfterFunc, so that only this path pays for f escaping.)
func (c *callCtx) addMore(f func()) (stop func() bool) {
	if c.more == nil {
		c.more = make(map[*func()]struct{})
	}
	key := &f
	c.more[key] = struct{}{}
	return func() bool {
		c.afterMu.Lock()
		defer c.afterMu.Unlock()
		_, ok := c.more[key]
		delete(c.more, key)
		return ok
	}
}

// stopAfter unregisters the first AfterFunc function and reports whether
// it had not run yet.
func (c *callCtx) stopAfter() bool {
	c.afterMu.Lock()
	defer c.afterMu.Unlock()
	stopped := c.after != nil
	c.after = nil
	return stopped
}

// Deadline implements context.Context: the watchdog owns the deadline.
func (c *callCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context.
func (c *callCtx) Done() <-chan struct{} { return c.done }

// Err implements context.Context.
func (c *callCtx) Err() error {
	switch c.reason.Load() {
	case reasonDeadline:
		return context.DeadlineExceeded
	case reasonCanceled:
		return context.Canceled
	}
	return nil
}

// Value implements context.Context.
func (c *callCtx) Value(key any) any {
	if p := c.parent; p != nil {
		return p.Value(key)
	}
	return nil
}
