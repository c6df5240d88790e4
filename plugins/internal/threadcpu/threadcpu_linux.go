//go:build linux

package threadcpu

import (
	"time"

	"golang.org/x/sys/unix"
)

// now is the calling thread's CPU time (user and system).
func now() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
