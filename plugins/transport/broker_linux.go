package transport

import "golang.org/x/sys/unix"

// brokerRequired: a host that cannot make the broker's socket pair does
// not launch the plugin, and a plugin without one fails its dials.
const brokerRequired = true

// seqpacketPair makes a close-on-exec unix SOCK_SEQPACKET socket pair.
func seqpacketPair() ([2]int, error) {
	return unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
}

// isUnixSocket: fd is a unix socket (not, say, an inet one of type
// SOCK_SEQPACKET, such as SCTP's).
func isUnixSocket(fd int) bool {
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	return err == nil && dom == unix.AF_UNIX
}
