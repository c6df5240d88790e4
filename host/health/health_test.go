package health_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/programs"
)

// deployment is a valid deployment without auth (every lane, admin
// included, is the default user, by choice) and small bounds.
func deployment(id, addr string) policy.Deployment {
	lanes := map[policy.Lane]policy.LaneConfig{}
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 2, MaxInFlight: 4}
	}
	return policy.Deployment{
		ID: id, Topology: &policy.Standalone{Endpoint: addr}, ClientName: "caphost-health-test",
		Timeouts: policy.Timeouts{Connect: time.Second, Command: 2 * time.Second, Acquire: 300 * time.Millisecond, Shutdown: 3 * time.Second},
		Lanes:    lanes, Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20},
		AdminShared: true,
	}
}

// redisConfig binds roles to deployments.
func redisConfig(roles map[policy.Role]policy.RoleBinding, deps ...policy.Deployment) policy.RedisConfig {
	cfg := policy.RedisConfig{
		Deployments: map[string]policy.Deployment{},
		Roles:       roles,
		Programs:    policy.ProgramsConfig{Mode: policy.ProgramsEvalshaManaged},
		Keys: policy.KeysConfig{App: "demo", Env: "test", HMAC: policy.KeyMaterial{WriteVersion: 1,
			Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("0123456789abcdef0123456789abcdef"))}}},
	}
	for _, d := range deps {
		cfg.Deployments[d.ID] = d
	}
	return cfg
}

func newRuntime(t *testing.T, cfg policy.RedisConfig) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(context.Background(), cfg, runtime.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// noevict is a server a correctness role accepts.
func noevict(t *testing.T, opts ...redistest.Option) *redistest.Server {
	return redistest.StartStandalone(t, append([]redistest.Option{redistest.WithConfig("maxmemory-policy", "noeviction")}, opts...)...)
}

// stepClock is a Clock whose Sleep hands each wait to the test and returns
// only when the test releases it; Now moves only by released sleeps and
// Advance.
type stepClock struct {
	mu      sync.Mutex
	now     time.Time
	sleeps  chan time.Duration
	release chan struct{}
}

func newStepClock() *stepClock {
	return &stepClock{now: time.Unix(1_800_000_000, 0), sleeps: make(chan time.Duration), release: make(chan struct{})}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	select {
	case c.sleeps <- d:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-c.release:
		c.Advance(d)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// nextSleep waits for the handshake loop's next backoff (the attempt before
// it has been recorded by then).
func (c *stepClock) nextSleep(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.sleeps:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("the handshake loop never slept")
		return 0
	}
}

// logs captures log records and lets a test wait for one.
type logs struct {
	mu      sync.Mutex
	records []slog.Record
	added   chan struct{}
}

func newLogs() *logs { return &logs{added: make(chan struct{}, 1024)} }

func (l *logs) Enabled(context.Context, slog.Level) bool { return true }
func (l *logs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logs) WithGroup(string) slog.Handler            { return l }
func (l *logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r.Clone())
	l.mu.Unlock()
	l.added <- struct{}{}
	return nil
}

func attr(r slog.Record, key string) string {
	v := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// matching returns the records with msg for deployment.
func (l *logs) matching(msg, dep string) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.records {
		if r.Message == msg && (dep == "" || attr(r, "deployment") == dep) {
			out = append(out, r)
		}
	}
	return out
}

// await waits until n records with msg for dep were logged.
func (l *logs) await(t *testing.T, msg, dep string, n int) slog.Record {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if rs := l.matching(msg, dep); len(rs) >= n {
			return rs[n-1]
		}
		select {
		case <-l.added:
		case <-deadline:
			t.Fatalf("no %q for %s logged", msg, dep)
		}
	}
}

func (l *logs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.records {
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.Key + "=" + a.Value.String()); return true })
		b.WriteString("\n")
	}
	return b.String()
}

const (
	passed = "redis handshake passed"
	failed = "redis handshake failed; retrying"
)

type fixture struct {
	checker *health.Checker
	clock   *stepClock
	logs    *logs
}

