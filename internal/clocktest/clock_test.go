package clocktest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/caphost/caphost/internal/clocktest"
)

func TestTimersFireOnlyWhenTheClockReachesThem(t *testing.T) {
	c := clocktest.New()
	assert.Equal(t, clocktest.Start, c.Now())
	now := c.After(0)
	soon, later := c.After(time.Second), c.After(time.Minute)
	assert.Equal(t, clocktest.Start, <-now, "a timer already due fires at once")
	c.Armed(t, clocktest.Start.Add(time.Second))

	c.Advance(time.Second - time.Nanosecond)
	assertPending(t, soon)
	c.Advance(time.Nanosecond)
	assert.Equal(t, clocktest.Start.Add(time.Second), <-soon)
	assertPending(t, later)
	c.Advance(time.Hour)
	assert.Equal(t, clocktest.Start.Add(time.Hour+time.Second), <-later, "a timer passed by fires at the new reading")
}

func assertPending(t *testing.T, ch <-chan time.Time) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("fired early, at %s", v)
	default:
	}
}

func TestRecvReturnsWhatWasSent(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	assert.Equal(t, 7, clocktest.Recv(t, ch))
}
