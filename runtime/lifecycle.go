package runtime

import (
	"sync"
	"sync/atomic"
)

// State is the runtime lifecycle state.
type State int32

// Lifecycle states. Transitions only go forward: Open → Draining → Closed.
const (
	StateOpen State = iota
	StateDraining
	StateClosed
)

// String returns OPEN, DRAINING or CLOSED.
func (s State) String() string {
	switch s {
	case StateOpen:
		return "OPEN"
	case StateDraining:
		return "DRAINING"
	case StateClosed:
		return "CLOSED"
	}
	return "INVALID"
}

// gate is the single admission/close authority: every top-level call enters
// it, Close flips it to draining and waits until it is empty. It is one
// atomic word (a draining bit plus the in-flight count) so the call path
// takes no lock shared by every lane; only Close's one-time transitions use
// the sync.Once.
type gate struct {
	word   atomic.Int64 // drainingBit | in-flight count
	closed atomic.Bool
	idle   chan struct{} // closed once draining and empty
	once   sync.Once
}

const drainingBit = int64(1) << 62

func newGate() *gate { return &gate{idle: make(chan struct{})} }

// enter admits a call unless the gate is draining or closed. A refused
// enter's transient increment is undone at once and cannot be mistaken for
// an admitted call by drain (idle fires only when the count is zero).
func (g *gate) enter() bool {
	if g.word.Add(1)&drainingBit != 0 {
		g.leave()
		return false
	}
	return true
}

func (g *gate) leave() {
	if g.word.Add(-1) == drainingBit {
		g.once.Do(func() { close(g.idle) })
	}
}

// drain moves Open → Draining and returns a channel closed once no call is
// in flight.
func (g *gate) drain() <-chan struct{} {
	if old := g.word.Or(drainingBit); old&^drainingBit == 0 {
		g.once.Do(func() { close(g.idle) })
	}
	return g.idle
}

func (g *gate) inFlight() int { return int(g.word.Load() &^ drainingBit) }

func (g *gate) setClosed() { g.closed.Store(true) }

func (g *gate) current() State {
	switch {
	case g.closed.Load():
		return StateClosed
	case g.word.Load()&drainingBit != 0:
		return StateDraining
	}
	return StateOpen
}
