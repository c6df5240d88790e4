package runtime

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
)

func TestNewRejectsInvalidModel(t *testing.T) {
	_, err := New(context.Background(), policy.RedisConfig{})
	require.ErrorIs(t, err, ErrConfig)

	d := testDeployment("main", standalone("127.0.0.1:1"))
	d.Lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 0, MaxInFlight: 1}
	_, err = New(context.Background(), testConfig(d))
	require.ErrorIs(t, err, ErrConfig)

	cfg := testConfig(testDeployment("main", standalone("127.0.0.1:1")))
	cfg.Roles[policy.RoleCache] = policy.RoleBinding{Deployment: "missing"}
	_, err = New(context.Background(), cfg)
	require.ErrorIs(t, err, ErrConfig)
}

func TestRolesAndTypedRoleError(t *testing.T) {
	// No server needed: New dials nothing.
	r := newRuntime(t, testConfig(testDeployment("main", standalone("127.0.0.1:1"))))
	assert.Equal(t, []policy.Role{policy.RoleCoordination}, r.Roles())
	d, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	assert.Equal(t, "main", d.ID())
	assert.Equal(t, policy.TopologyStandalone, d.Topology())
	assert.NotNil(t, d.Programs())
	assert.Equal(t, testNS, r.Keys().Namespace())

	_, err = r.Role(policy.RoleCache)
	require.ErrorIs(t, err, ErrRoleNotSelected)
	var re *RoleError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, policy.RoleCache, re.Role)
	assert.Equal(t, StateOpen, r.State())
}

// assertNoResendOptions checks the effective options of one plain client
// (standalone, sentinel data client or cluster node).
func assertNoResendOptions(t *testing.T, o *redis.Options, l policy.Lane, lc policy.LaneConfig) {
	t.Helper()
	// -1 is normalised to 0 (one attempt); a 0 we passed would have become 3.
	assert.Equal(t, 0, o.MaxRetries, "MaxRetries")
	assert.Equal(t, 1, o.DialerRetries, "DialerRetries")
	assert.True(t, o.DisableIdentity, "DisableIdentity")
	assert.True(t, o.ContextTimeoutEnabled, "ContextTimeoutEnabled")
	assert.Equal(t, 2, o.Protocol, "Protocol")
	assert.Equal(t, 0, o.MinIdleConns, "MinIdleConns")
	assert.Equal(t, lc.PoolSize, o.PoolSize, "PoolSize")
	assert.Equal(t, lc.PoolSize, o.MaxActiveConns, "MaxActiveConns")
	assert.Positive(t, o.DialTimeout)
	assert.Positive(t, o.ReadTimeout)
	assert.Positive(t, o.WriteTimeout)
	assert.Positive(t, o.PoolTimeout)
	assert.Equal(t, "caphost-test-"+string(l), o.ClientName)
	require.NotNil(t, o.MaintNotificationsConfig)
	assert.Equal(t, "disabled", string(o.MaintNotificationsConfig.Mode))
}

func TestEffectiveOptionsStandaloneAndSentinel(t *testing.T) {
	srv := redistest.StartStandalone(t)
	sen := redistest.StartSentinel(t)
	a := testDeployment("main", standalone(srv.Addr()))
	b := testDeployment("sen", &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()})
	b.Lanes[policy.LaneBlocking] = policy.LaneConfig{PoolSize: 1, MaxInFlight: 1, CommandTimeout: 10 * time.Second}
	cfg := testConfig(a, b)
	cfg.Roles[policy.RoleSession] = policy.RoleBinding{Deployment: "sen"}
	r := newRuntime(t, cfg)

	require.Len(t, r.registry, 2*len(policy.Lanes()))
	for _, reg := range r.registry {
		c, ok := reg.client.(*redis.Client)
		require.True(t, ok, "%s/%s is %T", reg.deployment, reg.lane, reg.client)
		dep := a
		if reg.deployment == "sen" {
			dep = b
		}
		assertNoResendOptions(t, c.Options(), reg.lane, dep.Lanes[reg.lane])
	}
	blocking := laneClient(t, r, policy.RoleSession, policy.LaneBlocking).(*redis.Client)
	assert.Equal(t, 10*time.Second, blocking.Options().ReadTimeout, "lane CommandTimeout override")
	regular := laneClient(t, r, policy.RoleSession, policy.LaneRegular).(*redis.Client)
	assert.Equal(t, 2*time.Second, regular.Options().ReadTimeout)

	// The sentinel deployment really reaches the primary through discovery.
	require.NoError(t, r.roles[policy.RoleSession].Ping(ctxT(t, 5*time.Second)))
}

func TestEffectiveOptionsCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	r := newRuntime(t, testConfig(testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})))
	d, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	require.NoError(t, d.Ping(ctxT(t, 5*time.Second)))

	for _, reg := range r.registry {
		cc, ok := reg.client.(*redis.ClusterClient)
		require.True(t, ok)
		o := cc.Options()
		assert.Equal(t, 0, o.MaxRedirects, "MaxRedirects -1 is normalised to 0: no redirect/retry loop")
		assert.Equal(t, -1, o.MaxRetries)
		assert.False(t, o.ReadOnly)
		assert.False(t, o.RouteByLatency)
		assert.False(t, o.RouteRandomly)
		assert.True(t, o.DisableRoutingPolicies)
		assert.True(t, o.DisableIdentity)
		assert.Equal(t, 2, o.Protocol)
		assert.Equal(t, "disabled", string(o.MaintNotificationsConfig.Mode))

		// Every node client (seeds and discovered nodes) carries the same options.
		var nodes atomic.Int32
		require.NoError(t, cc.ForEachShard(ctxT(t, 5*time.Second), func(ctx context.Context, n *redis.Client) error {
			nodes.Add(1)
			assertNoResendOptions(t, n.Options(), reg.lane, policy.LaneConfig{PoolSize: 2, MaxInFlight: 4})
			return nil
		}))
		assert.GreaterOrEqual(t, nodes.Load(), int32(3))
	}
}

// TestNoClientEscapesTheGuard sends a blocked command through every lane of
// every deployment (and every Cluster node client) and proves from INFO
// commandstats that none reached a server, while an admitted command did.
func TestNoClientEscapesTheGuard(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cl := redistest.StartCluster(t)
	cfg := testConfig(testDeployment("main", standalone(srv.Addr())), testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()}))
	cfg.AllowUnsafeColocation = true
	cfg.Roles[policy.RoleCache] = policy.RoleBinding{Deployment: "cl"}
	r := newRuntime(t, cfg)

	ctx := ctxT(t, 20*time.Second)
	pingsBefore := srv.CommandCalls(t, "ping")
	var checked atomic.Int32
	for _, reg := range r.registry {
		err := reg.client.Do(ctx, "flushall").Err()
		var rej *guard.Rejection
		require.ErrorAs(t, err, &rej, "%s/%s", reg.deployment, reg.lane)
		assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
		checked.Add(1)
		if reg.deployment == "main" && reg.lane != policy.LanePubSub {
			require.NoError(t, reg.client.Ping(ctx).Err(), "%s/%s", reg.deployment, reg.lane)
		}
		if cc, ok := reg.client.(*redis.ClusterClient); ok {
			require.NoError(t, cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
				var nrej *guard.Rejection
				if err := n.Do(ctx, "flushall").Err(); !errors.As(err, &nrej) {
					return fmt.Errorf("node of %s: not rejected by the guard: %w", reg.lane, err)
				}
				checked.Add(1)
				return nil
			}))
		}
	}
	assert.Equal(t, int64(0), srv.CommandCalls(t, "flushall"))
	assert.Equal(t, int64(0), cl.CommandCalls(t, "flushall"))
	assert.Greater(t, srv.CommandCalls(t, "ping"), pingsBefore)
	assert.GreaterOrEqual(t, int(checked.Load()), 2*len(policy.Lanes())+3*len(policy.Lanes()))
}

