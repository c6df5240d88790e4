package guard

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func guardedClient(t *testing.T, srv *redistest.Server, g *Guard, db int) *redis.Client {
	t.Helper()
	user, pass := srv.AdminUser()
	c := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), Username: user, Password: pass, DB: db,
		ClientName:      "caphost-guard-test",
		DisableIdentity: true, // Redis 7.0 lacks CLIENT SETINFO (blocked in the catalog)
		// Auto mode sends CLIENT MAINT_NOTIFICATIONS on connect (blocked).
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		MaxRetries:               -1,
		DialTimeout:              2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		PoolSize: 2,
	})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, g.Install(c))
	return c
}

// errorCount sums INFO errorstats: an unknown command that reached the
// server would add an "ERR unknown command" error.
func errorCount(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "errorstats").Result()
	require.NoError(t, err)
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if _, rest, ok := strings.Cut(strings.TrimSpace(line), ":count="); ok {
			n, err := strconv.ParseInt(rest, 10, 64)
			require.NoError(t, err)
			total += n
		}
	}
	return total
}

func reasonOf(t *testing.T, err error) Reason {
	t.Helper()
	return rejection(t, err).Reason
}

func TestStandaloneNothingRejectedReachesTheServer(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := testCtx(t)
	g, rec := newGuard(t, func(c *Config) { c.Budgets = policy.Budgets{MaxRequestBytes: 1024, MaxReplyBytes: 256} })
	c := guardedClient(t, srv, g, 0)

	require.NoError(t, c.Ping(ctx).Err())
	adm, _ := rec.snapshot()
	for _, want := range []string{"HELLO", "CLIENT|SETNAME", "PING"} {
		assert.Contains(t, adm, want, "connection set-up runs through the client's hooks")
	}

	t.Run("blocked and unknown commands", func(t *testing.T) {
		errsBefore := errorCount(t, srv.Admin())
		cases := []struct {
			args   []any
			stat   string
			reason Reason
		}{
			{[]any{"keys", "*"}, "keys", ReasonBlocked},
			{[]any{"flushall"}, "flushall", ReasonBlocked},
			{[]any{"flushdb"}, "flushdb", ReasonBlocked},
			{[]any{"config", "set", "maxmemory", "1"}, "config|set", ReasonBlocked},
			{[]any{"eval", "return 1", 0}, "eval", ReasonBlocked},
			{[]any{"script", "flush"}, "script|flush", ReasonBlocked},
			{[]any{"debug", "sleep", 0}, "debug", ReasonBlocked},
			{[]any{"shutdown", "nosave"}, "shutdown", ReasonBlocked},
			{[]any{"client", "kill", "type", "normal"}, "client|kill", ReasonBlocked},
			{[]any{"setex", ns + "a", 10, "v"}, "setex", ReasonBlocked},
			{[]any{"setnx", ns + "a", "v"}, "setnx", ReasonBlocked},
			{[]any{"hgetall", ns + "h"}, "hgetall", ReasonUnknownCommand},
			{[]any{"frobnicate", "x"}, "frobnicate", ReasonUnknownCommand},
		}
		for _, tc := range cases {
			err := c.Do(ctx, tc.args...).Err()
			assert.Equal(t, tc.reason, reasonOf(t, err), tc.stat)
		}
		for _, tc := range cases {
			assert.Zero(t, srv.CommandCalls(t, tc.stat), "%s reached the server", tc.stat)
		}
		assert.Equal(t, errsBefore, errorCount(t, srv.Admin()), "no unknown command reached the server")
		require.NoError(t, c.Ping(ctx).Err(), "the server is still up")
	})

	t.Run("namespace", func(t *testing.T) {
		require.NoError(t, srv.Admin().Set(ctx, "other:key", "v", time.Minute).Err())
		before := srv.CommandCalls(t, "get")
		assert.Equal(t, ReasonNamespace, reasonOf(t, c.Get(ctx, "other:key").Err()))
		assert.Equal(t, ReasonNamespace, reasonOf(t, c.Del(ctx, ns+"a", "other:key").Err()))
		assert.Equal(t, before, srv.CommandCalls(t, "get"))
		assert.Zero(t, srv.CommandCalls(t, "del"))
	})

	t.Run("ttl", func(t *testing.T) {
		before := srv.CommandCalls(t, "set")
		assert.Equal(t, ReasonMissingTTL, reasonOf(t, c.Set(ctx, ns+"nottl", "v", 0).Err()))
		assert.Equal(t, ReasonMissingTTL, reasonOf(t, c.SetArgs(ctx, ns+"nottl", "v", redis.SetArgs{KeepTTL: true}).Err()))
		assert.Equal(t, ReasonMissingTTL, reasonOf(t, c.SetNX(ctx, ns+"nottl", "v", redis.KeepTTL).Err()))
		assert.Equal(t, before, srv.CommandCalls(t, "set"))
		assert.Zero(t, srv.Admin().Exists(ctx, ns+"nottl").Val())

		require.NoError(t, c.Set(ctx, ns+"ttl", "v", 10*time.Second).Err())
		require.NoError(t, c.SetNX(ctx, ns+"ttl2", "v", 1500*time.Millisecond).Err())
		for _, k := range []string{ns + "ttl", ns + "ttl2"} {
			pttl := srv.Admin().PTTL(ctx, k).Val()
			assert.Greater(t, pttl, time.Duration(0), "key carries a TTL")
		}
		v, err := c.Get(ctx, ns+"ttl").Result()
		require.NoError(t, err)
		assert.Equal(t, "v", v)
	})

	t.Run("request budget", func(t *testing.T) {
		before := srv.CommandCalls(t, "set")
		err := c.Set(ctx, ns+"big", strings.Repeat("x", 2000), time.Minute).Err()
		assert.Equal(t, ReasonRequestTooLarge, reasonOf(t, err))
		assert.Equal(t, before, srv.CommandCalls(t, "set"))
	})

	t.Run("reply budget", func(t *testing.T) {
		require.NoError(t, srv.Admin().Set(ctx, ns+"huge", strings.Repeat("y", 1000), time.Minute).Err())
		before := srv.CommandCalls(t, "get")
		cmd := c.Get(ctx, ns+"huge")
		r := rejection(t, cmd.Err())
		assert.Equal(t, ReasonReplyTooLarge, r.Reason)
		assert.True(t, r.Sent, "the GET was executed; only the value is withheld")
		assert.Empty(t, cmd.Val())
		assert.Equal(t, before+1, srv.CommandCalls(t, "get"))
		// The range form is refused before sending.
		assert.Equal(t, ReasonReplyTooLarge, reasonOf(t, c.GetRange(ctx, ns+"huge", 0, 999).Err()))
		assert.Zero(t, srv.CommandCalls(t, "getrange"))
		s, err := c.GetRange(ctx, ns+"huge", 0, 9).Result()
		require.NoError(t, err)
		assert.Equal(t, strings.Repeat("y", 10), s)
	})

	t.Run("wrong lane", func(t *testing.T) {
		assert.Equal(t, ReasonWrongLane, reasonOf(t, c.Do(ctx, "function", "list").Err()))
		assert.Equal(t, ReasonWrongLane, reasonOf(t, c.Do(ctx, "config", "get", "maxmemory").Err()))
		assert.Zero(t, srv.CommandCalls(t, "function|list"))
		assert.Zero(t, srv.CommandCalls(t, "config|get"))
	})

	t.Run("pipeline with one bad command sends none", func(t *testing.T) {
		sets, gets := srv.CommandCalls(t, "set"), srv.CommandCalls(t, "get")
		pipe := c.Pipeline()
		setCmd := pipe.Set(ctx, ns+"p1", "v", time.Minute)
		getCmd := pipe.Get(ctx, ns+"p2")
		pipe.Keys(ctx, "*")
		_, err := pipe.Exec(ctx)
		require.ErrorIs(t, err, ErrRejected)
		require.ErrorIs(t, setCmd.Err(), ErrRejected)
		require.ErrorIs(t, getCmd.Err(), ErrRejected)
		assert.Equal(t, sets, srv.CommandCalls(t, "set"))
		assert.Equal(t, gets, srv.CommandCalls(t, "get"))
		assert.Zero(t, srv.CommandCalls(t, "keys"))
		assert.Zero(t, srv.Admin().Exists(ctx, ns+"p1").Val())

		// MULTI/EXEC are not in the catalog: transactions are denied whole.
		_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, ns+"t1", "v", time.Minute)
			return nil
		})
		assert.Equal(t, ReasonUnknownCommand, reasonOf(t, err))
		assert.Zero(t, srv.CommandCalls(t, "multi"))

		pipe = c.Pipeline()
		pipe.Set(ctx, ns+"p1", "v", time.Minute)
		pipe.Get(ctx, ns+"p1")
		cmds, err := pipe.Exec(ctx)
		require.NoError(t, err)
		assert.Equal(t, "v", cmds[1].(*redis.StringCmd).Val())
	})

	t.Run("SELECT passes the guard on a DB>0 client", func(t *testing.T) {
		g2, rec2 := newGuard(t, nil)
		c2 := guardedClient(t, srv, g2, 2)
		require.NoError(t, c2.Set(ctx, ns+"db2", "v", time.Minute).Err())
		adm, _ := rec2.snapshot()
		assert.Contains(t, adm, "SELECT")
		assert.Zero(t, srv.Admin().Exists(ctx, ns+"db2").Val(), "written to DB 2, not DB 0")
	})
}

