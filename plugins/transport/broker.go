package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The connect broker. A network transport's plugin never makes an
// internet socket of its own: its sandbox refuses socket(2) for AF_INET
// and AF_INET6 (and connect(2) altogether). It asks the host instead, over
// a unix SOCK_SEQPACKET socket pair the host creates for each plugin
// process and passes as the child's descriptor 3 (brokerFD), to dial one
// of the "host:port" targets its Sandbox declared (Sandbox.Dial). The
// host records those targets from the Configure reply, once per process,
// resolves and dials only them, and hands back the connected socket with
// SCM_RIGHTS. docs/transports.md, "The connect broker", is the spec.
//
// Request (plugin → host), one datagram of exactly 10+n bytes:
//
//	[0]     dialOp (1)
//	[1:5]   request id, big-endian, non-zero
//	[5:9]   timeout in milliseconds, big-endian, 1..maxDialTimeout
//	[9]     n, the address's length, 1..MaxDialTargetBytes
//	[10:]   the address, "host:port", exactly as declared
//
// Reply (host → plugin), one datagram of 6 bytes, carrying the connected
// socket as SCM_RIGHTS when the status is dialOK:
//
//	[0]     dialOp (1)
//	[1:5]   the request's id (0 when the request was too short to carry one)
//	[5]     a dialStatus
const (
	dialOp          = 1
	dialHeaderBytes = 10
	dialReplyBytes  = 6
	// MaxDialTargets bounds how many targets a Sandbox declares.
	MaxDialTargets = 8
	// MaxDialTargetBytes bounds one "host:port" target.
	MaxDialTargetBytes = 255
	maxDialRequest     = dialHeaderBytes + MaxDialTargetBytes
	// maxDialTimeout bounds one dial, whatever the plugin asks.
	maxDialTimeout = 30 * time.Second
	// maxDialsInFlight bounds the dials one plugin process has running
	// on the host at once; more are answered dialBusy at once.
	maxDialsInFlight = 8
	// brokerWriteTimeout bounds writing one reply: a plugin that does
	// not read its socket loses the reply (and the socket), never holds
	// a host goroutine.
	brokerWriteTimeout = time.Second
	// brokerFD is the broker socket's descriptor in the plugin process:
	// exec.Cmd.ExtraFiles[0]. A fixed number, so the plugin's
	// environment stays go-plugin's handshake variables only.
	brokerFD = 3
)

// dialStatus is the outcome of one dial request.
type dialStatus uint8

const (
	dialOK          dialStatus = iota // connected: the socket comes with the reply
	dialNotDeclared                   // not one of the targets frozen at configure
	dialInvalid                       // a malformed request
	dialBusy                          // maxDialsInFlight dials are running
	dialDNS                           // the host could not resolve the name
	dialRefused                       // the server refused the connection
	dialTimeout                       // the deadline passed before a connection
	dialFailed                        // any other failure to connect
	dialStatusCount
)

// String is a bounded code for logs.
func (s dialStatus) String() string {
	switch s {
	case dialOK:
		return "ok"
	case dialNotDeclared:
		return "not-declared"
	case dialInvalid:
		return "invalid"
	case dialBusy:
		return "busy"
	case dialDNS:
		return "dns-failed"
	case dialRefused:
		return "connect-refused"
	case dialTimeout:
		return "connect-timeout"
	case dialFailed:
		return "connect-failed"
	}
	return "status-" + strconv.Itoa(int(s))
}

// dialRequest is one decoded request.
type dialRequest struct {
	id      uint32
	timeout time.Duration
	addr    string
}

// errDialRequest wraps a request the host refuses to read.
var errDialRequest = errors.New("transport: broker: invalid dial request")