// untilPassed releases every further backoff until the deployment's
// handshake passes: after refused dials go-redis's pool keeps answering
// with the last dial error until its own background redial (about a
// second) succeeds, so the first attempt after a restart may still fail.
func (f fixture) untilPassed(t *testing.T, dep string) slog.Record {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if rs := f.logs.matching(passed, dep); len(rs) > 0 {
			return rs[0]
		}
		select {
		case <-f.clock.sleeps:
			f.clock.release <- struct{}{}
		case <-f.logs.added:
		case <-deadline:
			t.Fatalf("%s never passed:\n%s", dep, f.logs.all())
		}
	}
}

func start(t *testing.T, rt *runtime.Runtime, cfg policy.RedisConfig, handshake bool, startup policy.StartupPolicy) fixture {
	t.Helper()
	f := fixture{clock: newStepClock(), logs: newLogs()}
	f.checker = health.NewChecker(health.RuntimeSource(rt), cfg, health.Options{
		MinInterval: -1, Handshake: handshake, Startup: startup, Clock: f.clock,
		Log: slog.New(f.logs), Jitter: func(d time.Duration) time.Duration { return d },
	})
	f.checker.Start(context.Background())
	t.Cleanup(f.checker.Stop)
	return f
}

func roleOf(t *testing.T, rep health.Report, role policy.Role) health.RoleReport {
	t.Helper()
	for _, r := range rep.Roles {
		if r.Role == role {
			return r
		}
	}
	t.Fatalf("no %s in %+v", role, rep)
	return health.RoleReport{}
}

// bounded asserts that a report says nothing an operator must not see on
// an unauthenticated endpoint.
func bounded(t *testing.T, rep health.Report, servers ...*redistest.Server) {
	t.Helper()
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	for _, s := range servers {
		assert.NotContains(t, string(b), s.Addr(), "no endpoints in readiness")
	}
	assert.NotContains(t, string(b), "127.0.0.1")
}

type roleWant struct {
	role      policy.Role
	status    health.Status
	reason    string
	class     runtime.Class
	handshake health.HandshakeState
	problem   string // a failed check that must be listed
}

// cacheAndCoordination starts an optional cache and a required
// coordination deployment and waits until both handshakes passed.
func cacheAndCoordination(t *testing.T) (fixture, *redistest.Server, *redistest.Server) {
	cache, coord := redistest.StartStandalone(t), noevict(t)
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{
		policy.RoleCache:        {Deployment: "cache", Required: false},
		policy.RoleCoordination: {Deployment: "coord", Required: true},
	}, deployment("cache", cache.Addr()), deployment("coord", coord.Addr()))
	f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{})
	f.logs.await(t, passed, "cache", 1)
	f.logs.await(t, passed, "coord", 1)
	return f, cache, coord
}