// A client built without the options caphost requires fails loudly at
// connect instead of sending a command the catalog does not admit.
func TestMisconfiguredClientFailsToConnect(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := testCtx(t)
	for name, opt := range map[string]func(*redis.Options){
		"identity (CLIENT SETINFO)":               func(o *redis.Options) { o.DisableIdentity = false },
		"maint notifications (auto mode default)": func(o *redis.Options) { o.MaintNotificationsConfig = nil },
	} {
		t.Run(name, func(t *testing.T) {
			g, rec := newGuard(t, nil)
			o := &redis.Options{Addr: srv.Addr(), DisableIdentity: true, MaxRetries: -1,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}
			opt(o)
			c := redis.NewClient(o)
			t.Cleanup(func() { _ = c.Close() })
			require.NoError(t, g.Install(c))
			assert.Equal(t, ReasonBlocked, reasonOf(t, c.Ping(ctx).Err()))
			_, rej := rec.snapshot()
			require.NotEmpty(t, rej)
			assert.Contains(t, []string{"CLIENT|SETINFO:blocked", "CLIENT|MAINT_NOTIFICATIONS:blocked"}, rej[0])
		})
	}
	assert.Zero(t, srv.CommandCalls(t, "client|setinfo"))
	assert.Zero(t, srv.CommandCalls(t, "client|maint_notifications"))
}