// decodeDialRequest decodes one request datagram strictly: the exact
// length, a known op, a non-zero id, a timeout within bounds and a
// well-formed target. It returns the id it could read (0 when none) with
// an error, so the refusal can still be addressed.
func decodeDialRequest(b []byte) (dialRequest, error) {
	bad := func(id uint32, why string) (dialRequest, error) {
		return dialRequest{id: id}, fmt.Errorf("%w: %s", errDialRequest, why)
	}
	if len(b) < 5 {
		return bad(0, "short")
	}
	id := binary.BigEndian.Uint32(b[1:5])
	switch {
	case b[0] != dialOp:
		return bad(id, "unknown op")
	case id == 0:
		return bad(0, "zero id")
	case len(b) < dialHeaderBytes:
		return bad(id, "short")
	}
	ms := binary.BigEndian.Uint32(b[5:9])
	n := int(b[9])
	switch {
	case ms == 0 || time.Duration(ms)*time.Millisecond > maxDialTimeout:
		return bad(id, "timeout out of range")
	case n == 0 || len(b) != dialHeaderBytes+n:
		return bad(id, "address length")
	}
	addr := string(b[dialHeaderBytes:])
	if !ValidDialTarget(addr) {
		return bad(id, "address")
	}
	return dialRequest{id: id, timeout: time.Duration(ms) * time.Millisecond, addr: addr}, nil
}

// encodeDialRequest is the plugin side's request; addr is checked by the
// caller.
func encodeDialRequest(r dialRequest) []byte {
	b := make([]byte, dialHeaderBytes+len(r.addr))
	b[0] = dialOp
	binary.BigEndian.PutUint32(b[1:5], r.id)
	binary.BigEndian.PutUint32(b[5:9], uint32(r.timeout/time.Millisecond))
	b[9] = byte(len(r.addr))
	copy(b[dialHeaderBytes:], r.addr)
	return b
}

func encodeDialReply(id uint32, s dialStatus) []byte {
	b := make([]byte, dialReplyBytes)
	b[0] = dialOp
	binary.BigEndian.PutUint32(b[1:5], id)
	b[5] = byte(s)
	return b
}

// decodeDialReply is the plugin side's decoder of a reply.
func decodeDialReply(b []byte) (uint32, dialStatus, error) {
	if len(b) != dialReplyBytes || b[0] != dialOp || b[5] >= byte(dialStatusCount) {
		return 0, 0, errors.New("transport: broker: invalid reply")
	}
	return binary.BigEndian.Uint32(b[1:5]), dialStatus(b[5]), nil
}

