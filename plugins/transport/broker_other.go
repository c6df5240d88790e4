//go:build unix && !linux

package transport

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// brokerRequired: no sandbox here needs the broker, and some systems
// (macOS) have no unix SOCK_SEQPACKET: a host that cannot make the pair
// launches the plugin without one, and the plugin dials for itself.
const brokerRequired = false

// seqpacketPair makes a close-on-exec unix SOCK_SEQPACKET socket pair;
// without SOCK_CLOEXEC, the fork lock keeps a concurrent exec from
// inheriting it.
func seqpacketPair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
	if err == nil {
		unix.CloseOnExec(fds[0])
		unix.CloseOnExec(fds[1])
	}
	return fds, err
}

// isUnixSocket: fd's address is a unix socket's.
func isUnixSocket(fd int) bool {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return false
	}
	_, ok := sa.(*unix.SockaddrUnix)
	return ok
}
