//go:build transporttest

// Command testplugin is the plugins/transport tests' plugin (built with
// -tags transporttest). Its setting "mode" chooses what it does:
//
//   - garbage: the reply is not JSON;
//   - bad-code: an ACCEPTED reply whose code breaks the charset;
//   - crash: the process exits in the middle of the call;
//   - wedge: the call never returns, whatever its deadline, while the
//     process and its health service stay up;
//   - probe: a well-behaved transport served as transport.Serve serves
//     one, confined to its declared Sandbox (see probe).
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/caphost/caphost/plugins/transport"
)

func main() {
	transport.ServeTestPlugin(build, func(_ context.Context, settings map[string]string, _ []byte) []byte {
		switch settings["mode"] {
		case "garbage":
			return []byte("not json")
		case "bad-code":
			return []byte(`{"outcome":"ACCEPTED","code":"Has Spaces"}`)
		case "crash":
			os.Exit(3)
		case "wedge":
			select {}
		}
		return []byte(`{"outcome":"ACCEPTED","code":"ok"}`)
	})
}

// build makes the probe for mode "probe", nothing for the raw modes.
func build(settings map[string]string, env transport.Env) (transport.Transport, error) {
	if settings["mode"] != "probe" {
		return nil, nil
	}
	sb := transport.Sandbox{Network: settings["network"] == "true"}
	if d := settings["allow-dir"]; d != "" {
		sb.ReadDirs = []string{d}
	}
	if d := settings["write-dir"]; d != "" {
		sb.WriteDirs = []string{d}
	}
	if p := settings["allow-port"]; p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, &transport.SettingError{Key: "allow-port", Code: "invalid"}
		}
		sb.ConnectTCP = []uint16{uint16(n)}
	}
	for _, k := range []string{"dial", "dial.2"} {
		if d := settings[k]; d != "" {
			sb.Dial = append(sb.Dial, d)
		}
	}
	if settings["dial-unlisted"] == "true" {
		sb.Dial = append(sb.Dial, "redis.internal:6379") // a host no setting names
	}
	return &probe{sb: sb, env: env, threads: startThreads(8)}, nil
}

// thread is an OS thread started before the sandbox was applied, kept
// for the threads probe: it reads each path it is sent.
type thread struct {
	tid  int
	read chan string
	err  chan error
}

// startThreads starts n goroutines each locked to an OS thread of its
// own, before confinement, and returns them once all are running.
func startThreads(n int) []*thread {
	ts := make([]*thread, n)
	var up sync.WaitGroup
	for i := range ts {
		t := &thread{read: make(chan string), err: make(chan error)}
		ts[i] = t
		up.Add(1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread is this goroutine's alone
			t.tid = unix.Gettid()
			up.Done()
			for path := range t.read {
				_, err := os.ReadFile(path)
				t.err <- err
			}
		}()
	}
	up.Wait()
	return ts
}

// onThreads reads path on every one of ts, all at once, and returns the
// error they all got, or errThreadsDiffer.
func onThreads(ts []*thread, path string) error {
	tids := map[int]bool{}
	for _, t := range ts {
		tids[t.tid] = true
		t.read <- path
	}
	var errs []error
	for _, t := range ts {
		errs = append(errs, <-t.err)
	}
	if len(tids) != len(ts) {
		return errThreadsDiffer
	}
	for _, err := range errs[1:] {
		if result(err) != result(errs[0]) {
			return errThreadsDiffer
		}
	}
	return errs[0]
}

// errThreadsDiffer: the threads probe's threads were not distinct, or
// did not all get the same answer.
var errThreadsDiffer = errors.New("threads differ")

// probe declares a Sandbox of one readable directory ("allow-dir"), one
// writable directory ("write-dir"), one
// TCP port ("allow-port"), broker targets ("dial" and "dial.2", each one
// host:port; "dial-unlisted" = "true" adds one no setting names) and, with
// "network" = "true", the network base set. Each Deliver runs one probe per message part, in order, named by
// the part's name up to a "." (parts are named "read.1", "connect.2"…:
// names are unique) with the part's body as its argument, and answers
// ACCEPTED with the results joined by "." as its code, for example
// "read-denied.connect-ok":
//
//   - read <path>: read the file: read-ok, read-denied (EACCES, EPERM,
//     EROFS), read-missing (ENOENT) or read-failed;
//   - threads <path>: read the file at once on each of eight OS threads
//     started before the sandbox was applied: threads-ok, -denied,
//     -missing… when all got the same answer, threads-failed when not;
//   - write <path>: create the file: write-ok, write-denied, write-missing,
//     write-failed;
//   - connect <host:port>: a TCP connection: connect-ok, connect-denied,
//     connect-refused, connect-failed;
//   - broker <host:port>: a TCP connection through the host's connect
//     broker (its Env's DialContext), reading until the server closes it:
//     broker-ok, broker-denied (the broker refused the target),
//     broker-refused, broker-dns, broker-failed;
//   - mptcp <ipv4:port>: the same with a raw Multipath TCP socket, as
//     code getting around the sandbox would: mptcp-…;
//   - unix <path>: connect to a unix socket: unix-…;
//   - udp <host:port>: send a datagram: udp-…;
//   - uring: set up an io_uring: uring-ok, uring-nosys, …;
//   - chmod, touch, xattr <path>: change the file's mode, its times, or
//     set an extended attribute (user.probe): chmod-ok, chmod-denied, …;
//   - stat, readlink, access, opath, getxattr, chdir <path>: read the
//     path's metadata without opening it: stat(2), readlink(2), access(2),
//     an O_PATH open and fstat(2) of it, getxattr(2) (an absent attribute
//     counts as ok: the path was reached), chdir(2): stat-ok,
//     stat-denied, …;
//   - bind <host:port>: listen on a classic TCP socket: bind-ok, …;
//   - roots: load the system CA pool: roots-ok, roots-empty,
//     roots-denied, roots-failed.
type probe struct {
	sb      transport.Sandbox
	env     transport.Env
	threads []*thread
}

