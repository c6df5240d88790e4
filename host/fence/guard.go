package fence

import (
	"fmt"
	"sync"
)

// Guard is the in-memory protected side of one resource: it holds the
// registered epoch and the high watermark and admits a token iff the
// resource is active, the token's epoch is the registered one and its
// counter is at or above the watermark (strictly above in Strict mode).
// Admission advances the watermark atomically. A Guard is safe for
// concurrent use.
//
// A Guard remembers only what this process saw: it protects state that
// lives no longer than the Guard (an in-process cache, a file this process
// owns and reloads with its watermark). State that outlives the process
// needs its watermark stored with it, in the same transaction: see Store.
type Guard struct {
	mu    sync.Mutex
	mode  Mode
	state State
	epoch uint64
	hwm   int64
	cfg   config
}

// NewGuard returns an active Guard for epoch with the given high watermark
// (0 for a fresh registration, or the persisted watermark on reload).
// WithObserver counts its decisions.
func NewGuard(epoch uint64, highWatermark int64, mode Mode, opts ...Option) (*Guard, error) {
	if err := checkRegistration(epoch, highWatermark, mode); err != nil {
		return nil, err
	}
	return &Guard{mode: mode, state: Active, epoch: epoch, hwm: highWatermark, cfg: configOf(opts)}, nil
}

func checkRegistration(epoch uint64, highWatermark int64, mode Mode) error {
	if epoch == 0 || highWatermark < 0 || highWatermark > MaxCounter {
		return fmt.Errorf("fence: registration epoch %d, watermark %d: %w", epoch, highWatermark, ErrRange)
	}
	if mode != Repeatable && mode != Strict {
		return fmt.Errorf("fence: unknown mode %d", mode)
	}
	return nil
}

// Admit decides on tok and, when it is admitted, advances the watermark.
//
// Admit alone linearizes only the decision: if the protected effect runs
// after Admit returns, a newer holder may be admitted and write in between,
// and the late effect then lands after the newer one. Use Do unless the
// effect is itself ordered by the watermark.
func (g *Guard) Admit(tok Token) Outcome {
	g.mu.Lock()
	defer g.mu.Unlock()
	o := g.decide(tok)
	if o == Admitted {
		g.hwm = tok.Counter
	}
	return o
}

func (g *Guard) decide(tok Token) Outcome {
	return g.cfg.observed(decide(g.state, g.epoch, g.hwm, tok, g.mode))
}

// Do runs fn iff tok is admitted, holding the Guard for the whole call, and
// advances the watermark only when fn returns nil: a failed or panicking fn
// leaves the Guard as it was. A rejected token returns a *RejectError
// (errors.Is with ErrStaleToken, ErrEpochRetired, ...) without calling fn.
// fn must not call back into the same Guard.
func (g *Guard) Do(tok Token, fn func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	o := g.decide(tok)
	if !o.OK() {
		return &RejectError{Token: tok, Outcome: o, State: g.state, Watermark: Token{Epoch: g.epoch, Counter: g.hwm}}
	}
	if err := fn(); err != nil {
		return err
	}
	g.hwm = tok.Counter
	return nil
}

// Watermark returns the registered epoch and the high watermark counter.
func (g *Guard) Watermark() Token {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Token{Epoch: g.epoch, Counter: g.hwm}
}

// State returns Active or Retired.
func (g *Guard) State() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// Retire retires the registration at epoch: every token is rejected from
// now on. Retiring an already retired epoch is a no-op; any other epoch is
// ErrRegistrationConflict.
func (g *Guard) Retire(epoch uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if epoch != g.epoch {
		return fmt.Errorf("%w: retire epoch %d, registered %d", ErrRegistrationConflict, epoch, g.epoch)
	}
	g.state = Retired
	return nil
}

// Activate installs a new registration at epoch, which must be strictly
// larger than the current one (ErrRegistrationConflict otherwise), with
// the given high watermark, and makes the Guard active. Tokens of every
// older epoch are rejected from then on (EpochRetired).
func (g *Guard) Activate(epoch uint64, highWatermark int64) error {
	if err := checkRegistration(epoch, highWatermark, Repeatable); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if epoch <= g.epoch {
		return fmt.Errorf("%w: new epoch %d is not above %d", ErrRegistrationConflict, epoch, g.epoch)
	}
	g.state, g.epoch, g.hwm = Active, epoch, highWatermark
	return nil
}
