//go:build !linux

package threadcpu

import "time"

// now has no per-thread CPU clock to read on this platform.
func now() (time.Duration, bool) { return 0, false }
