package runtime

import (
	"sync"
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
// it, Close flips it to draining and waits until it is empty. A mutex (not a
// WaitGroup) because calls may try to enter while Close is waiting.
type gate struct {
	mu    sync.Mutex
	state State
	n     int
	idle  chan struct{} // closed when n reaches 0 after draining started
}

func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != StateOpen {
		return false
	}
	g.n++
	return true
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// drain moves Open → Draining and returns a channel closed once no call is
// in flight.
func (g *gate) drain() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == StateOpen {
		g.state = StateDraining
	}
	done := make(chan struct{})
	if g.n == 0 {
		close(done)
		return done
	}
	g.idle = done
	return done
}

func (g *gate) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

func (g *gate) setClosed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state = StateClosed
}

func (g *gate) current() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}
