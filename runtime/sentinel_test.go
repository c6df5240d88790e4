package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"net"
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
)

// awaitRuns waits until the route has run more than n discoveries.
func awaitRuns(t *testing.T, route *sentinelRoute, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for route.runs.Load() <= n {
		if time.Now().After(deadline) {
			t.Fatalf("no discovery after run %d within 10 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSentinelForgedSwitchMasterDoesNotSwitch: a +switch-master naming a
// replica — one Sentinel's claim — makes caphost ask all the Sentinels
// again; they still agree on the primary, so nothing moves.
func TestSentinelForgedSwitchMasterDoesNotSwitch(t *testing.T) {
	sen := redistest.StartSentinel(t)
	obs := &discoveryRecorder{}
	r := newRuntime(t, testConfig(sentinelTestDeployment(sen)), WithObserver(obs))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	require.NoError(t, dep.Ping(ctxT(t, 5*time.Second)))
	route := r.sentinels[0]
	before := route.cur.Load()
	require.Equal(t, sen.Primary().Addr(), before.addr)

	replica := sen.Replicas()[0]
	runs := route.runs.Load()
	// A Sentinel accepts no PUBLISH from clients, so the forged message is
	// handed to the route's handler as its subscription would.
	route.onSwitchMaster(fmt.Sprintf("other 127.0.0.1 %d 127.0.0.1 %d", sen.Primary().Port(), replica.Port()))
	route.onSwitchMaster("garbage")
	assert.Equal(t, runs, route.runs.Load(), "another master's message and garbage are ignored")
	route.onSwitchMaster(fmt.Sprintf("%s 127.0.0.1 %d 127.0.0.1 %d", sen.MasterName(), sen.Primary().Port(), replica.Port()))
	awaitRuns(t, route, runs)
	v := route.last.Load()
	require.NotNil(t, v)
	assert.Equal(t, "agreed", v.Outcome.String())
	assert.Equal(t, before.addr, v.Primary)
	assert.Same(t, before, route.cur.Load(), "the primary did not move")
	got := obs.results()
	require.NotEmpty(t, got)
	assert.Equal(t, SentinelDiscovered, got[0], "the observer saw the first primary installed")
	assert.Equal(t, SentinelUnchanged, got[len(got)-1], "and the forged message's discovery changes nothing")
	assert.NotContains(t, got, SentinelSwitched)
	assert.NotZero(t, route.lastSwitch.Load(), "the message was seen")
	require.NoError(t, dep.Ping(ctxT(t, 5*time.Second)))
}

// TestSentinelDiscoveryHasItsOwnCredential: the Sentinels know only their
// discovery user and the data nodes only the data users. Discovery with
// the discovery credential and data with the data credential work; a
// configuration that gives the Sentinels the data credential finds no
// primary, and the call fails before anything was sent.
func TestSentinelDiscoveryHasItsOwnCredential(t *testing.T) {
	app := redistest.ACLUser{Name: "app", Password: "app-secret-0123456789", Rules: []string{"~*", "&*", "+@all"}}
	sen := redistest.StartSentinel(t, redistest.WithACL(app))
	discUser, discPass := sen.DiscoveryUser()
	require.NotEmpty(t, discUser)

	deployment := func(sentinelUser, sentinelPass string) policy.Deployment {
		d := sentinelTestDeployment(sen)
		d.Topology = &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs(),
			Auth: policy.Credential{User: sentinelUser, Password: policy.NewSecret([]byte(sentinelPass))}}
		d.Default = policy.Credential{User: app.Name, Password: policy.NewSecret([]byte(app.Password))}
		return d
	}

	r := newRuntime(t, testConfig(deployment(discUser, discPass)))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	require.NoError(t, dep.Ping(ctxT(t, 5*time.Second)))

	wrong := newRuntime(t, testConfig(deployment(app.Name, app.Password)))
	dep, err = wrong.Role(policy.RoleCoordination)
	require.NoError(t, err)
	err = dep.Ping(ctxT(t, 5*time.Second))
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoPrimary)
	assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
	v := wrong.sentinels[0].last.Load()
	require.NotNil(t, v)
	assert.Zero(t, v.Responded, "every Sentinel refused the data credential")
	assert.GreaterOrEqual(t, v.Failed, 2, "settled once no quorum was possible")
	assert.Nil(t, wrong.sentinels[0].cur.Load())
}

// TestSentinelChannelsHaveTheirOwnTLS: every server speaks TLS only.
// Discovery uses the Sentinel TLS settings and data the data TLS settings:
// with both set the deployment works; with only the data channel's TLS the
// Sentinels cannot be asked, and with only the Sentinel channel's the agreed
// primary cannot be confirmed — in both cases no primary is installed and
// the call fails before anything was sent.
func TestSentinelChannelsHaveTheirOwnTLS(t *testing.T) {
	sen := redistest.StartSentinel(t, redistest.WithTLS())
	m := sen.TLS()
	on := policy.TLSConfig{Enabled: true, CAFile: m.CAFile, ServerName: m.ServerName,
		CertFile: m.ClientCertFile, KeyFile: m.ClientKeyFile}
	deployment := func(sentinelTLS, dataTLS policy.TLSConfig) policy.Deployment {
		d := sentinelTestDeployment(sen)
		d.Topology = &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs(), TLS: sentinelTLS}
		d.TLS = dataTLS
		return d
	}
	for _, tc := range []struct {
		name              string
		sentinel, data    policy.TLSConfig
		works             bool
		sentinelsAnswered bool
	}{
		{name: "both", sentinel: on, data: on, works: true, sentinelsAnswered: true},
		{name: "data only", sentinel: policy.TLSConfig{}, data: on},
		{name: "sentinel only", sentinel: on, data: policy.TLSConfig{}, sentinelsAnswered: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRuntime(t, testConfig(deployment(tc.sentinel, tc.data)))
			dep, err := r.Role(policy.RoleCoordination)
			require.NoError(t, err)
			err = dep.Ping(ctxT(t, 5*time.Second))
			v := r.sentinels[0].last.Load()
			require.NotNil(t, v)
			if tc.works {
				require.NoError(t, err)
				assert.Equal(t, sen.Primary().Addr(), r.sentinels[0].cur.Load().addr)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNoPrimary)
			assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
			assert.Nil(t, r.sentinels[0].cur.Load())
			if tc.sentinelsAnswered {
				assert.Equal(t, "agreed", v.Outcome.String(), "the Sentinels agreed; ROLE could not confirm")
			} else {
				assert.Zero(t, v.Responded)
			}
		})
	}
}

