package runtime

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGateDrainWaitsForAdmittedCallsOnly hammers the lock-free gate: calls
// racing with drain are either admitted (and drain waits for them) or
// refused (and never counted).
func TestGateDrainWaitsForAdmittedCallsOnly(t *testing.T) {
	for round := 0; round < 50; round++ {
		g := newGate()
		var wg sync.WaitGroup
		var mu sync.Mutex
		admittedLeft := 0
		start := make(chan struct{})
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for j := 0; j < 50; j++ {
					if g.enter() {
						mu.Lock()
						admittedLeft++
						mu.Unlock()
						time.Sleep(time.Microsecond)
						mu.Lock()
						admittedLeft--
						mu.Unlock()
						g.leave()
					}
				}
			}()
		}
		close(start)
		idle := g.drain()
		assert.Equal(t, StateDraining, g.current())
		select {
		case <-idle:
			mu.Lock()
			assert.Zero(t, admittedLeft, "idle fired while an admitted call was in flight")
			mu.Unlock()
		case <-time.After(5 * time.Second):
			t.Fatal("drain never became idle")
		}
		assert.False(t, g.enter(), "no admission after drain")
		wg.Wait()
		assert.Zero(t, g.inFlight())
		g.setClosed()
		require.Equal(t, StateClosed, g.current())
	}
}
