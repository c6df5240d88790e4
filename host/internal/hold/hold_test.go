package hold

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/caphost/caphost/internal/clocktest"
)

var errExpired = errors.New("expired")

func TestValidityAndTerminalStates(t *testing.T) {
	clk := clocktest.New()
	h := New(clk.Now, 50*time.Millisecond, errExpired, clk.Now(), time.Second, nil)
	assert.Equal(t, Active, h.State())
	assert.Equal(t, 950*time.Millisecond, h.Remaining())
	assert.True(t, h.UsableFor(900*time.Millisecond))
	assert.False(t, h.UsableFor(time.Second))

	clk.Advance(500 * time.Millisecond)
	h.Extend(clk.Now(), time.Second) // renewed from here
	assert.Equal(t, 950*time.Millisecond, h.Remaining())
	h.Extend(clk.Now().Add(-400*time.Millisecond), time.Second) // an older send: no effect
	assert.Equal(t, 950*time.Millisecond, h.Remaining())

	clk.Advance(950 * time.Millisecond)
	assert.Equal(t, Lost, h.State())
	assert.ErrorIs(t, h.Cause(), errExpired)
	<-h.Done()
	h.End(Released, nil)
	h.Extend(clk.Now(), time.Hour)
	assert.Equal(t, Lost, h.State(), "no transition out of a terminal state")
	assert.Zero(t, h.Remaining())
}

func TestNothingLeftIsLostAtOnce(t *testing.T) {
	clk := clocktest.New()
	h := New(clk.Now, 50*time.Millisecond, errExpired, clk.Now(), 50*time.Millisecond, nil)
	assert.Equal(t, Lost, h.State())
	assert.ErrorIs(t, h.Cause(), errExpired)
}

func TestEndIsOnceUnderRace(t *testing.T) {
	clk := clocktest.New()
	var ends atomic.Int32
	h := New(clk.Now, 0, errExpired, clk.Now(), time.Hour, func(State, error) { ends.Add(1) })
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
