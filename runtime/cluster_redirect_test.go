package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// redirectCounter counts the redirects the runtime followed (and those it
// could not), by kind.
type redirectCounter struct {
	nopObserver
	mu         sync.Mutex
	followed   map[string]int
	unfollowed map[string]int
}

func newRedirectCounter() *redirectCounter {
	return &redirectCounter{followed: map[string]int{}, unfollowed: map[string]int{}}
}

func (o *redirectCounter) ClusterRedirect(_ string, _ policy.Lane, kind string, followed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if followed {
		o.followed[kind]++
	} else {
		o.unfollowed[kind]++
	}
}

func (o *redirectCounter) counts() (followed, unfollowed map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f, u := map[string]int{}, map[string]int{}
	for k, v := range o.followed {
		f[k] = v
	}
	for k, v := range o.unfollowed {
		u[k] = v
	}
	return f, u
}

// cmdStat is one command's INFO commandstats counters on one node: calls
// executed, and calls refused before execution (MOVED/ASK redirects, ACL,
// CLUSTERDOWN ... count there in Redis 7.0).
type cmdStat struct{ calls, rejected int64 }

func commandStat(t *testing.T, s *redistest.Server, command string) cmdStat {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := s.Admin().Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	var st cmdStat
	for _, line := range strings.Split(info, "\n") {
		fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "rejected_calls":
				st.rejected = n
			}
		}
	}
	return st
}

func (a cmdStat) minus(b cmdStat) cmdStat { return cmdStat{a.calls - b.calls, a.rejected - b.rejected} }

// redirectSetup is a 3+3 cluster, a runtime on it, and one key whose slot
// the test moves to another primary.
type redirectSetup struct {
	cl       *redistest.Cluster
	obs      *redirectCounter
	c        redis.UniversalClient
	key      string
	slot     int
	from, to *redistest.Server
}

func newRedirectSetup(t *testing.T, name string, tune func(*policy.Deployment)) *redirectSetup {
	t.Helper()
	cl := redistest.StartCluster(t)
	d := testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})
	if tune != nil {
		tune(&d)
	}
	obs := newRedirectCounter()
	r := newRuntime(t, testConfig(d), WithObserver(obs))
	s := &redirectSetup{cl: cl, obs: obs, c: laneClient(t, r, policy.RoleCoordination, policy.LaneRegular), key: testKey(name)}
	ctx := ctxT(t, 10*time.Second)
	slot, err := cl.Admin().ClusterKeySlot(ctx, s.key).Result()
	require.NoError(t, err)
	s.slot = int(slot)
	s.from = cl.SlotOwner(t, s.slot)
	for _, p := range cl.Primaries() {
		if p != s.from {
			s.to = p
			break
		}
	}
	// The runtime's slot map is loaded, and a connection to the source
	// open, before the operator moves anything.
	require.ErrorIs(t, s.c.Get(ctx, s.key).Err(), redis.Nil)
	return s
}

// keyOn returns a test key whose slot's primary address satisfies ok.
func (s *redirectSetup) keyOn(t *testing.T, ok func(addr string) bool) string {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	for i := range 1000 {
		k := testKey(fmt.Sprintf("on-%d", i))
		owner, err := s.cl.Admin().MasterForKey(ctx, k)
		require.NoError(t, err)
		if ok(owner.Options().Addr) {
			return k
		}
	}
	require.FailNow(t, "no key found on the wanted primary")
	return ""
}

// sibling returns a key in the same slot as s.key (same hash tag).
func (s *redirectSetup) sibling(i int) string {
	return strings.Replace(s.key, ":k", fmt.Sprintf(":k%d", i), 1)
}

