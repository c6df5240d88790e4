//go:build linux

package transport

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/caphost/caphost/internal/logtest"
)

// testBroker is a host broker and the raw plugin end of its socket.
type testBroker struct {
	b      *broker
	plugin *net.UnixConn
	log    *logtest.Buffer
}

func newTestBroker(t testing.TB, dial func(ctx context.Context, network, addr string) (net.Conn, error), targets ...string) *testBroker {
	t.Helper()
	return newTestBrokerNames(t, testNames(), dial, targets...)
}

// testNames is the names the test brokers resolve: example.com and
// slow.example to public (documentation) addresses, localhost to
// loopback; any other name does not resolve.
func testNames() *testResolver {
	return &testResolver{names: map[string][]netip.Addr{
		"example.com":  {netip.MustParseAddr("203.0.113.10")},
		"slow.example": {netip.MustParseAddr("203.0.113.11")},
		"localhost":    {netip.MustParseAddr("127.0.0.1")},
	}}
}

// testResolver is a broker's lookup over a table the test changes (a DNS
// zone that answers differently over time). onRefuse, when set, is the
// broker's (set before it starts).
type testResolver struct {
	mu       sync.Mutex
	names    map[string][]netip.Addr
	onRefuse func(reason string)
}

func (r *testResolver) set(name string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names[name] = nil
	for _, a := range addrs {
		r.names[name] = append(r.names[name], netip.MustParseAddr(a))
	}
}

func (r *testResolver) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.names[host]; len(a) > 0 {
		return slices.Clone(a), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// newTestBrokerNames is newTestBroker resolving names with r.
func newTestBrokerNames(t testing.TB, r *testResolver, dial func(ctx context.Context, network, addr string) (net.Conn, error), targets ...string) *testBroker {
	t.Helper()
	var buf logtest.Buffer
	b, child, err := newBroker(slog.New(slog.NewJSONHandler(&buf, nil)))
	require.NoError(t, err)
	if dial != nil {
		b.dial = dial
	}
	b.lookup, b.onRefuse = r.lookup, r.onRefuse
	c, err := net.FileConn(child)
	require.NoError(t, err)
	require.NoError(t, child.Close())
	if targets != nil {
		b.freeze(context.Background(), targets)
	}
	b.start()
	tb := &testBroker{b: b, plugin: c.(*net.UnixConn), log: &buf}
	t.Cleanup(func() {
		_ = tb.plugin.Close()
		b.close()
	})
	return tb
}

// roundTrip sends req and reads one reply: its id, status and
// descriptors.
func (tb *testBroker) roundTrip(t *testing.T, req, rights []byte) (uint32, dialStatus, []int) {
	t.Helper()
	_, _, err := tb.plugin.WriteMsgUnix(req, rights, nil)
	require.NoError(t, err)
	return tb.read(t)
}

func (tb *testBroker) read(t *testing.T) (uint32, dialStatus, []int) {
	t.Helper()
	buf, oob := make([]byte, 64), make([]byte, unix.CmsgSpace(16))
	require.NoError(t, tb.plugin.SetReadDeadline(time.Now().Add(10*time.Second)))
	n, oobn, _, _, err := tb.plugin.ReadMsgUnix(buf, oob)
	require.NoError(t, err)
	id, s, err := decodeDialReply(buf[:n])
	require.NoError(t, err)
	return id, s, rightsIn(oob[:oobn])
}

func request(id uint32, timeout time.Duration, addr string) []byte {
	return encodeDialRequest(dialRequest{id: id, timeout: timeout, addr: addr})
}

// blockingDial blocks until its context ends, counting the dials running.
func blockingDial(running *atomic.Int32) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		running.Add(1)
		defer running.Add(-1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
}

// TestBrokerRefusesMalformedRequests: every malformed request is refused
// (addressed to its id when it has one), the broker keeps serving, and
// no dial is attempted.
func TestBrokerRefusesMalformedRequests(t *testing.T) {
	var dials atomic.Int32
	tb := newTestBroker(t, func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("no")
	}, "example.com:443")
	good := request(7, time.Second, "example.com:443")
	withOp := func(op byte) []byte { b := bytes.Clone(good); b[0] = op; return b }
	withLen := func(n byte) []byte { b := bytes.Clone(good); b[9] = n; return b }
	for name, tc := range map[string]struct {
		req    []byte
		wantID uint32
	}{
		"one byte":        {[]byte{dialOp}, 0},
		"short header":    {good[:8], 7},
		"unknown op":      {withOp(2), 7},
		"zero id":         {request(0, time.Second, "example.com:443"), 0},
		"zero timeout":    {request(7, 0, "example.com:443"), 7},
		"timeout too big": {request(7, maxDialTimeout+time.Millisecond, "example.com:443"), 7},
		"length short":    {withLen(3), 7},
		"length long":     {withLen(200), 7},
		"zero length":     {withLen(0), 7},
		"trailing byte":   {append(bytes.Clone(good), 'x'), 7},
		"no port":         {request(7, time.Second, "example.com"), 7},
		"port zero":       {request(7, time.Second, "example.com:0"), 7},
		"leading zero":    {request(7, time.Second, "example.com:0443"), 7},
		"space":           {request(7, time.Second, "exa mple.com:443"), 7},
		"nul":             {request(7, time.Second, "example.com\x00:443"), 7},
		"zone":            {request(7, time.Second, "[fe80::1%eth0]:443"), 7},
		"oversized":       {bytes.Repeat([]byte{dialOp}, 4096), 0},
	} {
		id, s, fds := tb.roundTrip(t, tc.req, nil)
		assert.Equal(t, dialInvalid, s, name)
		assert.Equal(t, tc.wantID, id, name)
		assert.Empty(t, fds, name)
	}
	assert.Zero(t, dials.Load())
	assert.Contains(t, tb.log.String(), `"reason":"malformed"`)
	// Logged at the 1st, 2nd, 4th, 8th, 16th… refusal: bounded.
	assert.Equal(t, 5, strings.Count(tb.log.String(), "transport broker refused a dial"))
	assert.NotContains(t, tb.log.String(), "example.com")
}

