// Package threadcpu reads the CPU time of the calling OS thread, for the
// plugins' measured calls: a guest call runs on the calling goroutine, so
// with the goroutine locked to its thread (runtime.LockOSThread) the
// thread's CPU clock is what the guest spent, and a thread that waited
// (descheduled on a loaded host, or blocked in a host function) is not
// charged for the wait.
package threadcpu

import (
	"runtime"
	"time"
)

// Meter measures one stretch of work on the calling goroutine's thread.
// Start locks the goroutine to its thread; Stop unlocks it. The zero Meter
// is ready to use; a Meter is for one goroutine at a time.
type Meter struct {
	start time.Duration
	ok    bool
}

// Start locks the calling goroutine to its OS thread and reads the
// thread's CPU clock.
func (m *Meter) Start() {
	runtime.LockOSThread()
	m.start, m.ok = now()
}

// Stop reads the thread's CPU clock again and unlocks the goroutine. ok is
// false when the platform has no per-thread CPU clock (or it failed).
func (m *Meter) Stop() (cpu time.Duration, ok bool) {
	end, ok := now()
	runtime.UnlockOSThread()
	if !ok || !m.ok || end < m.start {
		return 0, false
	}
	return end - m.start, true
}

// Supported reports whether this platform has a per-thread CPU clock.
func Supported() bool {
	_, ok := now()
	return ok
}
