package runtime

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// echoListener accepts one connection and echoes what it reads.
func echoListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	return ln.Addr().String()
}

func dialIdleChecked(t *testing.T, window time.Duration) *idleCheckedConn {
	t.Helper()
	c, err := idleCheckDialer(netDialer(time.Second).DialContext, window)(context.Background(), "tcp", echoListener(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ic, ok := c.(*idleCheckedConn)
	require.True(t, ok, "a plain TCP connection is wrapped, got %T", c)
	return ic
}

func echo(t *testing.T, c net.Conn) {
	t.Helper()
	_, err := c.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = c.Read(buf)
	require.NoError(t, err)
}

// The window is measured from the last read that returned data: before any
// read, and once the window has passed, go-redis's check gets the socket's
// own RawConn; inside it, one whose Read skips the peek.
func TestIdleCheckedConnWindow(t *testing.T) {
	t.Run("inside the window", func(t *testing.T) {
		c := dialIdleChecked(t, time.Minute)
		raw, err := c.SyscallConn()
		require.NoError(t, err)
		assert.NotSame(t, &c.skip, raw, "never read: checked")

		echo(t, c)
		raw, err = c.SyscallConn()
		require.NoError(t, err)
		require.Same(t, &c.skip, raw, "just read: the check is skipped")
		called := false
		require.NoError(t, raw.Read(func(uintptr) bool { called = true; return true }))
		assert.False(t, called, "the peek does not run")
		// Control and Write are the socket's own.
		var fd uintptr
		require.NoError(t, raw.Control(func(f uintptr) { fd = f }))
		assert.NotZero(t, fd)
		require.NoError(t, raw.Write(func(uintptr) bool { called = true; return true }))
		assert.True(t, called)
	})
	t.Run("keep-alive is go-redis's default", func(t *testing.T) {
		c := dialIdleChecked(t, time.Minute)
		raw, err := c.SyscallConn()
		require.NoError(t, err)
		got := map[string]int{}
		require.NoError(t, raw.Control(func(fd uintptr) {
			for name, opt := range map[string]int{"idle": syscall.TCP_KEEPIDLE, "interval": syscall.TCP_KEEPINTVL, "count": syscall.TCP_KEEPCNT} {
				v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, opt)
				require.NoError(t, err)
				got[name] = v
			}
			on, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
			require.NoError(t, err)
			got["on"] = on
		}))
		assert.Equal(t, map[string]int{"idle": 30, "interval": 5, "count": 3, "on": 1}, got)
	})
	t.Run("idle past the window", func(t *testing.T) {
		c := dialIdleChecked(t, time.Millisecond)
		echo(t, c)
		time.Sleep(20 * time.Millisecond)
		raw, err := c.SyscallConn()
		require.NoError(t, err)
		assert.NotSame(t, &c.skip, raw)
		called := false
		require.NoError(t, raw.Read(func(uintptr) bool { called = true; return true }))
		assert.True(t, called, "the peek runs")
	})
	t.Run("other connections pass through", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		c, err := idleCheckDialer(func(context.Context, string, string) (net.Conn, error) { return a, nil }, time.Second)(context.Background(), "tcp", "x")
		require.NoError(t, err)
		assert.Same(t, a, c, "only *net.TCPConn is wrapped (TLS connections are never peeked by go-redis)")
	})
}

// TestIdleCheckAgainstRedis pins what timeouts.idle-check changes on a real
// server: a connection the server closed while it sat in the pool is
// replaced by go-redis's reuse check unless it read a reply less than the
// window ago; then one command fails Indeterminate (EOF after the write, as
// a close during that command gives) and the connection is dropped.
func TestIdleCheckAgainstRedis(t *testing.T) {
	srv := redistest.StartStandalone(t)
	for _, tc := range []struct {
		name     string
		window   time.Duration
		replaced bool // the check found the close: the next command is applied
	}{
		{"checked on every reuse (0)", 0, true},
		{"idle past the window", 5 * time.Millisecond, true},
		{"inside the window", policy.MaxIdleCheck, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idleCheckCase(t, standalone(srv.Addr()), tc.window, func(*keys.Key) *redistest.Server { return srv }, tc.replaced)
		})
	}
}

// TestIdleCheckTopologies: Cluster node clients and the Sentinel failover
// client dial through the same idle-check dialer (a close inside the window
// is not peeked for), and with 0 the check runs on every reuse.
func TestIdleCheckTopologies(t *testing.T) {
	cl := redistest.StartCluster(t)
	sen := redistest.StartSentinel(t)
	owner := func(k *keys.Key) *redistest.Server {
		node, err := cl.Admin().MasterForKey(context.Background(), k.Redis())
		require.NoError(t, err)
		for _, p := range cl.Primaries() {
			if p.Addr() == node.Options().Addr {
				return p
			}
		}
		t.Fatalf("slot owner %s not among primaries", node.Options().Addr)
		return nil
	}
	for _, window := range []time.Duration{0, policy.MaxIdleCheck} {
		t.Run(fmt.Sprintf("cluster %s", window), func(t *testing.T) {
			idleCheckCase(t, &policy.Cluster{Seeds: cl.Seeds()}, window, owner, window == 0)
		})
		t.Run(fmt.Sprintf("sentinel %s", window), func(t *testing.T) {
			idleCheckCase(t, &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()}, window,
				func(*keys.Key) *redistest.Server { return sen.Primary() }, window == 0)
		})
	}
}