// TestReadinessComposition is the table of reference §9.1 against real
// servers: what each role's real state does to readiness.
func TestReadinessComposition(t *testing.T) {
	cacheB := policy.RoleBinding{Deployment: "cache", Required: false}
	coordB := policy.RoleBinding{Deployment: "coord", Required: true}
	cases := []struct {
		name   string
		run    func(t *testing.T) (health.Report, []*redistest.Server)
		ready  bool
		status health.Status
		roles  []roleWant
	}{
		{"all proven", func(t *testing.T) (health.Report, []*redistest.Server) {
			f, cache, coord := cacheAndCoordination(t)
			return f.checker.Readiness(context.Background()), []*redistest.Server{cache, coord}
		}, true, health.Up, []roleWant{
			{policy.RoleCache, health.Up, health.ReasonOK, "", health.HandshakePassed, ""},
			{policy.RoleCoordination, health.Up, health.ReasonOK, "", health.HandshakePassed, ""},
		}},
		{"optional cache down: ready and degraded", func(t *testing.T) (health.Report, []*redistest.Server) {
			f, cache, coord := cacheAndCoordination(t)
			cache.Kill()
			return f.checker.Readiness(context.Background()), []*redistest.Server{cache, coord}
		}, true, health.Degraded, []roleWant{
			{policy.RoleCache, health.Degraded, "unreachable", runtime.ClassOutage, health.HandshakePassed, ""},
			{policy.RoleCoordination, health.Up, health.ReasonOK, "", health.HandshakePassed, ""},
		}},
		{"required coordination down: not ready", func(t *testing.T) (health.Report, []*redistest.Server) {
			coord := noevict(t)
			cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: coordB}, deployment("coord", coord.Addr()))
			f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{})
			f.logs.await(t, passed, "coord", 1)
			coord.Kill()
			return f.checker.Readiness(context.Background()), []*redistest.Server{coord}
		}, false, health.Down, []roleWant{
			{policy.RoleCoordination, health.Down, "unreachable", runtime.ClassOutage, health.HandshakePassed, ""},
		}},
		{"required coordination misconfigured: not ready, class misconfiguration", func(t *testing.T) (health.Report, []*redistest.Server) {
			coord := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "allkeys-lru"))
			cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: coordB}, deployment("coord", coord.Addr()))
			f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{})
			f.clock.nextSleep(t) // the first attempt failed and is recorded
			return f.checker.Readiness(context.Background()), []*redistest.Server{coord}
		}, false, health.Down, []roleWant{
			{policy.RoleCoordination, health.Down, health.ReasonHandshakeFailed, runtime.ClassMisconfiguration, health.HandshakeFailed, runtime.CheckEviction},
		}},
		{"optional cache misconfigured: ready, degraded, class misconfiguration", func(t *testing.T) (health.Report, []*redistest.Server) {
			cache := redistest.StartStandalone(t)
			cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCache: cacheB}, deployment("cache", cache.Addr()))
			cfg.Programs.Mode = policy.ProgramsFunctionsProvisioned // and no library is deployed
			f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{})
			f.clock.nextSleep(t)
			return f.checker.Readiness(context.Background()), []*redistest.Server{cache}
		}, true, health.Degraded, []roleWant{
			{policy.RoleCache, health.Degraded, health.ReasonHandshakeFailed, runtime.ClassMisconfiguration, health.HandshakeFailed, runtime.CheckPrograms},
		}},
		{"handshake pending: not ready, and no live check", func(t *testing.T) (health.Report, []*redistest.Server) {
			coord := noevict(t)
			proxy := redistest.NewProxy(t, coord.Addr())
			proxy.Stall() // the first attempt hangs in its first PING
			cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: coordB}, deployment("coord", proxy.Addr()))
			f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{})
			rep := f.checker.Readiness(context.Background())
			assert.Zero(t, coord.CommandCalls(t, "set"), "a pending role gets no live check")
			return rep, []*redistest.Server{coord}
		}, false, health.Down, []roleWant{
			{policy.RoleCoordination, health.Down, health.ReasonHandshakePending, "", health.HandshakePending, ""},
		}},
		{"unused role: no check, no client, no command", func(t *testing.T) (health.Report, []*redistest.Server) {
			coord, unused := noevict(t), redistest.StartStandalone(t)
			// The cache deployment is configured, but no role selects it.
			cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: coordB},
				deployment("coord", coord.Addr()), deployment("cache", unused.Addr()))
			before := map[string]int64{}
			for _, cmd := range []string{"ping", "set", "role", "config|get", "acl|getuser", "script|exists", "hello"} {
				before[cmd] = unused.CommandCalls(t, cmd)
			}
			f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{})
			f.logs.await(t, passed, "coord", 1)
			rep := f.checker.Readiness(context.Background())
			for cmd, n := range before {
				assert.Equal(t, n, unused.CommandCalls(t, cmd), "%s reached the unused deployment", cmd)
			}
			assert.Zero(t, unused.ConnectedClients(t), "no connection to the unused deployment")
			assert.Empty(t, f.logs.matching(passed, "cache"), "no handshake for it either")
			return rep, []*redistest.Server{coord, unused}
		}, true, health.Up, []roleWant{
			{policy.RoleCoordination, health.Up, health.ReasonOK, "", health.HandshakePassed, ""},
		}},
		{"handshake off: the live check alone", func(t *testing.T) (health.Report, []*redistest.Server) {
			coord := noevict(t)
			cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: coordB}, deployment("coord", coord.Addr()))
			f := start(t, newRuntime(t, cfg), cfg, false, policy.StartupPolicy{})
			rep := f.checker.Readiness(context.Background())
			require.True(t, rep.Ready)
			coord.Kill()
			return f.checker.Readiness(context.Background()), []*redistest.Server{coord}
		}, false, health.Down, []roleWant{
			{policy.RoleCoordination, health.Down, "unreachable", runtime.ClassOutage, health.HandshakeOff, ""},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, servers := c.run(t)
			assert.Equal(t, c.ready, rep.Ready, "%+v", rep)
			assert.Equal(t, c.status, rep.Status)
			require.Len(t, rep.Roles, len(c.roles), "exactly the selected roles")
			for _, w := range c.roles {
				rr := roleOf(t, rep, w.role)
				assert.Equal(t, w.status, rr.Status, "%s: %+v", w.role, rr)
				assert.Equal(t, w.reason, rr.Reason, "%s", w.role)
				assert.Equal(t, w.class, rr.Class, "%s", w.role)
				assert.Equal(t, w.handshake, rr.Handshake, "%s", w.role)
				if w.problem != "" {
					var names []string
					for _, p := range rr.Problems {
						names = append(names, p.Check)
						assert.NotEmpty(t, p.Class)
					}
					assert.Contains(t, names, w.problem)
				}
			}
			bounded(t, rep, servers...)
		})
	}
}

