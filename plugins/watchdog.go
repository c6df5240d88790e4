package plugins

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Why a watchdog: wazero's WithCloseOnContextDone watches the call's context
// from a goroutine it starts on every call anyway; what costs is giving it a
// fresh context.WithTimeout per call (~1.5 µs, three allocations). Instead
// each instance owns one long-lived callCtx whose Done channel only this
// engine-wide goroutine closes, once, when the instance's call is overdue or
// its caller's context has ended. wazero then interrupts the guest through
// its own safe path (module exit code, checked at every function call and
// loop back-edge of the instrumented code) and the instance is discarded.

// watchTick is the watchdog's resolution: a call is stopped at most this
// long after its deadline.
const watchTick = time.Millisecond

// watchIdleTicks is how many empty ticks the watchdog waits before parking.
const watchIdleTicks = 1000

// watchdog enforces per-call deadlines and caller cancellation for every
// module of one engine.
type watchdog struct {
	mods     sync.Map // *Module -> struct{}: every module from Load to Close
	inflight atomic.Int64
	parked   atomic.Bool
	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func newWatchdog() *watchdog {
	w := &watchdog{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *watchdog) close() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// begin registers a call on inst. It wakes a parked watchdog; the order of
// the two atomics (inflight first, then parked, mirrored in park) means
// either this call sees parked or the watchdog sees the call.
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
	t := time.NewTicker(watchTick)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			if w.inflight.Load() > 0 {
				idle = 0
				w.scan(now.UnixNano())
				continue
			}
			if idle++; idle < watchIdleTicks {
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
				t.Reset(watchTick)
			}
			w.parked.Store(false)
			idle = 0
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
}

func (c *callCtx) kill(reason uint32) {
	if c.reason.CompareAndSwap(0, reason) {
		close(c.done)
	}
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