// TestUnselectedDeploymentIsInert proves a deployment no role references
// creates no client, no connection, no command and no goroutine: New
// builds and registers clients for the used deployment only; the unused
// server accepts no connection and executes no command while the runtime
// is built and used (its INFO counters, read on one connection the test
// opened before); and a runtime configured with the unused deployment runs
// exactly as many goroutines as one without it.
func TestUnselectedDeploymentIsInert(t *testing.T) {
	used := redistest.StartStandalone(t)
	unused := redistest.StartStandalone(t)
	ctx := ctxT(t, 30*time.Second)
	seen := serverCounters(t, unused)
	before := seen()
	exercise := func(r *Runtime) {
		t.Helper()
		for _, l := range policy.Lanes() {
			if l != policy.LanePubSub {
				require.NoError(t, laneClient(t, r, policy.RoleCoordination, l).Ping(ctx).Err())
			}
		}
	}
	usedOnly := func() policy.RedisConfig { return testConfig(testDeployment("used", standalone(used.Addr()))) }
	// A first runtime pays for whatever the process starts once (pools,
	// timers, caches), so the two measured below differ only by their
	// configuration.
	warm := newRuntime(t, usedOnly())
	exercise(warm)
	require.NoError(t, warm.Close(context.Background()))

	g0 := settledGoroutines(t)
	r := newRuntime(t, testConfig(testDeployment("used", standalone(used.Addr())), testDeployment("unused", standalone(unused.Addr()))))
	exercise(r)
	g1 := settledGoroutines(t)
	exercise(newRuntime(t, usedOnly()))
	g2 := settledGoroutines(t)
	after := seen()

	// What New built: one deployment, one client per lane, all of it "used".
	require.Len(t, r.deps, 1)
	assert.Equal(t, "used", r.deps[0].ID())
	assert.Len(t, r.registry, len(policy.Lanes()), "one client per lane of one deployment")
	for _, reg := range r.registry {
		assert.Equal(t, "used", reg.deployment, "client of lane %s", reg.lane)
	}
	for role, d := range r.roles {
		assert.Equal(t, "used", d.ID(), "role %s", role)
	}
	// What the unused server saw: nothing but the test's own INFO.
	assert.Equal(t, before.connections, after.connections, "connections accepted by the unused server")
	before.commands["info"]++
	assert.Equal(t, before.commands, after.commands, "commands executed by the unused server")
	assert.Positive(t, used.ConnectedClients(t), "the used deployment did connect")
	// What the process runs: the same as without the unused deployment.
	assert.Equal(t, g2-g1, g1-g0, "goroutines added by a runtime with the unused deployment (%d) and without it (%d)", g1-g0, g2-g1)
}

// counters is what a server has seen: connections accepted and calls per
// command (INFO stats total_connections_received and commandstats).
type counters struct {
	connections int64
	commands    map[string]int64
}

// serverCounters opens one connection to s (before anything under test
// runs) and returns a function that reads s's counters on it, so that the
// reads themselves add one INFO call and no connection.
func serverCounters(t *testing.T, s *redistest.Server) func() counters {
	t.Helper()
	conn := s.Admin().Conn()
	t.Cleanup(func() { _ = conn.Close() })
	return func() counters {
		t.Helper()
		info, err := conn.Info(ctxT(t, 5*time.Second), "stats", "commandstats").Result()
		require.NoError(t, err)
		c := counters{connections: -1, commands: map[string]int64{}}
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
				c.connections, err = strconv.ParseInt(v, 10, 64)
				require.NoError(t, err, line)
			}
			name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			if !ok || !strings.HasPrefix(line, "cmdstat_") {
				continue
			}
			for _, f := range strings.Split(stats, ",") {
				if k, v, _ := strings.Cut(f, "="); k == "calls" || k == "rejected_calls" || k == "failed_calls" {
					n, err := strconv.ParseInt(v, 10, 64)
					require.NoError(t, err, line)
					c.commands[name] += n
				}
			}
		}
		require.NotEqual(t, int64(-1), c.connections, "INFO stats has no total_connections_received")
		return c
	}
}