func TestScriptLaneAllowlist(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := testCtx(t)
	sha, err := srv.Admin().ScriptLoad(ctx, "return redis.call('PTTL', KEYS[1])").Result()
	require.NoError(t, err)
	g, _ := newGuard(t, func(c *Config) {
		c.Lane = policy.LaneScript
		c.Scripts = shaList{sha}
	})
	c := guardedClient(t, srv, g, 0)
	n, err := c.EvalSha(ctx, sha, []string{ns + "k"}).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(-2), n)
	other, err := srv.Admin().ScriptLoad(ctx, "return 1").Result()
	require.NoError(t, err)
	assert.Equal(t, ReasonScriptNotAllowed, reasonOf(t, c.EvalSha(ctx, other, nil).Err()))
	assert.Equal(t, ReasonNamespace, reasonOf(t, c.EvalSha(ctx, sha, []string{"other"}).Err()))
	assert.Equal(t, ReasonBlocked, reasonOf(t, c.Eval(ctx, "return 1", nil).Err()))
	assert.Equal(t, int64(1), srv.CommandCalls(t, "evalsha"))
	assert.Zero(t, srv.CommandCalls(t, "eval"))
}

type shaList []string

func (s shaList) AllowSHA(sha string) bool  { return slices.Contains(s, sha) }
func (s shaList) AllowFunction(string) bool { return false }

func clusterClient(t *testing.T, cl *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	user, pass := cl.AdminUser()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Seeds(), Username: user, Password: pass,
		ClientName:      "caphost-guard-test",
		DisableIdentity: true, MaxRetries: -1,
		// Routing policies fetch COMMAND (blocked) and fan keyless or
		// multi-key commands out across shards; caphost routes by slot only.
		DisableRoutingPolicies:   true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		PoolSize: 2,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestClusterGuard(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := testCtx(t)
	g, rec := newGuard(t, func(c *Config) { c.Cluster = true })
	c := clusterClient(t, cl)
	require.NoError(t, g.Install(c))

	// Same slot through hash tags: admitted and served.
	require.NoError(t, c.Set(ctx, ns+"{u1}:a", "1", time.Minute).Err())
	require.NoError(t, c.Set(ctx, ns+"{u1}:b", "2", time.Minute).Err())
	vals, err := c.MGet(ctx, ns+"{u1}:a", ns+"{u1}:b").Result()
	require.NoError(t, err)
	assert.Equal(t, []any{"1", "2"}, vals)

	// Cross slot: rejected before routing.
	mgets := cl.CommandCalls(t, "mget")
	assert.Equal(t, ReasonCrossSlot, reasonOf(t, c.MGet(ctx, ns+"a", ns+"b").Err()))
	assert.Equal(t, mgets, cl.CommandCalls(t, "mget"))

	// A node client obtained after start-up carries the guard (Install adds
	// it through OnNewNode; go-redis does not copy cluster hooks to nodes).
	var shards atomic.Int64
	err = c.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		shards.Add(1)
		if r := reasonOf(t, node.Do(ctx, "keys", "*").Err()); r != ReasonBlocked {
			t.Errorf("node KEYS: %s", r)
		}
		if r := reasonOf(t, node.Do(ctx, "dbsize").Err()); r != ReasonUnknownCommand {
			t.Errorf("node DBSIZE: %s", r)
		}
		return node.Ping(ctx).Err()
	})
	require.NoError(t, err)
	n := int(shards.Load())
	assert.GreaterOrEqual(t, n, 3, "every primary (and known replica) was visited")
	assert.Zero(t, cl.CommandCalls(t, "keys"))
	assert.Zero(t, cl.CommandCalls(t, "dbsize"))

	adm, rej := rec.snapshot()
	for _, want := range []string{"HELLO", "CLUSTER|SLOTS", "CLIENT|SETNAME", "SET", "MGET"} {
		assert.Contains(t, adm, want)
	}
	// Checked once per command, not once per hook level.
	assert.Equal(t, 1, count(adm, "MGET"))
	assert.Equal(t, 2, count(adm, "SET"))
	// Only the rejections this test provoked: go-redis' own cluster traffic
	// (topology, set-up) is all in the catalog.
	assert.Equal(t, []string{"MGET:cross-slot"}, rej[:1])
	for _, r := range rej[1:] {
		assert.Contains(t, []string{"KEYS:blocked", "unknown:unknown-command"}, r)
	}
	assert.Len(t, rej, 1+2*n)
}

