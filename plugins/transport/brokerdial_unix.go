//go:build unix

package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// brokerClient is the plugin side of the broker socket: requests are
// multiplexed by id, one reader goroutine hands each reply to its
// waiting dial.
type brokerClient struct {
	conn *net.UnixConn
	sem  chan struct{}
	wmu  sync.Mutex

	mu      sync.Mutex
	next    uint32
	pending map[uint32]chan brokerReply
	err     error // set once the host end is gone
}

type brokerReply struct {
	status dialStatus
	fd     int // -1 without a descriptor
}

// pluginEnv adopts descriptor brokerFD when it is a unix SOCK_SEQPACKET
// socket (the host's broker): the Env's Dial then asks the broker. Any
// other descriptor there is left alone. Without a broker, where one is
// required (brokerRequired: Linux, whose sandbox refuses the plugin
// sockets of its own) every dial fails (ErrBrokerUnavailable); elsewhere,
// a host that could not make the socket pair passes none and the plugin
// dials directly. Called once by Serve, before anything else runs.
func pluginEnv() Env {
	none := Env{}
	if brokerRequired {
		none.Dial = unavailable
	}
	if typ, err := unix.GetsockoptInt(brokerFD, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_SEQPACKET {
		return none
	}
	if !isUnixSocket(brokerFD) {
		return none
	}
	unix.CloseOnExec(brokerFD)
	f := os.NewFile(brokerFD, "broker")
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return none
	}
	return Env{Dial: newBrokerClient(c.(*net.UnixConn)).dial}
}

func newBrokerClient(c *net.UnixConn) *brokerClient {
	b := &brokerClient{conn: c, sem: make(chan struct{}, maxDialsInFlight), pending: map[uint32]chan brokerReply{}}
	go b.read()
	return b
}

// read hands replies to their dials until the host end is gone, then
// fails every dial waiting and every later one.
func (b *brokerClient) read() {
	buf := make([]byte, dialReplyBytes+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := b.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			b.fail()
			return
		}
		fds := rightsIn(oob[:oobn])
		id, status, err := decodeDialReply(buf[:n])
		if err != nil {
			closeFDs(fds)
			continue // no id to answer: that dial ends by its deadline
		}
		r := brokerReply{status: status, fd: -1}
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || (status == dialOK) != (len(fds) == 1) {
			closeFDs(fds)
			r.status = dialFailed
		} else if len(fds) == 1 {
			r.fd = fds[0]
		}
		// Handed over under the lock (ch is buffered: never blocks), so a
		// dial that forgets its id under the lock then finds the reply
		// in ch or knows none will come.
		b.mu.Lock()
		ch := b.pending[id]
		delete(b.pending, id)
		if ch != nil {
			ch <- r
		}
		b.mu.Unlock()
		if ch == nil && r.fd >= 0 {
			// The dial gave up (its deadline): nobody takes the socket.
			_ = unix.Close(r.fd)
		}
	}
}

func (b *brokerClient) fail() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = ErrBrokerUnavailable
	for id, ch := range b.pending {
		close(ch)
		delete(b.pending, id)
	}
}

func (b *brokerClient) dial(ctx context.Context, network, address string) (net.Conn, error) {
	if network != "tcp" {
		return nil, opError(address, fmt.Errorf("transport: broker dials tcp only, not %q", network))
	}
	if !ValidDialTarget(address) {
		return nil, opError(address, ErrDialRefused)
	}
	timeout := maxDialTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout < time.Millisecond {
		return nil, opError(address, timeoutError{})
	}
	select {
	case b.sem <- struct{}{}:
		defer func() { <-b.sem }()
	case <-ctx.Done():
		return nil, opError(address, timeoutError{})
	}
	ch := make(chan brokerReply, 1)
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return nil, opError(address, b.err)
	}
	b.next++
	if b.next == 0 {
		b.next = 1
	}
	id := b.next
	b.pending[id] = ch
	b.mu.Unlock()
	forget := func() {
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
	}
	b.wmu.Lock()
	_ = b.conn.SetWriteDeadline(time.Now().Add(timeout))
	_, _, err := b.conn.WriteMsgUnix(encodeDialRequest(dialRequest{id: id, timeout: timeout, addr: address}), nil, nil)
	b.wmu.Unlock()
	if err != nil {
		forget()
		return nil, opError(address, ErrBrokerUnavailable)
	}
	var r brokerReply
	var ok bool
	select {
	case r, ok = <-ch:
	case <-ctx.Done():
		forget()
		// A reply handed over before forget is in ch; a later one is
		// closed by read.
		select {
		case r, ok = <-ch:
			if ok && r.fd >= 0 {
				_ = unix.Close(r.fd)
			}
		default:
		}
		return nil, opError(address, timeoutError{})
	}
	if !ok {
		return nil, opError(address, ErrBrokerUnavailable)
	}
	return replyConn(address, r)
}

// replyConn turns a reply into a connection or net's shape of its error.
func replyConn(address string, r brokerReply) (net.Conn, error) {
	switch r.status {
	case dialOK:
		f := os.NewFile(uintptr(r.fd), "brokered")
		c, err := net.FileConn(f)
		_ = f.Close()
		if err != nil {
			return nil, opError(address, err)
		}
		return c, nil
	case dialDNS:
		host, _, _ := net.SplitHostPort(address)
		return nil, opError(address, &net.DNSError{Err: "no such host (resolved by the host's broker)", Name: host, IsNotFound: true})
	case dialRefused:
		return nil, opError(address, syscall.ECONNREFUSED)
	case dialTimeout:
		return nil, opError(address, timeoutError{})
	case dialBusy:
		return nil, opError(address, ErrBrokerBusy)
	case dialNotDeclared, dialInvalid, dialAddress:
		return nil, opError(address, ErrDialRefused)
	}
	return nil, opError(address, errors.New("transport: broker: connect failed"))
}

// rightsIn returns the descriptors SCM_RIGHTS messages in oob carry.
func rightsIn(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
