package plugins

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

func init() { testGuests = append(testGuests, "plugins/testdata/guests/clockloop") }

// TestCloseWaitsForCallsInTheGuest: Close interrupts calls running in the
// guest and returns only once they have left it. Closing the runtime under
// a running call raced inside wazero (-race: the module's resources
// released by Close against the clock host function of the call reading
// them), so the instances must be stopped through their call context and
// the calls waited for. clockloop spends its calls in clock_time_get.
func TestCloseWaitsForCallsInTheGuest(t *testing.T) {
	const calls = 2
	ctx := context.Background()
	req := &abi.CodecEncodeRequest{Schema: "x", Value: []byte("a")}
	for round := range 3 {
		e := newEngine(t, Config{})
		// A deadline no test run reaches: only Close ends these calls.
		m := load(t, e, "clockloop", Limits{CallTimeout: 10 * time.Second, PoolSize: calls})
		errs := make(chan error, calls)
		for range calls {
			go func() {
				_, err := m.CodecEncode(ctx, req)
				errs <- err
			}()
		}
		// Both calls are between the watchdog's begin and end: in the guest.
		require.Eventually(t, func() bool { return e.wd.inflight.Load() == calls }, 30*time.Second, time.Millisecond)
		require.NoError(t, m.Close(ctx))
		assert.Zero(t, m.inUse.Load(), "round %d: Close returned while calls were still in the guest", round)
		assert.Zero(t, e.wd.inflight.Load(), "round %d", round)
		for range calls {
			requireClass(t, <-errs, ClassClosed)
		}
		_, err := m.CodecEncode(ctx, req)
		requireClass(t, err, ClassClosed)
	}
}