// TestHandshakeRetriesWithBackoff: an outage at boot keeps the role DOWN,
// retried at 100ms, 200ms, 400ms, 400ms (capped); the repeated identical
// failure is logged once, the recovery is logged with what it suppressed.
func TestHandshakeRetriesWithBackoff(t *testing.T) {
	srv := noevict(t)
	srv.Kill()
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		deployment("coord", srv.Addr()))
	f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{RetryInitial: 100 * time.Millisecond, RetryMax: 400 * time.Millisecond})
	require.NoError(t, f.checker.AwaitFirstHandshake(context.Background()), "retry never ends startup")

	var waits []time.Duration
	for i := range 4 {
		waits = append(waits, f.clock.nextSleep(t))
		if i == 0 {
			rr := roleOf(t, f.checker.Readiness(context.Background()), policy.RoleCoordination)
			assert.Equal(t, health.Down, rr.Status)
			assert.Equal(t, runtime.ClassOutage, rr.Class)
			assert.Equal(t, health.ReasonHandshakeFailed, rr.Reason)
			require.NotEmpty(t, rr.Problems)
			assert.Equal(t, runtime.CheckAuth, rr.Problems[0].Check)
			assert.NotContains(t, rr.Problems[0].Detail, srv.Addr())
		}
		if i < 3 {
			f.clock.release <- struct{}{}
		}
	}
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}, waits)
	assert.Len(t, f.logs.matching(failed, "coord"), 1, "the first failure is a transition and logged:\n%s", f.logs.all())
	assert.Empty(t, f.logs.matching("redis handshake still failing", "coord"), "identical failures within LogInterval are not")

	srv.Restart(t)
	f.clock.release <- struct{}{}
	rec := f.untilPassed(t, "coord")
	n, err := strconv.Atoi(attr(rec, "suppressed"))
	require.NoError(t, err, "the recovery line counts the silenced repeats")
	assert.GreaterOrEqual(t, n, 3)
	rep := f.checker.Readiness(context.Background())
	assert.True(t, rep.Ready, "%+v", rep)
	assert.Equal(t, health.Up, roleOf(t, rep, policy.RoleCoordination).Status)
}