// newWorkerRoute is a route without Sentinels whose discoveries are
// discover: for testing the worker's scheduling alone.
func newWorkerRoute(discover func(context.Context) bool) *sentinelRoute {
	r := &sentinelRoute{
		deployment: "w", log: slog.New(slog.DiscardHandler),
		wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1),
		flight: make(chan struct{}), changed: make(chan struct{}),
		dialers: make(map[policy.Lane]*sentinelDialer),
	}
	r.discoverFn = discover
	return r
}

// TestSentinelDiscoveryIsSingleFlight: however many triggers arrive while a
// discovery runs, one more runs after it, never two at once.
func TestSentinelDiscoveryIsSingleFlight(t *testing.T) {
	entered := make(chan int, 4)
	release := make(chan struct{})
	var running, most, runs atomic.Int64
	r := newWorkerRoute(func(ctx context.Context) bool {
		n := runs.Add(1)
		c := running.Add(1)
		for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
		}
		entered <- int(n)
		select {
		case <-release:
		case <-ctx.Done():
		}
		running.Add(-1)
		return false
	})
	t.Cleanup(func() { require.NoError(t, r.close()) })

	r.trigger(false)
	require.Equal(t, 1, <-entered)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.trigger(i%2 == 0) // failures and +switch-master alike
		}()
	}
	wg.Wait()
	release <- struct{}{}
	require.Equal(t, 2, <-entered, "the triggers coalesced into one more discovery")
	assert.Zero(t, len(r.wake)+len(r.urgent), "nothing else is queued behind it")
	release <- struct{}{}
	assert.Equal(t, int64(1), most.Load(), "never two discoveries at once")
	assert.Equal(t, int64(2), runs.Load())
}

// TestSentinelCloseStopsTheWorker: close ends a running discovery's
// context, waits for the worker, wakes dialers waiting for a primary, and
// refuses later triggers.
func TestSentinelCloseStopsTheWorker(t *testing.T) {
	entered := make(chan struct{}, 1)
	r := newWorkerRoute(func(ctx context.Context) bool {
		entered <- struct{}{}
		<-ctx.Done()
		return false
	})
	waited := make(chan error, 1)
	go func() {
		_, err := r.primary(context.Background())
		waited <- err
	}()
	<-entered
	require.NoError(t, r.close())
	require.Error(t, <-waited, "a dialer waiting for the first primary is released")
	require.NoError(t, r.close(), "idempotent")
	r.trigger(true)
	_, err := r.primary(context.Background())
	assert.ErrorIs(t, err, redis.ErrClosed)
}

// TestSentinelConnOfAReplacedPrimaryFailsTheReuseCheck: go-redis's reuse
// check refuses a connection dialled to an earlier generation.
func TestSentinelConnOfAReplacedPrimaryFailsTheReuseCheck(t *testing.T) {
	r := newWorkerRoute(func(context.Context) bool { return false })
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	r.cur.Store(&sentinelTarget{addr: "10.0.0.1:6379", gen: 1})
	c := &sentinelConn{Conn: a, route: r, gen: 1}
	raw, err := c.SyscallConn()
	require.NoError(t, err, "current generation: checked as go-redis would (no socket below a pipe)")
	require.NoError(t, raw.Read(func(uintptr) bool { t.Fatal("no system call"); return true }))
	r.cur.Store(&sentinelTarget{addr: "10.0.0.2:6379", gen: 2})
	_, err = c.SyscallConn()
	assert.ErrorIs(t, err, errStaleConn)
}

// discoveryRecorder records the Sentinel discovery results a runtime
// reports to its Observer.
type discoveryRecorder struct {
	nopObserver
	mu  sync.Mutex
	got []string
}

func (o *discoveryRecorder) SentinelDiscovery(deployment, result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, deployment+":"+result)
}

func (o *discoveryRecorder) results() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, len(o.got))
	for i, g := range o.got {
		out[i] = strings.TrimPrefix(g, "sen:")
	}
	return out
}