// ValidDialTarget reports whether s can be a Sandbox.Dial target: at
// most MaxDialTargetBytes of "host:port", the host a DNS name
// ([A-Za-z0-9_.-], labels of 1..63 bytes not starting or ending with '-')
// or an IP address (IPv6 in brackets), the port 1..65535 in decimal
// without leading zeros.
func ValidDialTarget(s string) bool {
	if len(s) == 0 || len(s) > MaxDialTargetBytes {
		return false
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || net.JoinHostPort(host, port) != s {
		return false
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || strconv.FormatUint(n, 10) != port {
		return false
	}
	if strings.Contains(host, ":") {
		ip := net.ParseIP(host)
		return ip != nil && ip.To4() == nil && !strings.Contains(host, "%")
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// broker is the host side of one plugin process's broker socket. serve
// reads requests until the plugin's end is closed (the process exited)
// or close is called; each accepted request dials on its own goroutine,
// at most maxDialsInFlight at once.
type broker struct {
	log  *slog.Logger
	conn *net.UnixConn
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// onRefuse is told each refusal's reason (a BrokerObserver); nil
	// tells nobody.
	onRefuse func(reason string)

	targetsMu sync.Mutex
	targets   map[string]bool // nil until frozen
	wmu       sync.Mutex      // one reply written at a time (its deadline)
	sem       chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	nRefused  atomic.Int64
	done      chan struct{}
}

// newBroker makes a socket pair: the host's end, served by the returned
// broker once serve runs, and the plugin's end, to pass as
// exec.Cmd.ExtraFiles[0] and close once the process started.
func newBroker(log *slog.Logger) (*broker, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: broker socket pair: %w", err)
	}
	host := os.NewFile(uintptr(fds[0]), "broker-host")
	c, err := net.FileConn(host)
	_ = host.Close()
	if err != nil {
		_ = unix.Close(fds[1])
		return nil, nil, fmt.Errorf("transport: broker socket: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &broker{log: log, conn: c.(*net.UnixConn), dial: (&net.Dialer{}).DialContext,
		sem: make(chan struct{}, maxDialsInFlight), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	return b, os.NewFile(uintptr(fds[1]), "broker-plugin"), nil
}

// freeze records the targets the plugin declared at configure. Only the
// first call counts: no target can be added later.
func (b *broker) freeze(targets []string) {
	b.targetsMu.Lock()
	defer b.targetsMu.Unlock()
	if b.targets != nil {
		return
	}
	b.targets = make(map[string]bool, len(targets))
	for _, t := range targets {
		b.targets[t] = true
	}
}

func (b *broker) declared(addr string) bool {
	b.targetsMu.Lock()
	defer b.targetsMu.Unlock()
	return b.targets[addr]
}

// start runs serve on its own goroutine.
func (b *broker) start() {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(b.done)
		b.serve()
	}()
}

// close ends serve and every dial in flight and waits for them.
func (b *broker) close() {
	_ = b.conn.Close()
	b.cancel()
	b.wg.Wait()
}

// serve reads requests until the plugin's end is gone.
func (b *broker) serve() {
	defer b.cancel()
	buf := make([]byte, maxDialRequest+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := b.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				b.log.Warn("transport broker stopped", slog.String("error", "read failed"))
			}
			return
		}
		if oobn > 0 {
			// A plugin has no descriptor to give the host: close any it sent.
			closeFDs(rightsIn(oob[:oobn]))
			b.refuse(0, dialInvalid, "descriptors-sent")
			continue
		}
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			b.refuse(0, dialInvalid, "oversized")
			continue
		}
		req, err := decodeDialRequest(buf[:n])
		switch {
		case err != nil:
			b.refuse(req.id, dialInvalid, "malformed")
			continue
		case !b.declared(req.addr):
			b.refuse(req.id, dialNotDeclared, "not-declared")
			continue
		}
		select {
		case b.sem <- struct{}{}:
		default:
			b.refuse(req.id, dialBusy, "busy")
			continue
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() { <-b.sem }()
			b.dialFor(req)
		}()
	}
}

// refuse answers a request the broker will not dial and logs it: the
// reason and a count, never the address (a plugin's request, not the
// operator's configuration). Logged at 1, 2, 4, 8… refusals, so a
// hostile plugin cannot flood the log.
func (b *broker) refuse(id uint32, s dialStatus, reason string) {
	if b.onRefuse != nil {
		b.onRefuse(reason)
	}
	if n := b.nRefused.Add(1); n&(n-1) == 0 {
		b.log.Warn("transport broker refused a dial", slog.String("reason", reason), slog.Int64("refused", n))
	}
	b.reply(id, s, nil)
}

// dialFor dials req.addr (resolving the name here, on the host) within
// the request's timeout and replies with the socket or the failure.
func (b *broker) dialFor(req dialRequest) {
	ctx, cancel := context.WithTimeout(b.ctx, req.timeout)
	defer cancel()
	c, err := b.dial(ctx, "tcp", req.addr)
	if b.ctx.Err() != nil {
		// The broker is closing: its plugin is gone or going, and hears
		// that from the socket's end.
		if c != nil {
			_ = c.Close()
		}
		return
	}
	if err != nil {
		b.reply(req.id, dialErrStatus(ctx, err), nil)
		return
	}
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	if !ok {
		b.reply(req.id, dialFailed, nil)
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		b.reply(req.id, dialFailed, nil)
		return
	}
	_ = rc.Control(func(fd uintptr) { b.reply(req.id, dialOK, unix.UnixRights(int(fd))) })
}

// dialErrStatus classifies a failed dial. Any resolution failure, a
// resolver timeout included, is dialDNS: the plugin's own resolver gave
// the webhook dns-failed for each before the broker.
func dialErrStatus(ctx context.Context, err error) dialStatus {
	var de *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &de):
		return dialDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return dialRefused
	case ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout():
		return dialTimeout
	}
	return dialFailed
}

// reply writes one reply within brokerWriteTimeout; a failure is the
// plugin's loss (it does not read, or it is gone).
func (b *broker) reply(id uint32, s dialStatus, rights []byte) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	_ = b.conn.SetWriteDeadline(time.Now().Add(brokerWriteTimeout))
	_, _, _ = b.conn.WriteMsgUnix(encodeDialReply(id, s), rights, nil)
}