// TestBrokerClosesDescriptorsSent: a descriptor a plugin sends the host
// is closed there at once and the request refused.
func TestBrokerClosesDescriptorsSent(t *testing.T) {
	tb := newTestBroker(t, nil, "example.com:443")
	f, err := os.Open("/dev/null")
	require.NoError(t, err)
	defer f.Close()
	before := openFDs(t)
	_, s, _ := tb.roundTrip(t, request(3, time.Second, "example.com:443"), unix.UnixRights(int(f.Fd()), int(f.Fd())))
	assert.Equal(t, dialInvalid, s)
	assert.Equal(t, before, openFDs(t), "the host keeps none of them")
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(es)
}

// TestBrokerDialsOnlyFrozenTargets: before the targets are frozen
// nothing is dialled; afterwards exactly the frozen ones are, and a
// second freeze adds nothing.
func TestBrokerDialsOnlyFrozenTargets(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	target := l.Addr().String()
	tb := newTestBroker(t, nil)
	_, s, _ := tb.roundTrip(t, request(1, time.Second, target), nil)
	assert.Equal(t, dialNotDeclared, s, "nothing before configure")
	tb.b.freeze(context.Background(), []string{target})
	lookups := 0
	tb.b.lookup = func(context.Context, string) ([]netip.Addr, error) { lookups++; return nil, errors.New("no") }
	tb.b.freeze(context.Background(), []string{"127.0.0.1:6379", "example.com:443"})
	assert.Zero(t, lookups, "a second freeze resolves nothing")
	id, s, fds := tb.roundTrip(t, request(2, time.Second, target), nil)
	require.Equal(t, dialOK, s)
	assert.Equal(t, uint32(2), id)
	require.Len(t, fds, 1)
	f := os.NewFile(uintptr(fds[0]), "got")
	c, err := net.FileConn(f)
	require.NoError(t, err)
	_ = f.Close()
	assert.Equal(t, target, c.RemoteAddr().String())
	_ = c.Close()
	for _, other := range []string{"127.0.0.1:6379", "localhost:" + target[len("127.0.0.1:"):]} {
		_, s, fds = tb.roundTrip(t, request(3, time.Second, other), nil)
		assert.Equal(t, dialNotDeclared, s, other)
		assert.Empty(t, fds)
	}
}

