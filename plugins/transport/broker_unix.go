//go:build unix

package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// broker is the host side of one plugin process's broker socket. serve
// reads requests until the plugin's end is closed (the process exited)
// or close is called; each accepted request dials on its own goroutine,
// at most maxDialsInFlight at once.
type broker struct {
	log  *slog.Logger
	conn *net.UnixConn
	// lookup resolves a declared name (at freeze and for each dial); dial
	// connects to one "ip:port" it allowed.
	lookup lookupFunc
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	// onRefuse is told each refusal's reason (a BrokerObserver); nil
	// tells nobody.
	onRefuse func(reason string)

	targetsMu sync.Mutex
	targets   map[string]frozenTarget // nil until frozen
	wmu       sync.Mutex              // one reply written at a time (its deadline)
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
	fds, err := seqpacketPair()
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
	b := &broker{log: log, conn: c.(*net.UnixConn), dial: (&net.Dialer{}).DialContext, lookup: lookupHost,
		sem: make(chan struct{}, maxDialsInFlight), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	return b, os.NewFile(uintptr(fds[1]), "broker-plugin"), nil
}

// A nil *broker (no socket pair on a system that does not require one,
// brokerRequired) does nothing.

// freeze records the targets the plugin declared at configure, each
// name resolved once (concurrently, within ctx and freezeLookupTimeout)
// to the classes of addresses it may reach (see frozenTarget). Only the
// first call counts: no target can be added later.
func (b *broker) freeze(ctx context.Context, targets []string) {
	if b == nil || b.frozen() {
		return
	}
	frozen := make([]frozenTarget, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { frozen[i] = freezeTarget(ctx, b.lookup, t) })
	}
	wg.Wait()
	b.targetsMu.Lock()
	defer b.targetsMu.Unlock()
	if b.targets != nil {
		return // frozen meanwhile
	}
	b.targets = make(map[string]frozenTarget, len(targets))
	for i, t := range targets {
		b.targets[t] = frozen[i]
		if !frozen[i].resolved {
			// The operator's own configuration (a setting names the host),
			// so the target is logged.
			b.log.Warn("transport broker could not resolve a target to a usable address at start: it may reach public addresses only until the plugin restarts",
				slog.String("target", t))
		}
	}
}

// frozen reports whether the targets are recorded already: a later
// freeze resolves nothing.
func (b *broker) frozen() bool {
	b.targetsMu.Lock()
	defer b.targetsMu.Unlock()
	return b.targets != nil
}

func (b *broker) declared(addr string) (frozenTarget, bool) {
	b.targetsMu.Lock()
	defer b.targetsMu.Unlock()
	ft, ok := b.targets[addr]
	return ft, ok
}

// lookupHost is the host resolver's lookup.
func lookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// start runs serve on its own goroutine.
func (b *broker) start() {
	if b == nil {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(b.done)
		b.serve()
	}()
}

// close ends serve and every dial in flight and waits for them.
func (b *broker) close() {
	if b == nil {
		return
	}
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
		if err != nil {
			b.refuse(req.id, dialInvalid, "malformed")
			continue
		}
		ft, ok := b.declared(req.addr)
		if !ok {
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
			b.dialFor(req, ft)
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

// dialFor resolves req's target here, on the host, and dials the first
// address of a class the target may reach (ft) that connects, within the
// request's timeout; it replies with the socket or the failure. A name
// that resolves only to addresses of other classes is refused
// (address-class): DNS rebinding.
func (b *broker) dialFor(req dialRequest, ft frozenTarget) {
	ctx, cancel := context.WithTimeout(b.ctx, req.timeout)
	defer cancel()
	c, status := b.dialTarget(ctx, ft)
	if b.ctx.Err() != nil {
		// The broker is closing: its plugin is gone or going, and hears
		// that from the socket's end.
		if c != nil {
			_ = c.Close()
		}
		return
	}
	switch {
	case status == dialAddress:
		b.refuse(req.id, dialAddress, "address-class")
		return
	case status != dialOK:
		b.reply(req.id, status, nil)
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

// dialTarget connects to ft: its literal address, or the allowed
// addresses its name resolves to now, one after another (as net.Dialer
// does without a fallback), each given an equal share of what is left of
// ctx's deadline, at least minDialShare. The status is dialOK with the
// connection, or the first failure's.
func (b *broker) dialTarget(ctx context.Context, ft frozenTarget) (net.Conn, dialStatus) {
	addrs := []netip.Addr{ft.literal}
	if ft.host != "" {
		var err error
		if addrs, err = b.lookup(ctx, ft.host); err != nil {
			return nil, dialDNS // any resolution failure, a timeout included
		}
	}
	addrs = ft.allowed(addrs)
	if len(addrs) == 0 {
		return nil, dialAddress
	}
	var first error
	for i, a := range addrs {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); ok {
			share := max(time.Until(d)/time.Duration(len(addrs)-i), minDialShare)
			actx, cancel = context.WithTimeout(ctx, share)
		}
		c, err := b.dial(actx, "tcp", netip.AddrPortFrom(a, ft.port).String())
		cancel()
		if err == nil {
			return c, dialOK
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, dialErrStatus(ctx, first)
}

// minDialShare is the least time one address of several gets (net's
// own minimum for a serial dial).
const minDialShare = 2 * time.Second

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
