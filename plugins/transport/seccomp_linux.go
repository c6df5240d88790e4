//go:build linux && (amd64 || arm64)

package transport

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offsets into struct seccomp_data (<linux/seccomp.h>), and the bit
// that marks an x32 system call number (<asm/unistd.h>).
const (
	seccompDataNR   = 0  // offsetof(struct seccomp_data, nr)
	seccompDataArch = 4  // offsetof(struct seccomp_data, arch)
	seccompDataArg0 = 16 // offsetof(struct seccomp_data, args[0]), low 32 bits on little-endian
	seccompDataArg2 = 32 // args[2]: socket(2)'s protocol, an int
	x32SyscallBit   = 0x40000000
)

// socketFilter is the classic BPF program restrictSockets installs for
// the native audit architecture arch.
func socketFilter(arch uint32) []unix.SockFilter {
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eacces := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EACCES)
	enosys := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)
	// Jump offsets count instructions after the jump; the three returns
	// end the program: ALLOW, EACCES, ENOSYS.
	p := []unix.SockFilter{
		/*  0 */ {Code: ld, K: seccompDataArch},
		/*  1 */ {Code: jeq, K: arch, Jt: 0, Jf: 18 - 2}, // foreign ABI
		/*  2 */ {Code: ld, K: seccompDataNR},
		/*  3 */ {Code: jge, K: x32SyscallBit, Jt: 18 - 4, Jf: 0},
		/*  4 */ {Code: jeq, K: unix.SYS_IO_URING_SETUP, Jt: 18 - 5, Jf: 0},
		/*  5 */ {Code: jeq, K: unix.SYS_IO_URING_ENTER, Jt: 18 - 6, Jf: 0},
		/*  6 */ {Code: jeq, K: unix.SYS_IO_URING_REGISTER, Jt: 18 - 7, Jf: 0},
		/*  7 */ {Code: jeq, K: unix.SYS_SOCKET, Jt: 0, Jf: 16 - 8},
		/*  8 */ {Code: ld, K: seccompDataArg0},
		/*  9 */ {Code: jeq, K: unix.AF_NETLINK, Jt: 16 - 10, Jf: 0},
		/* 10 */ {Code: jeq, K: unix.AF_INET, Jt: 12 - 11, Jf: 0},
		/* 11 */ {Code: jeq, K: unix.AF_INET6, Jt: 0, Jf: 17 - 12},
		/* 12 */ {Code: ld, K: seccompDataArg2},
		/* 13 */ {Code: jeq, K: 0, Jt: 16 - 14, Jf: 0},
		/* 14 */ {Code: jeq, K: unix.IPPROTO_TCP, Jt: 16 - 15, Jf: 0},
		/* 15 */ {Code: jeq, K: unix.IPPROTO_UDP, Jt: 0, Jf: 17 - 16},
		/* 16 */ {Code: ret, K: allow},
		/* 17 */ {Code: ret, K: eacces},
		/* 18 */ {Code: ret, K: enosys},
	}
	return p
}

// nativeAudit is the audit architecture of this build.
func nativeAudit() uint32 {
	if runtime.GOARCH == "arm64" {
		return unix.AUDIT_ARCH_AARCH64
	}
	return unix.AUDIT_ARCH_X86_64
}

// Landlock restricts TCP ports only on classic TCP sockets, and (below
// ABI 9) not unix sockets at all: a Multipath TCP socket, which falls
// back to plain TCP against any server, or a unix socket reaches what
// the sandbox denies (Redis on a port or a socket). restrictSockets
// closes that with a seccomp filter:
//
//   - socket(2) is allowed for AF_INET and AF_INET6 with protocol 0,
//     IPPROTO_TCP or IPPROTO_UDP, and for AF_NETLINK (interface
//     lookups); any other family (unix, SMC, vsock…) or protocol
//     (Multipath TCP, SCTP…) fails with EACCES;
//   - io_uring_setup, io_uring_enter and io_uring_register fail with
//     ENOSYS: io_uring creates sockets without socket(2);
//   - a system call of another ABI (i386 through int 0x80, x32) fails
//     with ENOSYS: its arguments are not what the filter reads.
//
// Go's net package, asked for Multipath TCP (net.Listen's default),
// falls back to TCP when the socket is refused.
//
// The filter is socketFilter, installed on every thread of the process
// (SECCOMP_FILTER_FLAG_TSYNC; threads started later inherit it). It
// reports false, nil where the kernel has no seccomp filters.
func restrictSockets() (bool, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// seccomp needs no_new_privs on the calling thread; TSYNC sets it on
	// the others. (Landlock, when applied, has set it already.)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return false, fmt.Errorf("%w: prctl(PR_SET_NO_NEW_PRIVS): %w", errSandbox, err)
	}
	prog := socketFilter(nativeAudit())
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	switch {
	case errors.Is(errno, unix.ENOSYS) || errors.Is(errno, unix.EINVAL):
		return false, nil // no seccomp, or no filter mode
	case errno != 0:
		return false, fmt.Errorf("%w: seccomp: %w", errSandbox, errno)
	case r != 0:
		// TSYNC names the thread it could not synchronise.
		return false, fmt.Errorf("%w: seccomp: thread %d not synchronised", errSandbox, r)
	}
	return true, nil
}
