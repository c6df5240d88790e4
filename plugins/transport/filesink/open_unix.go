//go:build unix

package filesink

import "syscall"

// probeFlags make exists' open neither follow a symlink nor wait for a
// FIFO's writer.
const probeFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
