package plugins

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

// TestWatchdogStopsLoops: the engine-wide watchdog (not a per-call context)
// stops an infinite loop at the module's deadline or the caller's, also
// after it parked for lack of work, and the module keeps serving.
func TestWatchdogStopsLoops(t *testing.T) {
	e := newEngine(t, Config{})
	loop := load(t, e, "loop", Limits{CallTimeout: 30 * time.Millisecond, PoolSize: 1})
	req := &abi.CodecEncodeRequest{Schema: "x", Value: []byte("a")}
	within := func(d time.Duration, ctx context.Context) {
		t.Helper()
		start := time.Now()
		_, err := loop.CodecEncode(ctx, req)
		requireClass(t, err, ClassDeadline)
		// Generous: the machine is shared; a missed deadline would hang.
		assert.Less(t, time.Since(start), d+2*time.Second)
	}
	within(30*time.Millisecond, context.Background())

	// The caller's deadline, shorter than the module's, is enforced too.
	long := load(t, e, "loop", Limits{CallTimeout: 10 * time.Second, PoolSize: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := long.CodecEncode(ctx, req)
	requireClass(t, err, ClassDeadline)
	assert.Less(t, time.Since(start), 5*time.Second)

	// Idle long enough to park, then a loop must still be stopped.
	require.Eventually(t, e.wd.parked.Load, 5*time.Second, 10*time.Millisecond, "watchdog never parked")
	within(30*time.Millisecond, context.Background())
	assert.Zero(t, e.wd.inflight.Load())
}

// TestWatchdogTick: the tick follows the shortest call timeout loaded, a
// tenth of it within its bounds, and is never raised again.
func TestWatchdogTick(t *testing.T) {
	assert.Equal(t, time.Millisecond, tickFor(5*time.Millisecond))
	assert.Equal(t, 5*time.Millisecond, tickFor(50*time.Millisecond))
	assert.Equal(t, maxWatchTick, tickFor(10*time.Second))

	e := newEngine(t, Config{})
	assert.Equal(t, int64(maxWatchTick), e.wd.tick.Load())
	load(t, e, "echo", Limits{CallTimeout: 40 * time.Millisecond})
	assert.Equal(t, int64(4*time.Millisecond), e.wd.tick.Load())
	load(t, e, "echo", Limits{CallTimeout: time.Second})
	assert.Equal(t, int64(4*time.Millisecond), e.wd.tick.Load(), "a later, longer timeout does not coarsen the tick")
}
