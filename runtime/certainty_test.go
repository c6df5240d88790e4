package runtime

import (
	"context"
	"errors"
	"strings"
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

// recorder is an Observer that keeps the outcomes it was told about.
type recorder struct {
	nopObserver
	outcomes [8]atomic.Int32
}

func (r *recorder) CommandDone(_ string, _ policy.Lane, _ string, o certainty.Outcome, _ time.Duration) {
	if o.Valid() {
		r.outcomes[o].Add(1)
	}
}

// regularOnly runs fn against the regular lane of a fresh runtime on addr.
func regular(t *testing.T, addr string, mut func(*policy.Deployment)) (redis.UniversalClient, *recorder) {
	t.Helper()
	d := testDeployment("main", standalone(addr))
	if mut != nil {
		mut(&d)
	}
	rec := &recorder{}
	r := newRuntime(t, testConfig(d), WithObserver(rec))
	return laneClient(t, r, policy.RoleCoordination, policy.LaneRegular), rec
}

func setEX(ctx context.Context, c redis.UniversalClient, key string) error {
	return c.Set(ctx, key, "v", time.Minute).Err()
}

// TestCertaintyWithRealFailures drives every certainty class through a
// runtime lane with a real failure and checks the outcome, the
// Retryable/Ambiguous invariant, and — where it matters — whether the
// server saw the command.
func TestCertaintyWithRealFailures(t *testing.T) {
	srv := redistest.StartStandalone(t)
	admin := srv.Admin()

	t.Run("applied and nil reply", func(t *testing.T) {
		c, rec := regular(t, srv.Addr(), nil)
		ctx := ctxT(t, 5*time.Second)
		require.NoError(t, setEX(ctx, c, testKey("applied")))
		err := c.Get(ctx, testKey("absent")).Err()
		require.ErrorIs(t, err, redis.Nil)
		assert.Equal(t, int32(2), rec.outcomes[certainty.Applied].Load())
	})

	t.Run("in-flight limit: OVERLOADED_BEFORE_SEND", func(t *testing.T) {
		proxy := redistest.NewProxy(t, srv.Addr())
		c, _ := regular(t, proxy.Addr(), func(d *policy.Deployment) {
			d.Lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 1, MaxInFlight: 1}
		})
		ctx := ctxT(t, 5*time.Second)
		require.NoError(t, c.Ping(ctx).Err())
		proxy.Stall()
		up, _ := proxy.Bytes()
		held := make(chan error, 1)
		go func() { held <- c.Get(context.Background(), testKey("held")).Err() }()
		waitSent(t, proxy, up) // the held GET has its slot and its connection
		before := srv.CommandCalls(t, "set")
		err := setEX(ctx, c, testKey("overloaded"))
		assert.Equal(t, certainty.OverloadedBeforeSend, outcomeOf(t, err))
		assert.ErrorIs(t, err, ErrOverloaded)
		assert.ErrorIs(t, err, certainty.ErrOverloadedBeforeSend)
		assert.Equal(t, before, srv.CommandCalls(t, "set"), "never sent")
		proxy.Passthrough()
		assert.ErrorIs(t, <-held, redis.Nil)
	})

	t.Run("pool timeout: OVERLOADED_BEFORE_SEND", func(t *testing.T) {
		proxy := redistest.NewProxy(t, srv.Addr())
		c, _ := regular(t, proxy.Addr(), func(d *policy.Deployment) {
			d.Lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 1, MaxInFlight: 2}
		})
		ctx := ctxT(t, 5*time.Second)
		require.NoError(t, c.Ping(ctx).Err())
		proxy.Stall()
		up, _ := proxy.Bytes()
		held := make(chan error, 1)
		go func() { held <- c.Get(context.Background(), testKey("held")).Err() }()
		waitSent(t, proxy, up) // the held GET has its slot and its connection
		err := setEX(ctx, c, testKey("pool"))
		assert.Equal(t, certainty.OverloadedBeforeSend, outcomeOf(t, err))
		assert.ErrorIs(t, err, redis.ErrPoolTimeout)
		proxy.Passthrough()
		<-held
	})

	t.Run("dial refused: UNAVAILABLE_BEFORE_SEND", func(t *testing.T) {
		proxy := redistest.NewProxy(t, srv.Addr())
		proxy.Refuse()
		c, _ := regular(t, proxy.Addr(), nil)
		before := srv.CommandCalls(t, "set")
		err := setEX(ctxT(t, 5*time.Second), c, testKey("refused"))
		assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
		assert.ErrorIs(t, err, certainty.ErrUnavailableBeforeSend)
		assert.Equal(t, before, srv.CommandCalls(t, "set"))
	})

	t.Run("killed server: UNAVAILABLE_BEFORE_SEND", func(t *testing.T) {
		dead := redistest.StartStandalone(t)
		addr := dead.Addr()
		dead.Kill()
		c, _ := regular(t, addr, nil)
		err := setEX(ctxT(t, 5*time.Second), c, testKey("dead"))
		assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
	})

	t.Run("handshake stalls: UNAVAILABLE_BEFORE_SEND", func(t *testing.T) {
		proxy := redistest.NewProxy(t, srv.Addr())
		proxy.Stall() // HELLO reaches Redis, its reply never comes back
		c, _ := regular(t, proxy.Addr(), func(d *policy.Deployment) {
			d.Timeouts.Command = 300 * time.Millisecond
			d.Timeouts.Acquire = 100 * time.Millisecond
		})
		before := srv.CommandCalls(t, "set")
		err := setEX(ctxT(t, 5*time.Second), c, testKey("handshake"))
		assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
		proxy.Passthrough()
		assert.Equal(t, before, srv.CommandCalls(t, "set"), "the SET was never written")
	})

	t.Run("stall after write: INDETERMINATE and really applied", func(t *testing.T) {
		proxy := redistest.NewProxy(t, srv.Addr())
		c, rec := regular(t, proxy.Addr(), func(d *policy.Deployment) {
			d.Timeouts.Command = 300 * time.Millisecond
			d.Timeouts.Acquire = 100 * time.Millisecond
		})
		ctx := ctxT(t, 5*time.Second)
		require.NoError(t, c.Ping(ctx).Err())
		proxy.Stall()
		key := testKey("stalled")
		err := setEX(ctx, c, key)
		assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err))
		assert.ErrorIs(t, err, certainty.ErrIndeterminate)
		assert.Equal(t, int32(1), rec.outcomes[certainty.Indeterminate].Load())
		assert.NotContains(t, err.Error(), key)
		// The proxy forwards the SET on its own goroutine: wait for Redis to
		// have it rather than assume it already does.
		require.Eventually(t, func() bool { return admin.Get(ctx, key).Val() == "v" }, 4*time.Second, 10*time.Millisecond,
			"the write reached the server")
	})

	t.Run("caller deadline after write: INDETERMINATE", func(t *testing.T) {
		proxy := redistest.NewProxy(t, srv.Addr())
		c, _ := regular(t, proxy.Addr(), nil)
		require.NoError(t, c.Ping(ctxT(t, 5*time.Second)).Err())
		proxy.Stall()
		// A second is the time the SET has to be written before the
		// deadline; the proxy's count proves it was.
		up, _ := proxy.Bytes()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		key := testKey("deadline")
		err := setEX(ctx, c, key)
		assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err))
		sent, _ := proxy.Bytes()
		assert.Greater(t, sent, up, "the SET was written before the deadline")
		require.Eventually(t, func() bool { return admin.Exists(context.Background(), key).Val() == 1 }, 10*time.Second, 10*time.Millisecond)
	})

	t.Run("reset after write: INDETERMINATE", func(t *testing.T) {
		proxy := redistest.NewProxy(t, srv.Addr())
		c, _ := regular(t, proxy.Addr(), nil)
		ctx := ctxT(t, 5*time.Second)
		require.NoError(t, c.Ping(ctx).Err())
		key := testKey("reset")
		// Exactly the SET's bytes reach Redis, then the connection is reset.
		proxy.ResetAfter(len(key) + 40)
		err := c.Set(ctx, key, "v", time.Minute).Err()
		assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err))
	})

	t.Run("WRONGTYPE: REJECTED", func(t *testing.T) {
		c, _ := regular(t, srv.Addr(), nil)
		ctx := ctxT(t, 5*time.Second)
		key := testKey("list")
		require.NoError(t, admin.LPush(ctx, key, "x").Err())
		err := c.Get(ctx, key).Err()
		assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
		assert.NotContains(t, err.Error(), "Operation against")
		var rerr redis.Error
		assert.ErrorAs(t, err, &rerr, "the server error stays reachable")
	})

	t.Run("guard rejection: REJECTED and not sent", func(t *testing.T) {
		c, _ := regular(t, srv.Addr(), nil)
		ctx := ctxT(t, 5*time.Second)
		before := srv.CommandCalls(t, "set")
		// A SET without TTL violates the TTL duty.
		err := c.Set(ctx, testKey("nottl"), "v", 0).Err()
		assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
		var rej *guard.Rejection
		assert.ErrorAs(t, err, &rej)
		assert.Equal(t, before, srv.CommandCalls(t, "set"))
	})

	t.Run("BUSY: NOT_APPLIED", func(t *testing.T) {
		busy := redistest.StartStandalone(t, redistest.WithConfig("busy-reply-threshold", "50"))
		c, _ := regular(t, busy.Addr(), nil)
		ctx := ctxT(t, 10*time.Second)
		require.NoError(t, c.Ping(ctx).Err())
		// SCRIPT KILL needs a connection opened before the server is busy
		// (a new connection's handshake would get BUSY too).
		killer := busy.Admin().Conn()
		defer killer.Close()
		require.NoError(t, killer.Ping(ctx).Err())
		loop := make(chan error, 1)
		go func() {
			loop <- busy.Admin().Eval(context.Background(), "while true do end", nil).Err()
		}()
		require.Eventually(t, func() bool {
			perr := killer.Ping(ctx).Err()
			return perr != nil && strings.HasPrefix(perr.Error(), "BUSY")
		}, 3*time.Second, 20*time.Millisecond)
		err := setEX(ctx, c, testKey("busy"))
		assert.Equal(t, certainty.NotApplied, outcomeOf(t, err))
		assert.Contains(t, err.Error(), "BUSY")
		require.NoError(t, killer.ScriptKill(ctx).Err())
		<-loop
		assert.Equal(t, int64(0), busy.Admin().Exists(ctx, testKey("busy")).Val())
	})

	t.Run("READONLY replica: NOT_APPLIED", func(t *testing.T) {
		replica := redistest.StartStandalone(t)
		ctx := ctxT(t, 10*time.Second)
		host, port, _ := strings.Cut(srv.Addr(), ":")
		require.NoError(t, replica.Admin().SlaveOf(ctx, host, port).Err())
		c, _ := regular(t, replica.Addr(), nil)
		err := setEX(ctx, c, testKey("ro"))
		assert.Equal(t, certainty.NotApplied, outcomeOf(t, err))
		assert.Contains(t, err.Error(), "READONLY")
	})

	t.Run("OOM: NOT_APPLIED", func(t *testing.T) {
		full := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
		ctx := ctxT(t, 10*time.Second)
		// A limit far below what the server uses: filling up to a 1 MB
		// limit left it at the edge, where freeing the refused command's
		// own query buffer could let the next write in.
		require.NoError(t, full.Admin().ConfigSet(ctx, "maxmemory", "1").Err())
		err := full.Admin().Set(ctx, testKey("fill"), "v", time.Minute).Err()
		require.Error(t, err)
		require.Contains(t, err.Error(), "OOM")
		c, _ := regular(t, full.Addr(), nil)
		err = setEX(ctx, c, testKey("oom"))
		assert.Equal(t, certainty.NotApplied, outcomeOf(t, err))
		assert.Contains(t, err.Error(), "OOM")
	})
}