// TestRepeatedFailureLoggedPerInterval: past LogInterval the same failure
// is logged again.
func TestRepeatedFailureLoggedPerInterval(t *testing.T) {
	srv := noevict(t)
	srv.Kill()
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		deployment("coord", srv.Addr()))
	f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{RetryInitial: time.Minute, RetryMax: time.Minute})
	f.clock.nextSleep(t)
	f.clock.release <- struct{}{} // now + 1m: the next identical failure is due
	f.clock.nextSleep(t)
	rec := f.logs.await(t, "redis handshake still failing", "coord", 1)
	assert.Equal(t, "outage", attr(rec, "class"))
	assert.NotContains(t, f.logs.all(), srv.Addr(), "no endpoints in logs")
}

// TestStartupPolicy: which first-handshake failures end startup.
func TestStartupPolicy(t *testing.T) {
	cases := []struct {
		name     string
		policy   policy.StartupOnFailure
		fault    string // "misconfigured" or "outage"
		required bool
		ends     runtime.Class // "" = keeps retrying
	}{
		{"fail-on-misconfiguration ends on a misconfiguration", policy.StartupFailOnMisconfiguration, "misconfigured", true, runtime.ClassMisconfiguration},
		{"fail-on-misconfiguration retries an outage", policy.StartupFailOnMisconfiguration, "outage", true, ""},
		{"fail ends on an outage", policy.StartupFail, "outage", true, runtime.ClassOutage},
		{"retry retries a misconfiguration", policy.StartupRetry, "misconfigured", true, ""},
		{"an optional role never ends startup", policy.StartupFail, "misconfigured", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "allkeys-lru"))
			role := policy.RoleCoordination // evicting: misconfigured for it
			if !c.required {
				role = policy.RoleCache
			}
			cfg := redisConfig(map[policy.Role]policy.RoleBinding{role: {Deployment: "d", Required: c.required}}, deployment("d", srv.Addr()))
			if !c.required {
				cfg.Programs.Mode = policy.ProgramsFunctionsProvisioned // misconfigured for the cache role
			}
			if c.fault == "outage" {
				srv.Kill()
			}
			f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{OnFailure: c.policy})
			err := f.checker.AwaitFirstHandshake(context.Background())
			if c.ends == "" {
				require.NoError(t, err)
				f.clock.nextSleep(t) // still retrying
				select {
				case err := <-f.checker.Fatal():
					t.Fatalf("startup ended: %v", err)
				default:
				}
				return
			}
			var he *health.HandshakeError
			require.ErrorAs(t, err, &he)
			require.ErrorIs(t, err, health.ErrHandshake)
			assert.Equal(t, c.ends, he.Class)
			assert.Equal(t, "d", he.Deployment)
			assert.NotContains(t, err.Error(), srv.Addr())
			select {
			case got := <-f.checker.Fatal():
				assert.Equal(t, err, got)
			default:
				t.Fatal("Fatal did not fire")
			}
			assert.NotEmpty(t, f.logs.matching("redis handshake failed; the startup policy ends startup", "d"))
			assert.False(t, f.checker.Readiness(context.Background()).Ready)
		})
	}
}

// tampered is the catalog's library with its info function reporting
// another digest: what an old or foreign release under the same name looks
// like.
func tampered(t *testing.T) (code, digest, want string) {
	t.Helper()
	cat, err := programs.Load()
	require.NoError(t, err)
	_, code, want = cat.Library()
	sum := sha256.Sum256([]byte("an older release"))
	digest = hex.EncodeToString(sum[:])
	return strings.Replace(code, want, digest, 1), digest, want
}

// TestWrongDigestStaysNotReady: a required role whose server holds a
// library with the wrong digest stays not ready, and /readyz names both
// digests and the class; deploying the right library heals it on the next
// retry without a restart.
func TestWrongDigestStaysNotReady(t *testing.T) {
	ctx := context.Background()
	srv := noevict(t)
	bad, badDigest, want := tampered(t)
	require.NoError(t, srv.Admin().FunctionLoadReplace(ctx, bad).Err())
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		deployment("coord", srv.Addr()))
	cfg.Programs.Mode = policy.ProgramsFunctionsProvisioned
	f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{})
	f.clock.nextSleep(t)

	rec := httptest.NewRecorder()
	health.ReadyzHandler(f.checker).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	body := rec.Body.String()
	assert.Contains(t, body, `"class":"misconfiguration"`)
	assert.Contains(t, body, "digest "+badDigest)
	assert.Contains(t, body, "digest "+want)
	assert.NotContains(t, body, srv.Addr())

	cat, err := programs.Load()
	require.NoError(t, err)
	require.NoError(t, programs.Deploy(ctx, cat, srv.Admin()))
	f.clock.release <- struct{}{}
	f.logs.await(t, passed, "coord", 1)
	assert.True(t, f.checker.Readiness(ctx).Ready)
}

