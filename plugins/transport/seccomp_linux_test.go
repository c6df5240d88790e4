//go:build linux && (amd64 || arm64)

package transport

import (
	"encoding/binary"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestSandboxFilter runs the installed filters (sandboxFilter over
// sandboxRules) in x/net/bpf's interpreter over seccomp_data records: the
// families and protocols a transport uses pass, every other socket,
// io_uring, foreign ABIs and every call that changes a file's metadata do
// not; every call that reads a path's metadata, an O_PATH open and
// openat2 are refused while plain opens and the fd forms pass; every
// call that changes the mount tree, the root or a namespace is refused
// with EPERM in every sandbox. Without
// internet sockets (a brokered sandbox) socket(2) and connect(2) are
// refused whatever their arguments.
// (TestSandboxClosesSocketGaps, TestSandboxRefusesMetadataChanges and
// TestSandboxHidesMetadata show the installed filter at work.)
func TestSandboxFilter(t *testing.T) {
	const native, i386 = 0xc0ffee01, unix.AUDIT_ARCH_I386
	allow := int(unix.SECCOMP_RET_ALLOW)
	eacces := int(unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES))
	eperm := int(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	enosys := int(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	type call struct {
		name       string
		arch, nr   uint32
		arg1, arg2 uint32 // args[1]; args[2] (arg0 is the socket domain)
		domain     uint32
		want       int
	}
	sockets := []call{
		{name: "tcp", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET, want: allow},
		{name: "tcp explicit", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET, arg2: unix.IPPROTO_TCP, want: allow},
		{name: "udp", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET, arg2: unix.IPPROTO_UDP, want: allow},
		{name: "tcp6", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET6, want: allow},
		{name: "udp6", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET6, arg2: unix.IPPROTO_UDP, want: allow},
		{name: "netlink", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_NETLINK, want: allow},
		{name: "mptcp", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET, arg2: 262, want: eacces},
		{name: "mptcp6", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET6, arg2: 262, want: eacces},
		{name: "sctp", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET, arg2: unix.IPPROTO_SCTP, want: eacces},
		{name: "smc over inet", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET, arg2: 256, want: eacces},
		{name: "icmp", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_INET, arg2: unix.IPPROTO_ICMP, want: eacces},
		{name: "unix", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_UNIX, want: eacces},
		{name: "smc", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_SMC, want: eacces},
		{name: "vsock", arch: native, nr: unix.SYS_SOCKET, domain: unix.AF_VSOCK, want: eacces},
		{name: "io_uring_setup", arch: native, nr: unix.SYS_IO_URING_SETUP, want: enosys},
		{name: "io_uring_enter", arch: native, nr: unix.SYS_IO_URING_ENTER, want: enosys},
		{name: "io_uring_register", arch: native, nr: unix.SYS_IO_URING_REGISTER, want: enosys},
		{name: "connect", arch: native, nr: unix.SYS_CONNECT, domain: unix.AF_UNIX, want: allow},
		{name: "read", arch: native, nr: unix.SYS_READ, want: allow},
		{name: "openat", arch: native, nr: unix.SYS_OPENAT, arg2: unix.O_RDONLY | unix.O_CLOEXEC, want: allow},
		{name: "openat for writing", arch: native, nr: unix.SYS_OPENAT, arg2: unix.O_WRONLY | unix.O_CREAT, want: allow},
		{name: "fstat", arch: native, nr: unix.SYS_FSTAT, want: allow},
		{name: "fgetxattr", arch: native, nr: unix.SYS_FGETXATTR, want: allow},
		{name: "fstatfs", arch: native, nr: unix.SYS_FSTATFS, want: allow},
		{name: "renameat", arch: native, nr: unix.SYS_RENAMEAT, want: allow},
		{name: "x32", arch: native, nr: x32SyscallBit | unix.SYS_SOCKET, domain: unix.AF_INET, want: enosys},
		{name: "i386", arch: i386, nr: 1, want: enosys},
	}
	var changes, reads []call
	for _, nr := range metadataSyscalls() {
		changes = append(changes, call{name: "metadata change " + strconv.Itoa(int(nr)), arch: native, nr: nr, want: eacces})
	}
	for _, nr := range metadataReadSyscalls() {
		reads = append(reads, call{name: "metadata read " + strconv.Itoa(int(nr)), arch: native, nr: nr})
	}
	// The mount tree, the root and the namespaces stay as confine left
	// them, in every sandbox: a plugin in its own namespaces holds every
	// capability there.
	mounts := []call{
		{name: "mount", arch: native, nr: unix.SYS_MOUNT, want: eperm},
		{name: "umount2", arch: native, nr: unix.SYS_UMOUNT2, want: eperm},
		{name: "pivot_root", arch: native, nr: unix.SYS_PIVOT_ROOT, want: eperm},
		{name: "chroot", arch: native, nr: unix.SYS_CHROOT, want: eperm},
		{name: "unshare", arch: native, nr: unix.SYS_UNSHARE, want: eperm},
		{name: "setns", arch: native, nr: unix.SYS_SETNS, want: eperm},
		{name: "open_tree", arch: native, nr: unix.SYS_OPEN_TREE, want: eperm},
		{name: "open_tree_attr", arch: native, nr: unix.SYS_OPEN_TREE_ATTR, want: eperm},
		{name: "move_mount", arch: native, nr: unix.SYS_MOVE_MOUNT, want: eperm},
		{name: "mount_setattr", arch: native, nr: unix.SYS_MOUNT_SETATTR, want: eperm},
		{name: "fsopen", arch: native, nr: unix.SYS_FSOPEN, want: eperm},
		{name: "fsmount", arch: native, nr: unix.SYS_FSMOUNT, want: eperm},
		{name: "fsconfig", arch: native, nr: unix.SYS_FSCONFIG, want: eperm},
		{name: "fspick", arch: native, nr: unix.SYS_FSPICK, want: eperm},
		{name: "open_by_handle_at", arch: native, nr: unix.SYS_OPEN_BY_HANDLE_AT, want: eperm},
		// Still allowed: what reads the mount tree, and the calls a Go
		// program makes anyway.
		{name: "listmount", arch: native, nr: unix.SYS_LISTMOUNT, want: allow},
		{name: "clone", arch: native, nr: unix.SYS_CLONE, want: allow},
		{name: "fchdir", arch: native, nr: unix.SYS_FCHDIR, want: allow},
	}
	require.Len(t, mounts, len(mountSyscalls())+3, "every refused call has its case")
	require.GreaterOrEqual(t, len(changes), 14)
	require.GreaterOrEqual(t, len(reads), 16)
	opath := []call{
		{name: "openat O_PATH", arch: native, nr: unix.SYS_OPENAT, arg2: unix.O_PATH | unix.O_CLOEXEC},
		{name: "openat O_PATH|O_NOFOLLOW", arch: native, nr: unix.SYS_OPENAT, arg2: unix.O_PATH | unix.O_NOFOLLOW},
	}
	if o := pathOpens(); len(o) > 1 { // amd64's open(2): flags in args[1]
		opath = append(opath, call{name: "open O_PATH", arch: native, nr: o[0].nr, arg1: unix.O_PATH})
		sockets = append(sockets, call{name: "open", arch: native, nr: o[0].nr, arg1: unix.O_RDONLY, arg2: unix.O_PATH, want: allow})
	}
	openat2 := call{name: "openat2", arch: native, nr: unix.SYS_OPENAT2}

	run := func(t *testing.T, r filterRules, calls []call) {
		filter, err := sandboxFilter(native, r)
		require.NoError(t, err)
		var prog []bpf.Instruction
		for _, ins := range filter {
			prog = append(prog, bpf.RawInstruction{Op: ins.Code, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}.Disassemble())
		}
		vm, err := bpf.NewVM(prog)
		require.NoError(t, err)
		for _, c := range calls {
			// The interpreter loads big-endian words; the kernel loads the
			// native-endian fields of struct seccomp_data at the same offsets.
			data := make([]byte, 64)
			binary.BigEndian.PutUint32(data[seccompDataNR:], c.nr)
			binary.BigEndian.PutUint32(data[seccompDataArch:], c.arch)
			binary.BigEndian.PutUint32(data[seccompDataArg0:], c.domain)
			binary.BigEndian.PutUint32(data[seccompDataArg1:], c.arg1)
			binary.BigEndian.PutUint32(data[seccompDataArg2:], c.arg2)
			got, err := vm.Run(data)
			require.NoError(t, err, c.name)
			assert.Equal(t, c.want, got, c.name)
		}
	}
	with := func(cs []call, want int) []call {
		out := slices.Clone(cs)
		for i := range out {
			out[i].want = want
		}
		return out
	}
	t.Run("direct", func(t *testing.T) {
		run(t, sandboxRules(false, false), slices.Concat(sockets, changes, mounts, with(reads, eacces), with(opath, eacces), with([]call{openat2}, enosys)))
	})
	t.Run("no open", func(t *testing.T) {
		// A sandbox granted no file: every open of a path is refused,
		// whatever its flags; the fd forms still pass.
		var calls []call
		for _, c := range sockets {
			if slices.Contains(openSyscalls(), c.nr) {
				c.want = eacces
			}
			calls = append(calls, c)
		}
		for _, nr := range openSyscalls() {
			calls = append(calls, call{name: "open " + strconv.Itoa(int(nr)), arch: native, nr: nr, arg1: unix.O_RDONLY, arg2: unix.O_RDONLY, want: eacces})
		}
		require.NotEmpty(t, openSyscalls())
		calls = slices.Concat(calls, changes, mounts, with(reads, eacces), with(opath, eacces), with([]call{openat2}, enosys))
		run(t, sandboxRules(false, true), calls)
	})
	t.Run("no inet", func(t *testing.T) {
		// A brokered sandbox: every socket(2), whatever its family, and
		// every connect(2) are refused; the rest is as before.
		var calls []call
		for _, c := range sockets {
			if c.nr == unix.SYS_SOCKET || c.nr == unix.SYS_CONNECT {
				c.want = eacces
			}
			calls = append(calls, c)
		}
		calls = append(calls, call{name: "socketpair", arch: native, nr: unix.SYS_SOCKETPAIR, domain: unix.AF_UNIX, want: allow},
			call{name: "sendmsg", arch: native, nr: unix.SYS_SENDMSG, want: allow},
			call{name: "recvmsg", arch: native, nr: unix.SYS_RECVMSG, want: allow})
		calls = slices.Concat(calls, changes, mounts, with(reads, eacces), with(opath, eacces), with([]call{openat2}, enosys))
		run(t, sandboxRules(true, false), calls)
	})
}

// TestAssembleRefusesBadJumps: a jump backwards, past 255 instructions
// or to no label is refused, never truncated into another program.
func TestAssembleRefusesBadJumps(t *testing.T) {
	const jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	ret := insn{label: "end", code: unix.BPF_RET | unix.BPF_K}
	_, err := assemble([]insn{{code: jeq, jt: "nowhere"}, ret})
	require.ErrorIs(t, err, errSandbox)
	_, err = assemble([]insn{ret, {code: jeq, jt: "end"}})
	require.ErrorIs(t, err, errSandbox)
	long := []insn{{code: jeq, jt: "end"}}
	for range 256 {
		long = append(long, insn{code: jeq})
	}
	_, err = assemble(append(long, ret))
	require.ErrorIs(t, err, errSandbox)
	p, err := assemble(append(long[1:], insn{code: jeq, jt: "end"}, ret))
	require.NoError(t, err)
	assert.Equal(t, uint8(0), p[256].Jt)
}
