package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	masterName      = "mymaster"
	sentinelTimeout = 20 * time.Second
)

// Sentinel is a Sentinel deployment owned by a test: one primary, two
// replicas and three sentinels with quorum 2 and fast failure detection.
type Sentinel struct {
	d         *deployment
	data      []*Server // data nodes; data[0] is the initial primary
	sentinels []*Server

	mu      sync.Mutex
	primary *Server
}

// StartSentinel starts 1 primary, 2 replicas and 3 sentinels (quorum 2,
// down-after-milliseconds 1000, failover-timeout 3000) and waits until every
// sentinel sees both replicas and both other sentinels.
//
// With WithACL the given users exist on the data nodes; each sentinel has the
// default user off, the admin user (also used between sentinels) and a
// discovery-only user, see DiscoveryUser. Replication and sentinel monitoring
// authenticate as the admin user.
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	d := newDeployment(t, opts)
	s := &Sentinel{d: d}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()

	primary := d.newServer(t, kindStandalone, nil)
	if err := primary.start(ctx, true); err != nil {
		t.Fatal(err)
	}
	s.data = []*Server{primary}
	s.primary = primary
	for i := 0; i < 2; i++ {
		s.data = append(s.data, d.newServer(t, kindStandalone, []string{"replicaof 127.0.0.1 " + strconv.Itoa(primary.port)}))
	}
	if err := startAll(ctx, s.data[1:]); err != nil {
		t.Fatal(err)
	}
	if err := pollAll(ctx, "replicas in sync", s.data[1:], linkUp(ctx)); err != nil {
		t.Fatal(err)
	}

	monitor := []string{
		"sentinel resolve-hostnames no",
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", masterName, primary.port),
		"sentinel down-after-milliseconds " + masterName + " 1000",
		"sentinel failover-timeout " + masterName + " 3000",
		"sentinel parallel-syncs " + masterName + " 2",
	}
	if d.o.acl {
		monitor = append(monitor,
			"sentinel auth-user "+masterName+" "+adminUser,
			"sentinel auth-pass "+masterName+" "+d.adminPass)
	}
	for i := 0; i < 3; i++ {
		s.sentinels = append(s.sentinels, d.newServer(t, kindSentinel, monitor))
	}
	if err := startAll(ctx, s.sentinels); err != nil {
		t.Fatal(err)
	}
	if err := pollAll(ctx, "sentinels to discover replicas and each other", s.sentinels, func(n *Server) (bool, string, error) {
		reps, err := n.admin.Do(ctx, "SENTINEL", "REPLICAS", masterName).Slice()
		if err != nil {
			return false, "", err
		}
		sents, err := n.admin.Do(ctx, "SENTINEL", "SENTINELS", masterName).Slice()
		if err != nil {
			return false, "", err
		}
		healthy := 0
		for _, r := range reps {
			if flags := fieldOf(r, "flags"); flags == "slave" {
				healthy++
			}
		}
		return healthy == 2 && len(sents) == 2, fmt.Sprintf("replicas ok=%d sentinels=%d", healthy, len(sents)), nil
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

func linkUp(ctx context.Context) func(*Server) (bool, string, error) {
	return func(n *Server) (bool, string, error) {
		repl, err := n.admin.Info(ctx, "replication").Result()
		if err != nil {
			return false, "", err
		}
		return strings.Contains(repl, "master_link_status:up"), repl, nil
	}
}

// fieldOf reads one field from a SENTINEL REPLICAS/MASTER entry, which is a
// flat key/value array in RESP2 and a map in RESP3.
func fieldOf(entry any, key string) string {
	switch e := entry.(type) {
	case []any:
		for i := 0; i+1 < len(e); i += 2 {
			if k, _ := e[i].(string); k == key {
				v, _ := e[i+1].(string)
				return v
			}
		}
	case map[any]any:
		v, _ := e[key].(string)
		return v
	case map[string]any:
		v, _ := e[key].(string)
		return v
	}
	return ""
}

// MasterName returns the monitored master name ("mymaster").
func (s *Sentinel) MasterName() string { return masterName }

// SentinelAddrs returns the three sentinel addresses.
func (s *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		out[i] = n.Addr()
	}
	return out
}

// Sentinels returns the three sentinel processes (their Admin clients speak
// to the sentinel itself).
func (s *Sentinel) Sentinels() []*Server { return append([]*Server(nil), s.sentinels...) }

// Primary returns the current primary as known by the harness: the initial
// primary, or the one returned by the last Failover.
func (s *Sentinel) Primary() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.primary
}

// Replicas returns the data nodes other than Primary().
func (s *Sentinel) Replicas() []*Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Server
	for _, n := range s.data {
		if n != s.primary {
			out = append(out, n)
		}
	}
	return out
}

// AdminUser returns the harness admin credentials, valid on data nodes and sentinels.
func (s *Sentinel) AdminUser() (user, pass string) { return s.d.adminCreds() }

