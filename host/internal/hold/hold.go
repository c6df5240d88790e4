// Package hold owns the local state of one held lease, for every host
// package that keeps work running under a lease on Redis (host/lease,
// host/lease/fenced, and host/idempotency's processing lease): the state
// machine (ACTIVE, then LOST, RELEASED or UNKNOWN for good), the local
// validity (counted on the monotonic clock from just before the send that
// granted or renewed the lease, minus a drift budget), and Watch, the
// watchdog that renews a hold and ends the protected work's context when
// the hold ends or its validity runs out. It knows nothing of Redis: the
// callers send the programs and decide the transitions from their answers.
//
// What may change here: how the watchdog schedules within its contract
// (renew at the cadence, sooner after a renew that did not renew, never
// after the caller's deadline). What may not: a terminal state is never
// left, a validity never grows from a send that started earlier than the
// one that set it, and losing a hold is decided by its validity, never by
// counting failed renews — every user relies on these.
package hold

import (
	"sync"
	"time"
)

// State is a held lease's state. ACTIVE is the only state a lease can be
// used in; the other three are terminal.
type State uint8

// States.
const (
	// Active: held, and the local validity has not run out.
	Active State = iota + 1
	// Lost: Redis answered that another attempt holds it or nobody does, or
	// the validity ran out before a renew extended it.
	Lost
	// Released: released by its holder.
	Released
	// Unknown: a renew or release was sent and no reply came. The lease may
	// still be held until its TTL runs out; work must treat it as lost.
	Unknown
)

var stateNames = [...]string{Active: "ACTIVE", Lost: "LOST", Released: "RELEASED", Unknown: "UNKNOWN"}

func (s State) String() string {
	if int(s) <= 0 || int(s) >= len(stateNames) {
		return "INVALID"
	}
	return stateNames[s]
}

// Hold is one held lease's state. It is safe for concurrent use.
type Hold struct {
	now     func() time.Time
	drift   time.Duration
	expired error                      // the cause when the validity runs out
	onEnd   func(s State, cause error) // called once, under the lock, on leaving ACTIVE

	mu         sync.Mutex
	state      State
	validUntil time.Time
	cause      error
	done       chan struct{}
}

// New returns an ACTIVE hold valid for serverTTL − drift from sent (the
// clock reading just before the granting send), or a LOST one with cause
// expired when that leaves nothing. onEnd (optional) is called once when
// the hold leaves ACTIVE, with the state and cause (for metrics).
func New(now func() time.Time, drift time.Duration, expired error, sent time.Time, serverTTL time.Duration,
	onEnd func(State, error)) *Hold {
	h := &Hold{now: now, drift: drift, expired: expired, onEnd: onEnd, state: Active, validUntil: sent.Add(serverTTL - drift),
		done: make(chan struct{})}
	if serverTTL <= drift {
		h.endLocked(Lost, expired)
	}
	return h
}

// State returns the state, moving an ACTIVE hold whose validity ran out to
// LOST first.
func (h *Hold) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checkLocked()
	return h.state
}

// Cause says why the hold left ACTIVE (nil while ACTIVE or after a
// release).
func (h *Hold) Cause() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checkLocked()
	return h.cause
}

// Done is closed when the hold leaves ACTIVE.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Remaining is the validity left; 0 when not ACTIVE.
func (h *Hold) Remaining() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checkLocked()
	if h.state != Active {
		return 0
	}
	return h.validUntil.Sub(h.now())
}

// UsableFor reports whether work of the given budget fits in the validity
// left.
func (h *Hold) UsableFor(work time.Duration) bool {
	r := h.Remaining()
	return r > 0 && r >= work
}

// ValidUntil is the monotonic instant the validity runs out.
func (h *Hold) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// Extend records a renew that applied: valid for ttl − drift from sent.
// Two renews may race; the later send start wins whichever reply came
// first. A hold that left ACTIVE stays where it is.
func (h *Hold) Extend(sent time.Time, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != Active {
		return
	}
	if v := sent.Add(ttl - h.drift); v.After(h.validUntil) {
		h.validUntil = v
	}
}

// End moves an ACTIVE hold to s with cause; a terminal state is never
// left.
func (h *Hold) End(s State, cause error) {
	h.mu.Lock()
	h.endLocked(s, cause)
	h.mu.Unlock()
}

func (h *Hold) checkLocked() {
	if h.state == Active && !h.now().Before(h.validUntil) {
		h.endLocked(Lost, h.expired)
	}
}

func (h *Hold) endLocked(s State, cause error) {
	if h.state != Active || s == Active {
		return
	}
	h.state, h.cause = s, cause
	close(h.done)
	if h.onEnd != nil {
		h.onEnd(s, cause)
	}
}
