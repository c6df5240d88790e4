//go:build linux && (amd64 || arm64)

package transport

import (
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestSandboxFilter runs sandboxFilter in x/net/bpf's interpreter over
// seccomp_data records: the families and protocols a transport uses pass,
// every other socket, io_uring, foreign ABIs and every call that changes
// a file's metadata do not; reading metadata still works.
// (TestSandboxClosesSocketGaps and TestSandboxRefusesMetadataChanges show
// the installed filter at work.)
func TestSandboxFilter(t *testing.T) {
	const native, i386 = 0xc0ffee01, unix.AUDIT_ARCH_I386
	filter, err := sandboxFilter(native, metadataSyscalls())
	require.NoError(t, err)
	var prog []bpf.Instruction
	for _, ins := range filter {
		prog = append(prog, bpf.RawInstruction{Op: ins.Code, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}.Disassemble())
	}
	vm, err := bpf.NewVM(prog)
	require.NoError(t, err)
	allow := int(unix.SECCOMP_RET_ALLOW)
	eacces := int(unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES))
	enosys := int(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	type call struct {
		name             string
		arch, nr         uint32
		domain, protocol uint32
		want             int
	}
	var metadata []call
	for _, nr := range metadataSyscalls() {
		metadata = append(metadata, call{"metadata " + strconv.Itoa(int(nr)), native, nr, 0, 0, eacces})
	}
	require.GreaterOrEqual(t, len(metadata), 14)
	for _, c := range append(metadata, []call{
		{"tcp", native, unix.SYS_SOCKET, unix.AF_INET, 0, allow},
		{"tcp explicit", native, unix.SYS_SOCKET, unix.AF_INET, unix.IPPROTO_TCP, allow},
		{"udp", native, unix.SYS_SOCKET, unix.AF_INET, unix.IPPROTO_UDP, allow},
		{"tcp6", native, unix.SYS_SOCKET, unix.AF_INET6, 0, allow},
		{"udp6", native, unix.SYS_SOCKET, unix.AF_INET6, unix.IPPROTO_UDP, allow},
		{"netlink", native, unix.SYS_SOCKET, unix.AF_NETLINK, 0, allow},
		{"mptcp", native, unix.SYS_SOCKET, unix.AF_INET, 262, eacces},
		{"mptcp6", native, unix.SYS_SOCKET, unix.AF_INET6, 262, eacces},
		{"sctp", native, unix.SYS_SOCKET, unix.AF_INET, unix.IPPROTO_SCTP, eacces},
		{"smc over inet", native, unix.SYS_SOCKET, unix.AF_INET, 256, eacces},
		{"icmp", native, unix.SYS_SOCKET, unix.AF_INET, unix.IPPROTO_ICMP, eacces},
		{"unix", native, unix.SYS_SOCKET, unix.AF_UNIX, 0, eacces},
		{"smc", native, unix.SYS_SOCKET, unix.AF_SMC, 0, eacces},
		{"vsock", native, unix.SYS_SOCKET, unix.AF_VSOCK, 0, eacces},
		{"io_uring_setup", native, unix.SYS_IO_URING_SETUP, 0, 0, enosys},
		{"io_uring_enter", native, unix.SYS_IO_URING_ENTER, 0, 0, enosys},
		{"io_uring_register", native, unix.SYS_IO_URING_REGISTER, 0, 0, enosys},
		{"connect", native, unix.SYS_CONNECT, unix.AF_UNIX, 0, allow},
		{"read", native, unix.SYS_READ, 0, 0, allow},
		{"openat", native, unix.SYS_OPENAT, 0, 0, allow},
		{"fstat", native, unix.SYS_FSTAT, 0, 0, allow},
		{"getxattr", native, unix.SYS_GETXATTR, 0, 0, allow},
		{"renameat", native, unix.SYS_RENAMEAT, 0, 0, allow},
		{"x32", native, x32SyscallBit | unix.SYS_SOCKET, unix.AF_INET, 0, enosys},
		{"i386", i386, 1, 0, 0, enosys},
	}...) {
		// The interpreter loads big-endian words; the kernel loads the
		// native-endian fields of struct seccomp_data at the same offsets.
		data := make([]byte, 64)
		binary.BigEndian.PutUint32(data[seccompDataNR:], c.nr)
		binary.BigEndian.PutUint32(data[seccompDataArch:], c.arch)
		binary.BigEndian.PutUint32(data[seccompDataArg0:], c.domain)
		binary.BigEndian.PutUint32(data[seccompDataArg2:], c.protocol)
		got, err := vm.Run(data)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
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