// settledGoroutines returns the number of goroutines once it has not
// changed for 20 samples 5 ms apart (goroutines of earlier work finishing
// first); it fails when the count keeps changing for 10 s.
func settledGoroutines(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	n, still := goruntime.NumGoroutine(), 0
	for still < 20 {
		require.True(t, time.Now().Before(deadline), "the goroutine count never settled (last %d)", n)
		time.Sleep(5 * time.Millisecond)
		if m := goruntime.NumGoroutine(); m == n {
			still++
		} else {
			n, still = m, 0
		}
	}
	return n
}

// TestCloseIsSingleAuthority: concurrent Closes drain once and close every
// client once. The in-flight call is held by a stalled proxy until the
// draining state has been checked (30 s command and 1 min shutdown
// timeouts: only the test releases it).
func TestCloseIsSingleAuthority(t *testing.T) {
	srv := redistest.StartStandalone(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	d := testDeployment("main", standalone(proxy.Addr()))
	d.Timeouts.Command, d.Timeouts.Shutdown = 30*time.Second, time.Minute
	r := newRuntime(t, testConfig(d))
	c := laneClient(t, r, policy.RoleCoordination, policy.LaneRegular)
	require.NoError(t, c.Ping(ctxT(t, 5*time.Second)).Err())

	// One call in flight while Close starts.
	proxy.Stall()
	inflight := make(chan error, 1)
	go func() { inflight <- c.Get(context.Background(), testKey("a")).Err() }()
	require.Eventually(t, func() bool { return r.gate.inFlight() == 1 }, 10*time.Second, 5*time.Millisecond)

	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = r.Close(context.Background())
		}(i)
	}
	require.Eventually(t, func() bool { return r.State() == StateDraining }, 10*time.Second, time.Millisecond)
	// New calls are refused before send while draining.
	err := c.Get(context.Background(), testKey("b")).Err()
	assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
	assert.ErrorIs(t, err, ErrLaneClosed)
	assert.Equal(t, StateDraining, r.State(), "Close waits for the in-flight call")

	proxy.Passthrough()
	wg.Wait()
	assert.ErrorIs(t, <-inflight, redis.Nil, "the in-flight call finished normally")
	for _, e := range errs {
		assert.NoError(t, e)
	}
	assert.Equal(t, StateClosed, r.State())
	require.NoError(t, r.Close(context.Background()))
	for _, reg := range r.registry {
		assert.Equal(t, int32(1), reg.closes.Load(), "%s/%s closed once", reg.deployment, reg.lane)
	}
	// The go-redis clients really are closed.
	err = c.Ping(context.Background()).Err()
	assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
	assert.Equal(t, StateClosed, r.State())
}

func TestCloseDrainTimeout(t *testing.T) {
	srv := redistest.StartStandalone(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	d := testDeployment("main", standalone(proxy.Addr()))
	// The stalled call ends only when Close gives up on it (30 s command
	// timeout), however late Close starts.
	d.Timeouts = policy.Timeouts{Connect: time.Second, Command: 30 * time.Second, Acquire: 100 * time.Millisecond, Shutdown: time.Minute}
	r := newRuntime(t, testConfig(d))
	c := laneClient(t, r, policy.RoleCoordination, policy.LaneRegular)
	require.NoError(t, c.Ping(ctxT(t, 5*time.Second)).Err())
	proxy.Stall()
	done := make(chan error, 1)
	go func() { done <- c.Get(context.Background(), testKey("a")).Err() }()
	require.Eventually(t, func() bool { return r.gate.inFlight() == 1 }, 10*time.Second, 5*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := r.Close(ctx)
	require.ErrorIs(t, err, ErrDrainTimeout)
	assert.Equal(t, StateClosed, r.State())
	// The abandoned read ends as INDETERMINATE, never as a clean failure.
	assert.Equal(t, certainty.Indeterminate, outcomeOf(t, <-done))
}
