package redistest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func resp(args ...string) []byte {
	b := []byte("*" + itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestProxyModes(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := StartStandalone(t)
	p := NewProxy(t, s.Addr())
	require.NotEqual(t, s.Addr(), p.Addr())

	c := plainClient(t, p.Addr(), func(o *redis.Options) { o.ReadTimeout = 300 * time.Millisecond; o.PoolSize = 1 })

	t.Run("passthrough", func(t *testing.T) {
		require.NoError(t, c.Ping(ctx).Err())
		up, down := p.Bytes()
		assert.Positive(t, up)
		assert.Positive(t, down)
		assert.Equal(t, 1, s.ConnectedClients(t))
	})

	t.Run("stall: write reaches redis, reply is held", func(t *testing.T) {
		p.Stall()
		_, down0 := p.Bytes()
		err := c.Set(ctx, "stalled", "v", 0).Err()
		require.Error(t, err)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		assert.True(t, ne.Timeout())
		// Forwarded by the proxy's own goroutine: wait for Redis to have it.
		require.Eventually(t, func() bool { return s.Admin().Get(ctx, "stalled").Val() == "v" }, 5*time.Second, 10*time.Millisecond,
			"the write reached redis")
		_, down1 := p.Bytes()
		assert.Equal(t, down0, down1, "no reply bytes while stalled")
		p.Passthrough()
		require.NoError(t, c.Ping(ctx).Err())
	})

	t.Run("blackhole: nothing reaches redis, nothing comes back", func(t *testing.T) {
		require.NoError(t, c.Ping(ctx).Err())
		p.Blackhole()
		up0, down0 := p.Bytes()
		sets := s.CommandCalls(t, "set")
		err := c.Set(ctx, "blackholed", "v", 0).Err()
		require.Error(t, err)
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		assert.True(t, ne.Timeout())
		// A new connection is accepted and black-holed too.
		raw, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer raw.Close()
		_, err = raw.Write(resp("SET", "blackholed-raw", "v"))
		require.NoError(t, err)
		_ = raw.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err = raw.Read(make([]byte, 1))
		require.ErrorAs(t, err, &ne)
		assert.True(t, ne.Timeout())
		// The proxy counts what it forwards and forwarded nothing, so
		// nothing can arrive later either.
		up1, down1 := p.Bytes()
		assert.Equal(t, up0, up1, "no client bytes forwarded")
		assert.Equal(t, down0, down1, "no reply bytes forwarded")
		p.Passthrough()
		// The connections that lost bytes were reset: the raw one sees it,
		// the client redials.
		_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(raw)
		assert.True(t, err == nil || errors.Is(err, syscall.ECONNRESET), "want RST or EOF, got %v", err)
		require.NoError(t, c.Ping(ctx).Err())
		assert.Equal(t, sets, s.CommandCalls(t, "set"), "no SET ever reached redis")
		assert.Zero(t, s.Admin().Exists(ctx, "blackholed", "blackholed-raw").Val())
	})

	t.Run("delay", func(t *testing.T) {
		// A client of its own: c's read timeout is too short to wait for
		// the delays below on a loaded machine.
		slow := plainClient(t, p.Addr(), func(o *redis.Options) { o.ReadTimeout = 30 * time.Second; o.PoolSize = 1 })
		require.NoError(t, slow.Ping(ctx).Err())
		p.Delay(150 * time.Millisecond)
		start := time.Now()
		require.NoError(t, slow.Ping(ctx).Err())
		assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
		// Passthrough releases a reply being delayed: with an hour's delay,
		// a reply at all proves it (no bound on how fast it comes).
		p.Delay(time.Hour)
		pings := s.CommandCalls(t, "ping")
		pong := make(chan error, 1)
		go func() { pong <- slow.Ping(ctx).Err() }()
		require.Eventually(t, func() bool { return s.CommandCalls(t, "ping") > pings }, 5*time.Second, time.Millisecond,
			"the PING reached redis")
		p.Passthrough()
		require.NoError(t, <-pong, "Passthrough released the delayed reply")
		require.NoError(t, c.Ping(ctx).Err())
	})

	t.Run("reset after n bytes on an open connection", func(t *testing.T) {
		conn, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer conn.Close()
		r := bufio.NewReader(conn)
		up0, _ := p.Bytes()
		_, err = conn.Write(resp("PING"))
		require.NoError(t, err)
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "+PONG\r\n", line)

		first := resp("SET", "reset1", "v")
		p.ResetAfter(len(first))
		_, err = conn.Write(append(first, resp("SET", "reset2", "v")...))
		require.NoError(t, err)
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = io.ReadAll(r)
		require.True(t, errors.Is(err, syscall.ECONNRESET), "want RST, got %v", err)
		want := int64(len(resp("PING")) + len(first))
		up1, _ := p.Bytes()
		assert.Equal(t, want, up1-up0, "exactly n bytes forwarded after the call")
		require.Eventually(t, func() bool { return s.Admin().Get(ctx, "reset1").Val() == "v" }, 2*time.Second, 10*time.Millisecond)
		assert.Equal(t, int64(0), s.Admin().Exists(ctx, "reset2").Val())
	})

	t.Run("reset after 0 bytes on new connections", func(t *testing.T) {
		p.ResetAfter(0)
		before := s.CommandCalls(t, "set")
		conn, err := net.Dial("tcp", p.Addr())
		werr := err
		if err == nil {
			// The RST may arrive during or after connect, and before or
			// after the write: whichever call comes first reports it (a read
			// after a write that did returns a plain EOF).
			defer conn.Close()
			_, werr = conn.Write(resp("SET", "never", "v"))
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = io.ReadAll(conn)
		}
		reset := func(err error) bool { return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) }
		assert.True(t, reset(werr) || reset(err), "want RST, got %v on write, %v on read", werr, err)
		assert.Equal(t, before, s.CommandCalls(t, "set"))
		p.Passthrough()
	})

	t.Run("refuse", func(t *testing.T) {
		open, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer open.Close()
		openR := bufio.NewReader(open)
		// Complete one round trip so the proxy has accepted the connection;
		// a connection still in the accept queue is reset by Refuse.
		_, err = open.Write(resp("PING"))
		require.NoError(t, err)
		_, err = openR.ReadString('\n')
		require.NoError(t, err)
		p.Refuse()
		_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
		require.True(t, errors.Is(err, syscall.ECONNREFUSED), "want refused, got %v", err)
		// Open connections keep working.
		_, err = open.Write(resp("PING"))
		require.NoError(t, err)
		line, err := openR.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "+PONG\r\n", line)
		p.Passthrough()
		c2, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		require.NoError(t, err)
		_ = c2.Close()
	})
}