// TestClusterFollowsMovedOnce moves a slot behind the runtime's back: the
// next SET reaches the old owner, which answers MOVED without running it,
// and the runtime sends it once to the new owner, where it runs once.
func TestClusterFollowsMovedOnce(t *testing.T) {
	s := newRedirectSetup(t, "moved", nil)
	ctx := ctxT(t, 20*time.Second)
	s.cl.MigrateSlot(t, s.slot, s.to)
	fromBase, toBase := commandStat(t, s.from, "set"), commandStat(t, s.to, "set")

	require.NoError(t, s.c.Set(ctx, s.key, "v1", time.Minute).Err(), "MOVED is followed")

	assert.Equal(t, cmdStat{calls: 0, rejected: 1}, commandStat(t, s.from, "set").minus(fromBase), "old owner: one MOVED, nothing run")
	assert.Equal(t, cmdStat{calls: 1, rejected: 0}, commandStat(t, s.to, "set").minus(toBase), "new owner: run exactly once")
	v, err := s.to.Admin().Get(ctx, s.key).Result()
	require.NoError(t, err)
	assert.Equal(t, "v1", v)
	followed, unfollowed := s.obs.counts()
	assert.Equal(t, map[string]int{RedirectMoved: 1}, followed)
	assert.Empty(t, unfollowed)

	// go-redis reloaded the map on the MOVED: the next call routes directly.
	require.Eventually(t, func() bool {
		before := commandStat(t, s.from, "get")
		_ = s.c.Get(ctx, s.key).Err()
		return commandStat(t, s.from, "get") == before
	}, 5*time.Second, 50*time.Millisecond, "slot map reloaded")

	// A pipeline: the moved commands are followed in one pipeline on the
	// new owner, the others are untouched. Move the slot back first.
	s.cl.MigrateSlot(t, s.slot, s.from)
	other := s.keyOn(t, func(a string) bool { return a != s.from.Addr() && a != s.to.Addr() })
	fromBase, toBase = commandStat(t, s.from, "set"), commandStat(t, s.to, "set")
	// Counted from here: a GET of the loop above may itself have met the
	// MOVED (go-redis reloads the map in the background) and been followed.
	followed, _ = s.obs.counts()
	movedBase := followed[RedirectMoved]
	pipe := s.c.Pipeline()
	a := pipe.Set(ctx, s.key, "p1", time.Minute)
	b := pipe.Set(ctx, s.sibling(1), "p2", time.Minute)
	o := pipe.Set(ctx, other, "p3", time.Minute)
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	for _, c := range []*redis.StatusCmd{a, b, o} {
		assert.NoError(t, c.Err())
		assert.Equal(t, "OK", c.Val())
	}
	assert.Equal(t, cmdStat{calls: 2, rejected: 0}, commandStat(t, s.from, "set").minus(fromBase), "the slot's owner again ran both once")
	toDelta := commandStat(t, s.to, "set").minus(toBase)
	assert.Equal(t, int64(2), toDelta.rejected, "the old owner answered MOVED twice")
	followed, _ = s.obs.counts()
	assert.Equal(t, 2, followed[RedirectMoved]-movedBase, "each moved command of the pipeline followed once")
}

// TestClusterFollowsAskDuringMigration opens a slot migration and moves one
// key: the source answers ASK for it, and the runtime sends ASKING + the
// command once to the target; a key still on the source is served there
// without a redirect. After the operator finishes, MOVED takes over.
func TestClusterFollowsAskDuringMigration(t *testing.T) {
	s := newRedirectSetup(t, "ask", nil)
	ctx := ctxT(t, 20*time.Second)
	moved, kept := s.key, s.sibling(1)
	require.NoError(t, s.c.Set(ctx, moved, "before", time.Minute).Err())
	require.NoError(t, s.c.Set(ctx, kept, "kept", time.Minute).Err())

	m := s.cl.BeginSlotMigration(t, s.slot, s.to)
	// Move only `moved`: MIGRATE it by hand through the helper's batches of
	// one, checking which key went.
	require.Equal(t, 1, m.MigrateKeys(t, 1))
	if n, err := s.from.Admin().Exists(ctx, moved).Result(); err == nil && n == 1 {
		moved, kept = kept, moved // GETKEYSINSLOT picked the other one
	}
	fromBase, toBase := commandStat(t, s.from, "set"), commandStat(t, s.to, "set")
	askingBase := commandStat(t, s.to, "asking")

	require.NoError(t, s.c.Set(ctx, moved, "after", time.Minute).Err(), "ASK is followed")
	require.NoError(t, s.c.Set(ctx, kept, "kept2", time.Minute).Err(), "a key not migrated yet is served by the source")

	assert.Equal(t, cmdStat{calls: 1, rejected: 1}, commandStat(t, s.from, "set").minus(fromBase), "source: one ASK, one run")
	assert.Equal(t, cmdStat{calls: 1}, commandStat(t, s.to, "set").minus(toBase), "target: the ASK'd SET ran once")
	assert.Equal(t, int64(1), commandStat(t, s.to, "asking").minus(askingBase).calls)
	followed, unfollowed := s.obs.counts()
	assert.Equal(t, map[string]int{RedirectAsk: 1}, followed)
	assert.Empty(t, unfollowed)

	// The rest of the slot moves; every key reads back through the runtime.
	m.Finish(t)
	for k, want := range map[string]string{moved: "after", kept: "kept2"} {
		v, err := s.c.Get(ctx, k).Result()
		require.NoError(t, err, k)
		assert.Equal(t, want, v)
	}
}