// DiscoveryUser returns the sentinel discovery-only credentials (for
// FailoverOptions.SentinelUsername/SentinelPassword) with WithACL, ("", "")
// otherwise.
func (s *Sentinel) DiscoveryUser() (user, pass string) {
	if !s.d.o.acl {
		return "", ""
	}
	return discoveryUser, s.d.discPass
}

// TLS returns the generated certificates, or nil without WithTLS.
func (s *Sentinel) TLS() *TLSMaterial { return s.d.tls }

// Failover runs SENTINEL FAILOVER, waits until every sentinel reports a new
// primary and that primary accepts a write (a SET/DEL of the key
// "redistest:failover-probe"), and returns it. The old primary, if running,
// is demoted by the sentinels on their own schedule (Sentinel waits ~8 s of
// stable role reports before converting it), so it may still claim to be a
// primary for a while after Failover returns.
func (s *Sentinel) Failover(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	old := s.Primary()
	// A sentinel may refuse while it still considers a replica unsuitable
	// (e.g. right after start or a previous failover); retry until the deadline.
	var err error
	for {
		err = s.sentinels[0].admin.Do(ctx, "SENTINEL", "FAILOVER", masterName).Err()
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	next, err := s.awaitNewPrimary(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	err = pollAll(ctx, "new primary to accept writes", []*Server{next}, func(n *Server) (bool, string, error) {
		if err := n.admin.Set(ctx, "redistest:failover-probe", "1", time.Second).Err(); err != nil {
			return false, "", err
		}
		return true, "", n.admin.Del(ctx, "redistest:failover-probe").Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.primary = next
	s.mu.Unlock()
	return next
}

// AwaitFailover waits until every sentinel names a primary other than old
// — after old was killed or paused, the sentinels fail over on their own
// (down-after-milliseconds 1000) — makes it Primary() and returns it.
func (s *Sentinel) AwaitFailover(t testing.TB, old *Server) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelTimeout)
	defer cancel()
	next, err := s.awaitNewPrimary(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.primary = next
	s.mu.Unlock()
	return next
}

// AwaitReplicaOf waits until n reports ROLE slave of primary with its
// replication link up: a resumed old primary that the sentinels turned
// into a replica and that has synchronised with the new primary.
func (s *Sentinel) AwaitReplicaOf(t testing.TB, n, primary *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*sentinelTimeout)
	defer cancel()
	want := "master_port:" + strconv.Itoa(primary.port)
	err := pollAll(ctx, "old primary to rejoin as a replica", []*Server{n}, func(n *Server) (bool, string, error) {
		repl, err := n.admin.Info(ctx, "replication").Result()
		if err != nil {
			return false, "", nil // still loading or paused: keep polling
		}
		ok := strings.Contains(repl, "role:slave") && strings.Contains(repl, want) &&
			strings.Contains(repl, "master_link_status:up")
		return ok, repl, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// awaitNewPrimary polls the sentinels until all name the same data node
// other than old.
func (s *Sentinel) awaitNewPrimary(ctx context.Context, old *Server) (*Server, error) {
	var next *Server
	err := pollAll(ctx, "sentinels to report a new primary", s.sentinels, func(n *Server) (bool, string, error) {
		addr, err := n.admin.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName).StringSlice()
		if err != nil {
			return false, "", err
		}
		if len(addr) != 2 {
			return false, fmt.Sprint(addr), nil
		}
		hp := net.JoinHostPort(addr[0], addr[1])
		if hp == old.Addr() {
			return false, "still " + hp, nil
		}
		for _, d := range s.data {
			if d.Addr() == hp {
				if next != nil && next != d {
					return false, "sentinels disagree", nil
				}
				next = d
				return true, hp, nil
			}
		}
		return false, "unknown primary " + hp, nil
	})
	return next, err
}

// Monitor is a MONITOR stream of one server, recorded line by line.
type Monitor struct {
	mu    sync.Mutex
	lines []string
	conn  net.Conn
	done  chan struct{}
}

// Monitor starts MONITOR on n over a connection of its own (as the admin
// user with WithACL) and records every line until the test ends. It keeps
// recording across a SIGSTOP/SIGCONT of n: commands the kernel buffered
// while n was paused show up when they execute.
func (n *Server) Monitor(t testing.TB) *Monitor {
	t.Helper()
	c, err := net.DialTimeout("tcp", n.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(c)
	send := func(args ...string) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "+OK") {
			t.Fatalf("redistest: %s: %q %v", args[0], line, err)
		}
	}
	if n.d.o.acl {
		user, pass := n.d.adminCreds()
		send("AUTH", user, pass)
	}
	send("MONITOR")
	m := &Monitor{conn: c, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, strings.TrimRight(line, "\r\n"))
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = c.Close()
		<-m.done
	})
	return m
}

// Lines returns the lines recorded so far.
func (m *Monitor) Lines() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.lines...)
}