// idleCheckCase reads a key through a fresh runtime, has the server that
// holds it close the runtime's regular-lane connections, waits 50 ms (long
// enough for a 5 ms window to pass, far inside a 1 s one) and reads again.
// A case expecting the close to go unchecked needs the second read to start
// inside the window; on a machine too loaded for that the case is repeated
// (three tries), and fails if it never is.
func idleCheckCase(t *testing.T, topo policy.Topology, window time.Duration, server func(*keys.Key) *redistest.Server, replaced bool) {
	t.Helper()
	for try := 1; ; try++ {
		if idleCheckTry(t, topo, window, server, replaced) {
			return
		}
		require.Less(t, try, 3, "the second read never started inside the %s window: machine too loaded", window)
	}
}

// idleCheckTry is one try of idleCheckCase; false when the timing
// precondition did not hold and nothing was asserted.
func idleCheckTry(t *testing.T, topo policy.Topology, window time.Duration, server func(*keys.Key) *redistest.Server, replaced bool) bool {
	t.Helper()
	d := testDeployment("main", topo)
	d.Timeouts.IdleCheck = window
	r := newRuntime(t, testConfig(d))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	ctx := ctxT(t, 10*time.Second)
	k, err := r.Keys().Build(keys.Spec{Capability: keys.CapProbe, Region: "idle", KeyVersion: 1, Kind: "probe", Parts: [][]byte{[]byte("a")}})
	require.NoError(t, err)

	_, _, err = dep.Get(ctx, k)
	require.NoError(t, err)
	read := time.Now()
	require.Equal(t, 1, killClients(t, server(&k).Admin(), clientName(d, policy.LaneRegular)), "the lane's one pooled connection")
	time.Sleep(50 * time.Millisecond)
	if !replaced && time.Since(read) > window*8/10 {
		return false
	}

	_, _, err = dep.Get(ctx, k)
	if replaced {
		require.NoError(t, err, "the reuse check dropped the closed connection")
		return true
	}
	require.Error(t, err)
	assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err))
	_, _, err = dep.Get(ctx, k)
	require.NoError(t, err, "the failed connection was dropped")
	return true
}

// killClients closes every connection of admin's server named name (and no
// other: sentinels and replicas keep theirs) and returns how many.
func killClients(t *testing.T, admin *redis.Client, name string) int {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	list, err := admin.ClientList(ctx).Result()
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		var id string
		match := false
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if f == "name="+name {
				match = true
			}
		}
		if !match {
			continue
		}
		killed, err := admin.ClientKillByFilter(ctx, "ID", id).Result()
		require.NoError(t, err)
		n += int(killed)
	}
	return n
}

func TestIdleCheckValidation(t *testing.T) {
	for _, v := range []time.Duration{-time.Nanosecond, policy.MaxIdleCheck + time.Nanosecond} {
		d := testDeployment("main", standalone("127.0.0.1:1"))
		d.Timeouts.IdleCheck = v
		_, err := New(context.Background(), testConfig(d))
		require.Error(t, err, "%s", v)
		assert.Contains(t, err.Error(), "idle-check")
	}
}

// countingConn counts SyscallConn calls on an idle-checked connection.
type countingConn struct {
	*idleCheckedConn
	calls *atomic.Int64
}

func (c countingConn) SyscallConn() (syscall.RawConn, error) {
	c.calls.Add(1)
	return c.idleCheckedConn.SyscallConn()
}

// TestGoRedisReachesTheSocketOnlyForTheReuseCheck pins what idleconn.go
// relies on in go-redis (v9.23): SyscallConn is called once per reuse of a
// pooled connection (the health check) and nowhere else — not on the first
// use of a new connection, not while a command runs. If an upgrade changes
// either, this fails and the skip RawConn must be reviewed.
func TestGoRedisReachesTheSocketOnlyForTheReuseCheck(t *testing.T) {
	srv := redistest.StartStandalone(t)
	var calls atomic.Int64
	dial := idleCheckDialer(netDialer(time.Second).DialContext, time.Minute)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true, PoolSize: 1, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countingConn{conn.(*idleCheckedConn), &calls}, nil
		}})
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)
	const n = 100
	for i := 0; i < n; i++ {
		require.NoError(t, c.Set(ctx, "idle-check-pin", i, time.Minute).Err())
	}
	require.NoError(t, c.Get(ctx, "idle-check-pin").Err())
	assert.EqualValues(t, n, calls.Load(), "one check per reuse: %d reuses of the one connection", n)
}