// TestClusterRedirectTimeoutStaysIndeterminate follows a MOVED to a target
// that is paused after the write: the call is INDETERMINATE, and the SET is
// not sent again — after the target resumes it has run it exactly once.
func TestClusterRedirectTimeoutStaysIndeterminate(t *testing.T) {
	s := newRedirectSetup(t, "moved-timeout", func(d *policy.Deployment) {
		// Long enough that a loaded machine still reaches the follow's
		// write before the deadline (a shorter one failed under load
		// before sending: UNAVAILABLE_BEFORE_SEND); only the paused
		// target's silence may end the call.
		d.Timeouts.Command = 2 * time.Second
		d.Timeouts.Acquire = time.Second
		// Room for the three idle connections to the target below.
		d.Lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 4, MaxInFlight: 4}
	})
	ctx := ctxT(t, 20*time.Second)
	// Idle pooled connections to the target, so the follow writes at once
	// (a fresh dial's handshake would time out first: before send). Three,
	// not one: the MOVED also starts go-redis's background slot-map reload,
	// which may take one of the target's connections (and hang on the
	// paused node) before the follow gets there — on a loaded runner it
	// did, and the follow failed before sending.
	onTarget := s.keyOn(t, func(a string) bool { return a == s.to.Addr() })
	require.ErrorIs(t, s.c.Get(ctx, onTarget).Err(), redis.Nil)
	cc, ok := s.c.(*redis.ClusterClient)
	require.True(t, ok, "the lane client of a Cluster deployment is a ClusterClient")
	node, err := cc.MasterForKey(ctx, onTarget)
	require.NoError(t, err)
	require.Equal(t, s.to.Addr(), node.Options().Addr)
	var conns []*redis.Conn
	for range 3 {
		c := node.Conn()
		require.NoError(t, c.Ping(ctx).Err())
		conns = append(conns, c)
	}
	for _, c := range conns {
		require.NoError(t, c.Close()) // back to the pool, idle
	}
	s.cl.MigrateSlot(t, s.slot, s.to)
	toBase := commandStat(t, s.to, "set")

	s.to.Pause()
	err = s.c.Set(ctx, s.key, "v", time.Minute).Err()
	time.Sleep(300 * time.Millisecond) // room for a (forbidden) resend
	s.to.Resume()

	assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err), "%v", err)
	require.Eventually(t, func() bool { return commandStat(t, s.to, "set").calls > toBase.calls }, 5*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, cmdStat{calls: 1}, commandStat(t, s.to, "set").minus(toBase), "the followed SET was sent exactly once")
	followed, _ := s.obs.counts()
	assert.Equal(t, 1, followed[RedirectMoved])
}

func TestRedirectOf(t *testing.T) {
	moved := redis.Error(protoErr("MOVED 3999 127.0.0.1:6381"))
	for _, tc := range []struct {
		name string
		err  error
		want redirect
		ok   bool
	}{
		{"nil", nil, redirect{}, false},
		{"moved", moved, redirect{addr: "127.0.0.1:6381"}, true},
		{"ask", protoErr("ASK 12 10.0.0.2:7000"), redirect{ask: true, addr: "10.0.0.2:7000"}, true},
		{"wrapped", fmt.Errorf("x: %w", moved), redirect{addr: "127.0.0.1:6381"}, true},
		{"ipv6", protoErr("MOVED 1 ::1:7000"), redirect{addr: "[::1]:7000"}, true},
		{"other reply", protoErr("CLUSTERDOWN The cluster is down"), redirect{}, false},
		{"not a reply", errors.New("MOVED 1 127.0.0.1:1"), redirect{}, false},
		{"malformed", protoErr("MOVED 1"), redirect{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := redirectOf(tc.err)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

// protoErr is a server error reply as tests can build one: a redis.Error
// (its RedisError marker) with the reply's text.
type protoErr string

func (e protoErr) Error() string { return string(e) }
func (protoErr) RedisError()     {}

// FuzzRedirectOf: a server error reply of any text never panics the
// redirect parser, and a redirect it accepts names a host:port go-redis
// can dial (normalised the way go-redis keys its node clients).
func FuzzRedirectOf(f *testing.F) {
	for _, s := range []string{"MOVED 3999 127.0.0.1:6381", "ASK 1 ::1:7000", "MOVED 1 [::1]:7000", "MOVED 1 host", "ASK", "MOVED  x:1", "CLUSTERDOWN x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		rd, ok := redirectOf(protoErr(text))
		if !ok {
			return
		}
		require.True(t, strings.HasPrefix(text, "MOVED ") || strings.HasPrefix(text, "ASK "))
		assert.Equal(t, strings.HasPrefix(text, "ASK "), rd.ask)
		if rd.addr == "" {
			return // no port: target() reports it unfollowed, nothing is sent
		}
		_, _, err := net.SplitHostPort(rd.addr)
		assert.NoError(t, err, "%q -> %q", text, rd.addr)
	})
}
