//go:build linux && (amd64 || arm64)

package transport

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestSocketFilter runs socketFilter in x/net/bpf's interpreter over
// seccomp_data records: the families and protocols a transport uses pass,
// every other socket, io_uring and foreign ABIs do not.
// (TestSandboxClosesSocketGaps shows the installed filter at work.)
func TestSocketFilter(t *testing.T) {
	const native, i386 = 0xc0ffee01, unix.AUDIT_ARCH_I386
	var prog []bpf.Instruction
	for _, ins := range socketFilter(native) {
		prog = append(prog, bpf.RawInstruction{Op: ins.Code, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}.Disassemble())
	}
	vm, err := bpf.NewVM(prog)
	require.NoError(t, err)
	allow := int(unix.SECCOMP_RET_ALLOW)
	eacces := int(unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES))
	enosys := int(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	for _, c := range []struct {
		name             string
		arch, nr         uint32
		domain, protocol uint32
		want             int
	}{
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
		{"x32", native, x32SyscallBit | unix.SYS_SOCKET, unix.AF_INET, 0, enosys},
		{"i386", i386, 1, 0, 0, enosys},
	} {
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