// TestBrokerRefusesRebinding: a declared name connects only to
// addresses of the classes it resolved to when the targets were frozen.
// A public name that later resolves to loopback, link-local (a cloud's
// metadata service) or private addresses, IPv4-mapped ones included, is
// refused without a dial (address-class, counted and logged); of a mixed
// answer only the allowed addresses are dialled; a name resolved to
// loopback at freeze (an internal relay) connects there; a name that did
// not resolve at freeze may reach public addresses only; an unspecified
// literal is never dialled.
func TestBrokerRefusesRebinding(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	at := func(host string) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
	var mu sync.Mutex
	var dialled []string
	var refused atomic.Int32
	r := testNames()
	r.set("hooks.example", "203.0.113.7")
	r.set("relay.internal", "127.0.0.1")
	r.onRefuse = func(reason string) {
		if reason == "address-class" {
			refused.Add(1)
		}
	}
	tb := newTestBrokerNames(t, r, func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		if strings.HasPrefix(addr, "127.0.0.1:") {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}, at("hooks.example"), at("relay.internal"), at("later.example"), at("0.0.0.0"))
	dials := func() []string {
		mu.Lock()
		defer mu.Unlock()
		d := dialled
		dialled = nil
		return d
	}
	id := uint32(0)
	try := func(target string) dialStatus {
		t.Helper()
		id++
		_, s, fds := tb.roundTrip(t, request(id, 5*time.Second, target), nil)
		closeFDs(fds)
		return s
	}

	assert.Equal(t, dialRefused, try(at("hooks.example")), "the public address it froze with is dialled")
	assert.Equal(t, []string{at("203.0.113.7")}, dials())
	for _, rebound := range [][]string{{"127.0.0.1"}, {"::1"}, {"::ffff:127.0.0.1"}, {"169.254.169.254"}, {"10.0.0.5"},
		{"100.64.0.1"}, {"fd00::1"}, {"fe80::1"}, {"0.0.0.0"}, {"224.0.0.1"}} {
		r.set("hooks.example", rebound...)
		assert.Equal(t, dialAddress, try(at("hooks.example")), "rebound to %v", rebound)
		assert.Empty(t, dials(), "no dial for %v", rebound)
	}
	r.set("hooks.example", "127.0.0.1", "203.0.113.8")
	assert.Equal(t, dialRefused, try(at("hooks.example")))
	assert.Equal(t, []string{at("203.0.113.8")}, dials(), "only the allowed address of a mixed answer")

	assert.Equal(t, dialOK, try(at("relay.internal")), "a name that was loopback at freeze stays usable")
	assert.Equal(t, []string{at("127.0.0.1")}, dials())
	r.set("relay.internal", "203.0.113.9")
	assert.Equal(t, dialAddress, try(at("relay.internal")), "and may not leave its class either")

	r.set("later.example", "127.0.0.1")
	assert.Equal(t, dialAddress, try(at("later.example")), "unresolved at freeze: public only")
	r.set("later.example", "203.0.113.12")
	assert.Equal(t, dialRefused, try(at("later.example")))
	assert.Equal(t, []string{at("203.0.113.12")}, dials())

	assert.Equal(t, dialAddress, try(at("0.0.0.0")), "an unspecified literal reaches the local host")
	assert.Empty(t, dials())

	assert.Equal(t, int32(13), refused.Load())
	logged := tb.log.String()
	assert.Contains(t, logged, `"reason":"address-class"`)
	assert.Contains(t, logged, `"target":"`+at("later.example")+`"`, "the unresolved target is logged at freeze")
	for _, addr := range []string{"127.0.0.1", "203.0.113", "169.254"} {
		assert.NotContains(t, logged, addr, "refusals never log an address")
	}
}

