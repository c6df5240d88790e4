package idempotency

import "github.com/caphost/caphost/internal/clocktest"

// fakeClock is the executor's monotonic clock and timers, moved by hand
// (clocktest.Clock): a timer fires when Advance reaches its instant (at
// once when that has passed), never on its own. The watchdog sets its
// timers at absolute instants, so when it gets to run does not change what
// fires.
type fakeClock struct{ *clocktest.Clock }

func newFakeClock() *fakeClock { return &fakeClock{clocktest.New()} }

// install makes e's lease validity run on c.
func (c *fakeClock) install(e *Executor) { e.now, e.after = c.Now, c.After }
