package runtime

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// This file owns how long a pooled connection may go unchecked.
//
// go-redis checks every pooled connection it takes for a command
// (internal/pool isHealthyConn → connCheck): it clears the deadline and peeks
// one byte with a non-blocking recvfrom(MSG_PEEK), so that a connection the
// server closed while it sat idle — a restart, CLIENT KILL, the server's
// idle timeout — is replaced instead of failing the command with an
// ambiguous EOF. That is one system call per command: about 2.5–3 µs of a
// 1-goroutine rate decision's ~80 µs on the reference VM, and 10–20% of
// client CPU by the go-redis maintainers' own count (go-redis #2599).
//
// The peek cannot close the race, only narrow it: a close after the peek
// still reaches the command as EOF. What it catches is a close during the
// connection's idle time, so it pays off for a connection that sat idle and
// hardly at all for one that read a reply a moment ago. So, as HikariCP's
// alive-bypass window does for database pools, the check runs only for a
// connection idle for at least Timeouts.IdleCheck since its last read; a
// close is then missed only if it falls within that window before reuse.
// Zero keeps go-redis's check on every reuse. go-redis reaches the
// check through the connection's SyscallConn, which is where the window is
// applied: inside it, SyscallConn returns a RawConn whose Read reports the
// socket healthy without the system call. go-redis v9.23 calls SyscallConn
// from that check and nowhere else (pinned by
// TestGoRedisReachesTheSocketOnlyForTheReuseCheck: review this file when it
// fails after an upgrade). TLS connections are untouched: go-redis never
// peeks below TLS.
//
// What a closed connection inside the window costs is pinned by tests: one
// command fails Indeterminate (EOF after the write), exactly what a close
// during the command itself gives, and the connection is dropped.

// idleCheckDialer wraps dial so that every plain TCP connection it returns
// is an idleCheckedConn with window window. window must be positive.
func idleCheckDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), window time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			return newIdleCheckedConn(tc, window), nil
		}
		return c, nil
	}
}

// idleCheckedConn is a dialled TCP connection that remembers when it last
// read data, so that go-redis's reuse check can skip a connection in use a
// moment ago.
type idleCheckedConn struct {
	*net.TCPConn
	// epoch is the dial time; lastRead counts from it so that the clock
	// read per Read stays monotonic (time.Since of a time with a monotonic
	// reading).
	epoch    time.Time
	window   int64        // nanoseconds
	lastRead atomic.Int64 // nanoseconds since epoch of the last Read that returned data; 0: none yet
	skip     skipRawConn
}

func newIdleCheckedConn(c *net.TCPConn, window time.Duration) *idleCheckedConn {
	ic := &idleCheckedConn{TCPConn: c, epoch: time.Now(), window: int64(window)}
	ic.skip.conn = ic
	return ic
}

// Read records the time data arrived: a reply read in full is the freshest
// proof the server still had the connection open.
func (c *idleCheckedConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	if n > 0 {
		// +1 keeps a read in the connection's first nanosecond from
		// looking like "never read".
		c.lastRead.Store(int64(time.Since(c.epoch)) + 1)
	}
	return n, err
}

// recent reports whether the connection read data less than window ago.
func (c *idleCheckedConn) recent() bool {
	last := c.lastRead.Load()
	return last != 0 && int64(time.Since(c.epoch))+1-last < c.window
}

// SyscallConn is what go-redis's reuse check calls. Inside the window it
// returns skipRawConn (no allocation); otherwise the socket's own RawConn,
// so the check peeks as usual.
func (c *idleCheckedConn) SyscallConn() (syscall.RawConn, error) {
	if c.recent() {
		return &c.skip, nil
	}
	return c.TCPConn.SyscallConn()
}

// skipRawConn is the RawConn of a connection inside its idle-check window.
// Read does not call f: it reports the socket readable-checked with nothing
// to say, which to go-redis's peek means healthy. Control and Write are the
// socket's own.
type skipRawConn struct{ conn *idleCheckedConn }

func (s *skipRawConn) Control(f func(fd uintptr)) error {
	raw, err := s.conn.TCPConn.SyscallConn()
	if err != nil {
		return err
	}
	return raw.Control(f)
}

func (s *skipRawConn) Read(func(fd uintptr) bool) error { return nil }

func (s *skipRawConn) Write(f func(fd uintptr) bool) error {
	raw, err := s.conn.TCPConn.SyscallConn()
	if err != nil {
		return err
	}
	return raw.Write(f)
}