// TestBrokerTriesEachAllowedAddress: a name's allowed addresses are
// dialled one after another, each with a share of the request's
// deadline, so one that does not answer leaves time for the next.
func TestBrokerTriesEachAllowedAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	r := testNames()
	r.set("relay.internal", "10.0.0.9", "127.0.0.1")
	var running atomic.Int32
	blackhole := blockingDial(&running)
	target := net.JoinHostPort("relay.internal", strconv.Itoa(port))
	tb := newTestBrokerNames(t, r, func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "10.0.0.9:") {
			return blackhole(ctx, network, addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}, target)
	_, s, fds := tb.roundTrip(t, request(1, 4*time.Second, target), nil)
	closeFDs(fds)
	assert.Equal(t, dialOK, s, "the second address connected after the first's share (2 s of 4) ran out")
}

// TestBrokerBoundsDialsInFlight: past maxDialsInFlight running dials, a
// request is answered busy at once; a dial's own deadline ends it with
// a timeout; closing the plugin's end (its process exited) ends the
// broker and every dial it was running.
func TestBrokerBoundsDialsInFlight(t *testing.T) {
	var running atomic.Int32
	tb := newTestBroker(t, blockingDial(&running), "example.com:443")
	for i := range maxDialsInFlight {
		_, _, err := tb.plugin.WriteMsgUnix(request(uint32(i+1), 30*time.Second, "example.com:443"), nil, nil)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return running.Load() == maxDialsInFlight }, 5*time.Second, time.Millisecond)
	start := time.Now()
	id, s, _ := tb.roundTrip(t, request(99, 30*time.Second, "example.com:443"), nil)
	assert.Equal(t, dialBusy, s)
	assert.Equal(t, uint32(99), id)
	assert.Less(t, time.Since(start), time.Second)

	require.NoError(t, tb.plugin.Close())
	select {
	case <-tb.b.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the broker kept reading after the plugin's end closed")
	}
	require.Eventually(t, func() bool { return running.Load() == 0 }, 5*time.Second, time.Millisecond,
		"the dials in flight end with the plugin")
	waited := make(chan struct{})
	go func() { tb.b.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("broker goroutines outlived the plugin")
	}
}

// TestBrokerDialErrStatus: how the host classifies a failed dial.
func TestBrokerDialErrStatus(t *testing.T) {
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want dialStatus
	}{
		{ctx, &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", IsNotFound: true}}, dialDNS},
		{done, &net.OpError{Op: "dial", Err: &net.DNSError{Err: "i/o timeout", IsTimeout: true}}, dialDNS},
		{ctx, &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, dialRefused},
		{done, context.Canceled, dialTimeout},
		{ctx, &net.OpError{Op: "dial", Err: timeoutError{}}, dialTimeout},
		{ctx, &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}, dialFailed},
	} {
		assert.Equal(t, tc.want, dialErrStatus(tc.ctx, tc.err), tc.err.Error())
	}
}

// TestBrokerDialDeadline: the host honours the request's timeout.
func TestBrokerDialDeadline(t *testing.T) {
	var running atomic.Int32
	tb := newTestBroker(t, blockingDial(&running), "example.com:443")
	start := time.Now()
	_, s, _ := tb.roundTrip(t, request(5, 50*time.Millisecond, "example.com:443"), nil)
	assert.Equal(t, dialTimeout, s)
	assert.Less(t, time.Since(start), 2*time.Second)
}

