package threadcpu

import (
	"runtime"
	"testing"
	"time"
)

// TestMeterChargesWorkNotWaiting: a busy loop is charged (about) its
// length, a sleep almost nothing. Only bounds that hold on any machine
// are checked: CPU never exceeds the wall time it was measured over, and
// a sleep is charged far less than it lasts.
func TestMeterChargesWorkNotWaiting(t *testing.T) {
	if !Supported() {
		t.Fatal("this test needs Linux's per-thread CPU clock (CLOCK_THREAD_CPUTIME_ID); " + runtime.GOOS + " has none: run it on Linux")
	}
	var m Meter
	m.Start()
	wall := time.Now()
	for time.Since(wall) < 20*time.Millisecond {
	}
	busy, ok := m.Stop()
	spent := time.Since(wall)
	if !ok || busy <= 0 || busy > spent+time.Millisecond {
		t.Fatalf("busy loop of %v charged %v (ok %v)", spent, busy, ok)
	}

	m.Start()
	time.Sleep(50 * time.Millisecond)
	idle, ok := m.Stop()
	if !ok || idle >= 25*time.Millisecond {
		t.Fatalf("a 50ms sleep charged %v (ok %v)", idle, ok)
	}
}
