package hold

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

var errExpired = errors.New("expired")

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestValidityAndTerminalStates(t *testing.T) {
	clk := &clock{t: time.Unix(100, 0)}
	h := New(clk.now, 50*time.Millisecond, errExpired, clk.now(), time.Second, nil)
	assert.Equal(t, Active, h.State())
	assert.Equal(t, 950*time.Millisecond, h.Remaining())
	assert.True(t, h.UsableFor(900*time.Millisecond))
	assert.False(t, h.UsableFor(time.Second))

	clk.add(500 * time.Millisecond)
	h.Extend(clk.now(), time.Second) // renewed from here
	assert.Equal(t, 950*time.Millisecond, h.Remaining())
	h.Extend(clk.now().Add(-400*time.Millisecond), time.Second) // an older send: no effect
	assert.Equal(t, 950*time.Millisecond, h.Remaining())

	clk.add(950 * time.Millisecond)
	assert.Equal(t, Lost, h.State())
	assert.ErrorIs(t, h.Cause(), errExpired)
	<-h.Done()
	h.End(Released, nil)
	h.Extend(clk.now(), time.Hour)
	assert.Equal(t, Lost, h.State(), "no transition out of a terminal state")
	assert.Zero(t, h.Remaining())
}

func TestNothingLeftIsLostAtOnce(t *testing.T) {
	clk := &clock{t: time.Unix(100, 0)}
	h := New(clk.now, 50*time.Millisecond, errExpired, clk.now(), 50*time.Millisecond, nil)
	assert.Equal(t, Lost, h.State())
	assert.ErrorIs(t, h.Cause(), errExpired)
}

func TestEndIsOnceUnderRace(t *testing.T) {
	clk := &clock{t: time.Unix(100, 0)}
	var ends atomic.Int32
	h := New(clk.now, 0, errExpired, clk.now(), time.Hour, func(State, error) { ends.Add(1) })
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() { h.End(State(2+i%3), nil) })
	}
	wg.Wait()
	<-h.Done() // closed exactly once (a second close would panic)
	assert.Equal(t, int32(1), ends.Load(), "onEnd runs once")
	assert.NotEqual(t, Active, h.State())
	assert.Equal(t, "INVALID", State(0).String())
}