// TestBrokerClient: the plugin side over a real broker: a connection to
// the declared target; net's error shapes for a refused target, a
// refused connection, a name that does not resolve, a name rebound to
// another class of address and a deadline; and
// ErrBrokerUnavailable for every dial, waiting or new, once the host end
// is gone.
func TestBrokerClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := dead.Addr().String()
	require.NoError(t, dead.Close())
	var running atomic.Int32
	slow := blockingDial(&running)
	names := testNames()
	tb := newTestBrokerNames(t, names, func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "203.0.113.11:443" { // slow.example
			return slow(ctx, network, addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}, l.Addr().String(), closed, "no-such-host.invalid:443", "slow.example:443", "example.com:443")
	c := newBrokerClient(tb.plugin)
	ctx := context.Background()

	conn, err := c.dial(ctx, "tcp", l.Addr().String())
	require.NoError(t, err)
	assert.IsType(t, &net.TCPConn{}, conn)
	_ = conn.Close()

	_, err = c.dial(ctx, "tcp", "127.0.0.1:6379")
	assert.ErrorIs(t, err, ErrDialRefused)
	assert.ErrorIs(t, err, syscall.EACCES)
	_, err = c.dial(ctx, "tcp", closed)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	_, err = c.dial(ctx, "tcp", "no-such-host.invalid:443")
	var de *net.DNSError
	require.ErrorAs(t, err, &de)
	assert.True(t, de.IsNotFound)
	_, err = c.dial(ctx, "udp", l.Addr().String())
	assert.Error(t, err)
	names.set("example.com", "127.0.0.1") // rebound
	_, err = c.dial(ctx, "tcp", "example.com:443")
	assert.ErrorIs(t, err, ErrDialRefused)
	assert.ErrorIs(t, err, syscall.EACCES)

	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.dial(dctx, "tcp", "slow.example:443")
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)

	waiting := make(chan error, 1)
	go func() {
		_, err := c.dial(ctx, "tcp", "slow.example:443")
		waiting <- err
	}()
	require.Eventually(t, func() bool { return running.Load() >= 1 }, 5*time.Second, time.Millisecond)
	tb.b.close() // the host end is gone
	select {
	case err := <-waiting:
		assert.ErrorIs(t, err, ErrBrokerUnavailable)
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting dial outlived the host end")
	}
	_, err = c.dial(ctx, "tcp", l.Addr().String())
	assert.ErrorIs(t, err, ErrBrokerUnavailable)
}

// FuzzDecodeDialRequest: whatever a plugin sends, the host's decoder
// either refuses it or returns a request within every bound that
// encodes back to exactly the bytes received.
func FuzzDecodeDialRequest(f *testing.F) {
	f.Add(request(1, time.Second, "example.com:443"))
	f.Add(request(0xffffffff, maxDialTimeout, "[::1]:25"))
	f.Add([]byte{dialOp, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeDialRequest(b)
		if err != nil {
			require.ErrorIs(t, err, errDialRequest)
			require.Empty(t, r.addr)
			return
		}
		require.NotZero(t, r.id)
		require.Positive(t, r.timeout)
		require.LessOrEqual(t, r.timeout, maxDialTimeout)
		require.True(t, ValidDialTarget(r.addr))
		require.LessOrEqual(t, len(b), maxDialRequest)
		require.Equal(t, b, encodeDialRequest(r))
	})
}

// BenchmarkDial compares a loopback connection dialled through the
// broker (a request over the socket pair, the host's dial, the socket
// passed back and wrapped) with a direct one.
func BenchmarkDial(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	target := l.Addr().String()
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
			if err != nil {
				b.Fatal(err)
			}
			_ = c.Close()
		}
	})
	b.Run("broker", func(b *testing.B) {
		tb := newTestBroker(b, nil, target)
		c := newBrokerClient(tb.plugin)
		for b.Loop() {
			conn, err := c.dial(ctx, "tcp", target)
			if err != nil {
				b.Fatal(err)
			}
			_ = conn.Close()
		}
	})
}