func (p *probe) Name() string               { return "probe" }
func (p *probe) Close() error               { return nil }
func (p *probe) Sandbox() transport.Sandbox { return p.sb }

func (p *probe) Deliver(ctx context.Context, m transport.Message) transport.Receipt {
	var codes []string
	for _, part := range m.Parts {
		kind, _, _ := strings.Cut(part.Name, ".")
		arg := string(part.Body)
		var err error
		switch kind {
		case "read":
			_, err = os.ReadFile(arg)
		case "threads":
			err = onThreads(p.threads, arg)
		case "write":
			err = os.WriteFile(arg, []byte("x"), 0o600)
		case "unix":
			var c net.Conn
			if c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "unix", arg); err == nil {
				_ = c.Close()
			}
		case "mptcp":
			err = mptcpConnect(arg)
		case "udp":
			var c net.Conn
			if c, err = net.Dial("udp", arg); err == nil {
				_, err = c.Write([]byte("probe"))
				_ = c.Close()
			}
		case "uring":
			err = uringSetup()
		case "chmod":
			err = os.Chmod(arg, 0o777)
		case "touch":
			err = os.Chtimes(arg, time.Unix(0, 0), time.Unix(0, 0))
		case "xattr":
			err = syscall.Setxattr(arg, "user.probe", []byte("x"), 0)
		case "stat":
			_, err = os.Stat(arg)
		case "readlink":
			if _, err = os.Readlink(arg); errors.Is(err, syscall.EINVAL) {
				err = nil // reached: not a link
			}
		case "access":
			err = syscall.Access(arg, 0)
		case "opath":
			err = opathStat(arg)
		case "getxattr":
			if _, err = syscall.Getxattr(arg, "user.probe", make([]byte, 64)); errors.Is(err, syscall.ENODATA) || errors.Is(err, syscall.ENOTSUP) {
				err = nil // reached: no such attribute
			}
		case "chdir":
			err = syscall.Chdir(arg)
		case "broker":
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var c net.Conn
			if c, err = p.env.DialContext(dctx, "tcp", arg); err == nil {
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = c.Read(make([]byte, 1)) // the test's listener closes at once
				if errors.Is(err, io.EOF) {
					err = nil
				}
				_ = c.Close()
			}
			cancel()
		case "connect":
			d := &net.Dialer{Timeout: 5 * time.Second}
			var c net.Conn
			if c, err = d.DialContext(ctx, "tcp", arg); err == nil {
				_ = c.Close()
			}
		case "bind":
			var lc net.ListenConfig
			lc.SetMultipathTCP(false)
			var l net.Listener
			if l, err = lc.Listen(ctx, "tcp", arg); err == nil {
				_ = l.Close()
			}
		case "roots":
			var pool *x509.CertPool
			if pool, err = x509.SystemCertPool(); err == nil && pool.Equal(x509.NewCertPool()) {
				codes = append(codes, "roots-empty")
				continue
			}
		default:
			return transport.Receipt{Outcome: transport.RejectedDefinite, Code: "unknown-probe"}
		}
		codes = append(codes, kind+"-"+result(err))
	}
	return transport.Receipt{Outcome: transport.Accepted, Code: strings.Join(codes, ".")}
}

func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS):
		return "denied"
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	case errors.As(err, new(*net.DNSError)):
		return "dns"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ENOSYS):
		return "nosys"
	}
	return "failed"
}

// mptcpConnect connects a Multipath TCP socket to the IPv4 address addr
// with raw system calls, without Go's fallback to classic TCP.
func mptcpConnect(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 262) // IPPROTO_MPTCP
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Connect(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()})
}

// opathStat opens path with O_PATH, which reads nothing, and fstats the
// descriptor.
func opathStat(path string) error {
	fd, err := syscall.Open(path, unix.O_PATH|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st)
}

// uringSetup sets up (and closes) a one-entry io_uring: io_uring_setup
// (425 on amd64 and arm64) with a zeroed struct io_uring_params.
func uringSetup() error {
	var params [120]byte
	fd, _, errno := syscall.Syscall(425, 1, uintptr(unsafe.Pointer(&params)), 0)
	if errno != 0 {
		return errno
	}
	return syscall.Close(int(fd))
}