// DESIGN §10 says AddHook on a ClusterClient is inherited by node clients.
// In go-redis v9.23.0 it is not: this pins the fact that makes Install add
// the guard through OnNewNode.
func TestClusterAddHookAloneDoesNotReachNodeClients(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := testCtx(t)
	g, _ := newGuard(t, func(c *Config) { c.Cluster = true })
	c := clusterClient(t, cl)
	c.AddHook(g) // deliberately without Install
	assert.Equal(t, ReasonUnknownCommand, reasonOf(t, c.Do(ctx, "dbsize").Err()), "the cluster-level hook sees cluster commands")
	var visits atomic.Int64
	err := c.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		visits.Add(1)
		return node.Do(ctx, "dbsize").Err()
	})
	require.NoError(t, err, "node clients bypass a cluster-level hook")
	require.GreaterOrEqual(t, visits.Load(), int64(3))
	assert.Equal(t, visits.Load(), cl.CommandCalls(t, "dbsize"))
}

func count(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// NewFailoverClient returns a *redis.Client: the guard covers the primary's
// commands and connection set-up. go-redis' internal sentinel clients carry
// no user hooks (documented in Install); they only speak SENTINEL queries.
func TestSentinelGuard(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := testCtx(t)
	g, rec := newGuard(t, nil)
	user, pass := s.AdminUser()
	duser, dpass := s.DiscoveryUser()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs(),
		SentinelUsername: duser, SentinelPassword: dpass,
		Username: user, Password: pass, ClientName: "caphost-guard-test",
		DisableIdentity: true, MaxRetries: -1,
		// FailoverOptions always disables maintenance notifications.
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, g.Install(c))
	require.NoError(t, c.Set(ctx, ns+"s", "v", time.Minute).Err())
	assert.Equal(t, ReasonBlocked, reasonOf(t, c.Do(ctx, "keys", "*").Err()))
	assert.Equal(t, ReasonMissingTTL, reasonOf(t, c.Set(ctx, ns+"s", "v", 0).Err()))
	assert.Zero(t, s.Primary().CommandCalls(t, "keys"))
	assert.Equal(t, int64(1), s.Primary().CommandCalls(t, "set"))
	adm, _ := rec.snapshot()
	assert.Contains(t, adm, "HELLO")
}

// go-redis writes SUBSCRIBE straight to the connection, past every hook (a
// fact pinned here), so pub/sub callers must gate channels with Check.
func TestPubSubSubscribeBypassesHooks(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := testCtx(t)
	g, _ := newGuard(t, func(c *Config) { c.Lane = policy.LanePubSub })
	c := guardedClient(t, srv, g, 0)
	assert.Equal(t, ReasonNamespace, reasonOf(t, g.Check([]any{"subscribe", "foreign"})))
	require.NoError(t, g.Check([]any{"subscribe", ns + "events"}))
	ps := c.Subscribe(ctx, ns+"events")
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), srv.CommandCalls(t, "subscribe"), "SUBSCRIBE did not pass a ProcessHook")
	assert.Equal(t, ReasonWrongLane, reasonOf(t, c.Get(ctx, ns+"a").Err()))
}
