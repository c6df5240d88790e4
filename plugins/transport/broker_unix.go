//go:build unix

package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	b := &broker{log: log, conn: c.(*net.UnixConn), dial: (&net.Dialer{}).DialContext,
		sem: make(chan struct{}, maxDialsInFlight), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	return b, os.NewFile(uintptr(fds[1]), "broker-plugin"), nil
}

// A nil *broker (no socket pair on a system that does not require one,
// brokerRequired) does nothing.

// freeze records the targets the plugin declared at configure. Only the
// first call counts: no target can be added later.
func (b *broker) freeze(targets []string) {
	if b == nil {
		return
	}
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