func TestCertaintyACL(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithACL(redistest.ACLUser{
		Name: "app", Password: "app-secret-password", Rules: []string{"~ca:*", "&*", "+@all", "-set"},
	}))
	cred := func(pass string) func(*policy.Deployment) {
		return func(d *policy.Deployment) {
			d.Default = policy.Credential{User: "app", Password: policy.NewSecret([]byte(pass))}
		}
	}

	t.Run("NOPERM: REJECTED", func(t *testing.T) {
		c, _ := regular(t, srv.Addr(), cred("app-secret-password"))
		ctx := ctxT(t, 5*time.Second)
		require.NoError(t, c.Ping(ctx).Err())
		err := setEX(ctx, c, testKey("noperm"))
		assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
		assert.Contains(t, err.Error(), "NOPERM")
	})

	t.Run("WRONGPASS at handshake: UNAVAILABLE_BEFORE_SEND", func(t *testing.T) {
		c, _ := regular(t, srv.Addr(), cred("wrong-password"))
		err := c.Get(ctxT(t, 5*time.Second), testKey("x")).Err()
		assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
		assert.NotContains(t, err.Error(), "wrong-password")
		assert.True(t, errors.Is(err, certainty.ErrUnavailableBeforeSend))
	})
}

// waitSent waits until proxy has forwarded more than up client bytes (its
// count before a call started in another goroutine), so that the call has
// written its command and certainly holds its in-flight slot and its pooled
// connection.
func waitSent(t *testing.T, proxy *redistest.Proxy, up int64) {
	t.Helper()
	require.Eventually(t, func() bool { n, _ := proxy.Bytes(); return n > up }, 10*time.Second, time.Millisecond,
		"the call never reached the proxy")
}