// TestLiveFailureRerunsHandshake: a server restarted without persistence
// comes back without the Functions library. Go-redis reconnects by
// itself, so a PING would say UP; the live check sees a different primary,
// the handshake runs again and finds the library missing.
func TestLiveFailureRerunsHandshake(t *testing.T) {
	ctx := context.Background()
	srv := noevict(t)
	cat, err := programs.Load()
	require.NoError(t, err)
	require.NoError(t, programs.Deploy(ctx, cat, srv.Admin()))
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		deployment("coord", srv.Addr()))
	cfg.Programs.Mode = policy.ProgramsFunctionsProvisioned
	f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{})
	f.logs.await(t, passed, "coord", 1)
	require.True(t, f.checker.Readiness(ctx).Ready)

	srv.Restart(t) // empty: no persistence, no library
	rr := roleOf(t, f.checker.Readiness(ctx), policy.RoleCoordination)
	assert.Equal(t, health.Down, rr.Status)
	assert.Contains(t, []string{"node-changed", "connection-lost", "unreachable"}, rr.Reason)
	f.clock.nextSleep(t) // the re-run handshake failed
	rr = roleOf(t, f.checker.Readiness(ctx), policy.RoleCoordination)
	assert.Equal(t, health.Down, rr.Status)
	assert.Equal(t, runtime.ClassMisconfiguration, rr.Class)
	assert.Equal(t, health.ReasonHandshakeFailed, rr.Reason)
	require.NotEmpty(t, rr.Problems)
	assert.Contains(t, rr.Problems[len(rr.Problems)-1].Detail+rr.Problems[0].Detail, "caphost programs deploy")

	require.NoError(t, programs.Deploy(ctx, cat, srv.Admin()))
	f.clock.release <- struct{}{}
	f.logs.await(t, passed, "coord", 2)
	assert.True(t, f.checker.Readiness(ctx).Ready)
}

// TestReadinessCached: a burst of probes within MinInterval is one live
// check; later probes check again.
func TestReadinessCached(t *testing.T) {
	srv := noevict(t)
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		deployment("coord", srv.Addr()))
	clock := newStepClock()
	c := health.NewChecker(health.RuntimeSource(newRuntime(t, cfg)), cfg, health.Options{Clock: clock, Log: slog.New(slog.DiscardHandler)})
	before := srv.CommandCalls(t, "set")
	for range 10 {
		require.True(t, c.Readiness(context.Background()).Ready)
	}
	assert.Equal(t, int64(1), srv.CommandCalls(t, "set")-before)
	clock.Advance(time.Second)
	require.True(t, c.Readiness(context.Background()).Ready)
	assert.Equal(t, int64(2), srv.CommandCalls(t, "set")-before)
}

// TestRoleTransitionsLogged: every readiness status change is logged once.
func TestRoleTransitionsLogged(t *testing.T) {
	srv := noevict(t)
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		deployment("coord", srv.Addr()))
	f := start(t, newRuntime(t, cfg), cfg, false, policy.StartupPolicy{})
	ctx := context.Background()
	f.checker.Readiness(ctx)
	f.checker.Readiness(ctx)
	srv.Kill()
	f.checker.Readiness(ctx)
	f.checker.Readiness(ctx)
	rs := f.logs.matching("redis role readiness changed", "coord")
	require.Len(t, rs, 2, f.logs.all())
	assert.Equal(t, "UP", attr(rs[0], "status"))
	assert.Equal(t, "DOWN", attr(rs[1], "status"))
	assert.Equal(t, "outage", attr(rs[1], "class"))
}
