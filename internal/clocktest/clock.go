// Package clocktest holds a fake monotonic clock with timers, for tests of
// code that takes its clock and timers injected (a now function and an
// after function, as time.Now and time.After): time moves only when the
// test moves it, so what a watchdog decides depends on the test alone, not
// on the machine's speed. Recv receives what such code sends back, with a
// bound in real time that only keeps a broken test from hanging. It is for
// tests only; nothing outside a _test.go file imports it.
package clocktest

import (
	"sync"
	"testing"
	"time"
)

// Start is where a new Clock's reading starts.
var Start = time.Unix(1_700_000_000, 0)

// Clock is a monotonic clock with timers, moved by hand: a timer fires
// when Advance reaches its instant (at once when that has passed), never
// on its own. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at, set time.Time // due, and the reading it was set at
	ch      chan time.Time
}

// New returns a Clock reading Start.
func New() *Clock { return &Clock{now: Start} }

// Now is the clock's reading (for time.Now).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the reading once the clock has
// moved by d, at once when d ≤ 0 (for time.After).
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), set: c.now, ch: ch})
	return ch
}

// Advance moves the clock by d and fires every timer due by then.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// Armed waits until a timer due at at has been set at the clock's present
// reading — the code under test has scheduled, since the clock last moved,
// what the test moves it to next — and fails t after 10 s of real time
// without one. A timer set at an earlier reading does not count: code that
// reads the clock and then sets a timer from that reading can be
// overtaken by an Advance in between, and this rules that out.
func (c *Clock) Armed(t testing.TB, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !c.armed(at) {
		if time.Now().After(deadline) {
			t.Fatalf("clocktest: no timer set for %s at the present reading %s", at, c.Now())
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *Clock) armed(at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if w.at.Equal(at) && w.set.Equal(c.now) {
			return true
		}
	}
	return false
}

// RecvTimeout is how long Recv waits, in real time, before it fails.
const RecvTimeout = 30 * time.Second

// Recv receives from ch and fails t when nothing comes within RecvTimeout
// of real time; the bound only keeps a broken test from hanging.
func Recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(RecvTimeout):
		t.Fatalf("clocktest: nothing received in %s", RecvTimeout)
	}
	var zero T
	return zero
}