// TestBrokerClientDistrustsReplies: the plugin side takes a socket only
// from a well-formed ok reply to a dial it is waiting for; a reply with
// a socket and a failure status, an ok without one, or a socket for an
// id nobody waits for is refused and its descriptors closed.
func TestBrokerClientDistrustsReplies(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "end")
		c, err := net.FileConn(f)
		require.NoError(t, err)
		_ = f.Close()
		return c.(*net.UnixConn)
	}
	host, plugin := conn(fds[0]), conn(fds[1])
	defer host.Close()
	c := newBrokerClient(plugin)
	defer plugin.Close()
	null, err := os.Open("/dev/null")
	require.NoError(t, err)
	defer null.Close()
	nullFD := int(null.Fd())
	rights, two := unix.UnixRights(nullFD), unix.UnixRights(nullFD, nullFD)
	// The socket is no synchronisation the race detector sees: wait for
	// the fake host's goroutines before the deferred closes.
	var served sync.WaitGroup
	defer served.Wait()

	// The fake host answers each request with the reply reply makes.
	serve := func(reply func(id uint32) ([]byte, []byte)) {
		defer served.Done()
		buf := make([]byte, 512)
		n, _, _, _, err := host.ReadMsgUnix(buf, nil)
		if err != nil {
			return
		}
		r, err := decodeDialRequest(buf[:n])
		if err != nil {
			return
		}
		b, oob := reply(r.id)
		_, _, _ = host.WriteMsgUnix(b, oob, nil)
	}
	before := openFDs(t)
	for name, reply := range map[string]func(uint32) ([]byte, []byte){
		"socket with a failure": func(id uint32) ([]byte, []byte) { return encodeDialReply(id, dialDNS), rights },
		"ok without a socket":   func(id uint32) ([]byte, []byte) { return encodeDialReply(id, dialOK), nil },
		"two sockets": func(id uint32) ([]byte, []byte) {
			return encodeDialReply(id, dialOK), two
		},
	} {
		served.Add(1)
		go serve(reply)
		_, err := c.dial(context.Background(), "tcp", "example.com:443")
		assert.Error(t, err, name)
		var de *net.DNSError
		assert.False(t, errors.As(err, &de), name)
	}
	// A socket for an id nobody waits for, then garbage, then the real
	// reply's failure: the dial sees only its own.
	served.Add(1)
	go serve(func(id uint32) ([]byte, []byte) {
		_, _, _ = host.WriteMsgUnix(encodeDialReply(id+100, dialOK), rights, nil)
		_, _, _ = host.WriteMsgUnix([]byte("garbage"), rights, nil)
		return encodeDialReply(id, dialRefused), nil
	})
	_, err = c.dial(context.Background(), "tcp", "example.com:443")
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.Eventually(t, func() bool { return openFDs(t) == before }, 5*time.Second, 10*time.Millisecond,
		"every descriptor the fake host sent was closed")
}

// TestHostInSettings: a broker target must be a host a setting names as a
// whole value, a whole target or a URL's host, never a substring of one.
func TestHostInSettings(t *testing.T) {
	settings := map[string]string{"url": "https://Hooks.Example.com:8443/x?y=1", "host": "mail.example.", "relay": "10.0.0.7:2525",
		"v6": "[::1]:25", "secret": "a-secret-mentioning-redis"}
	for target, want := range map[string]bool{
		"hooks.example.com:8443": true,
		"HOOKS.EXAMPLE.COM:443":  true, // the port is the transport's business; the host is named
		"mail.example:587":       true,
		"10.0.0.7:2525":          true,
		"[::1]:25":               true,
		"example.com:443":        false, // a suffix of the URL's host
		"hooks:443":              false,
		"redis:6379":             false, // a substring of a value
		"10.0.0.7:6379":          false, // a host:port value names that target only
		"[::2]:25":               false,
		"nohost":                 false,
	} {
		assert.Equal(t, want, hostInSettings(target, settings), target)
	}
}
