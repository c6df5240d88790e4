package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/commands"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
)

const hmacKey = "0123456789abcdef0123456789abcdef-host-test"

// load writes a configuration binding the given roles and loads it through
// the real loader (strict decoding, defaults, secret resolution).
func load(t *testing.T, deployments map[string]string, roles map[policy.Role]string, required map[policy.Role]bool, extra ...config.Option) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("redis:\n  deployments:\n")
	for id, addr := range deployments {
		fmt.Fprintf(&b, "    %s:\n      standalone: {endpoint: %q}\n      auth: {admin-shared: true}\n      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}\n", id, addr)
	}
	b.WriteString("  roles:\n")
	var sel []policy.Role
	for r, dep := range roles {
		ev := "noeviction"
		if r == policy.RoleCache {
			ev = "allkeys-lfu"
		}
		fmt.Fprintf(&b, "    %s: {deployment: %s, required: %t, expected-eviction: %s}\n", r, dep, required[r], ev)
		sel = append(sel, r)
	}
	b.WriteString("  allow-unsafe-colocation: true\n  programs: {mode: evalsha-managed}\n  keys:\n    app: demo\n    env: test\n    hmac:\n      write-version: 1\n      versions: {1: \"secret://env/HOST_TEST_KEY\"}\n")
	path := filepath.Join(t.TempDir(), "caphost.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	env := func(k string) (string, bool) {
		if k == "HOST_TEST_KEY" {
			return hmacKey, true
		}
		return "", false
	}
	opts := append([]config.Option{config.WithEnv(env), config.WithRoles(sel...)}, extra...)
	cfg, err := config.Load(context.Background(), path, opts...)
	require.NoError(t, err)
	return cfg
}

func newHost(t *testing.T, cfg *config.Config) *host.Host {
	t.Helper()
	h, err := host.New(context.Background(), cfg, host.WithLogger(nil))
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestReadinessRequiredDownOptionalDegraded(t *testing.T) {
	coord := redistest.StartStandalone(t)
	cache := redistest.StartStandalone(t)
	cfg := load(t,
		map[string]string{"coord": coord.Addr(), "cachedep": cache.Addr()},
		map[policy.Role]string{policy.RoleCoordination: "coord", policy.RoleCache: "cachedep"},
		map[policy.Role]bool{policy.RoleCoordination: true, policy.RoleCache: false})
	h := newHost(t, cfg)
	ctx := context.Background()

	rep := h.Readiness(ctx)
	assert.Equal(t, health.Up, rep.Status)
	assert.True(t, rep.Ready)

	// Optional cache down → DEGRADED but still ready (200).
	cache.Kill()
	time.Sleep(600 * time.Millisecond) // past the readiness cache interval
	code, body := get(t, h.Handler(), "/readyz")
	assert.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"status":"DEGRADED"`)
	assert.NotContains(t, body, cache.Addr(), "no endpoints in health output")

	// Required coordination down → DOWN, 503.
	coord.Kill()
	time.Sleep(600 * time.Millisecond)
	code, body = get(t, h.Handler(), "/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Contains(t, body, `"status":"DOWN"`)

	// Liveness never depends on Redis.
	code, _ = get(t, h.Handler(), "/livez")
	assert.Equal(t, http.StatusOK, code)
}

func TestLivenessNeverTouchesRedis(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg := load(t, map[string]string{"main": srv.Addr()},
		map[policy.Role]string{policy.RoleCoordination: "main"}, map[policy.Role]bool{policy.RoleCoordination: true})
	h := newHost(t, cfg)
	before := srv.CommandCalls(t, "ping")
	for range 20 {
		code, _ := get(t, h.Handler(), "/livez")
		require.Equal(t, http.StatusOK, code)
	}
	// CommandCalls itself pings through the harness admin connection once.
	assert.LessOrEqual(t, srv.CommandCalls(t, "ping")-before, int64(1))
	assert.Zero(t, srv.ConnectedClients(t), "liveness opened no connection")
}

func TestNoRoleNoRuntime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.yaml")
	require.NoError(t, os.WriteFile(path, []byte("server: {listen: \"127.0.0.1:8080\"}\n"), 0o600))
	cfg, err := config.Load(context.Background(), path, config.WithEnv(func(string) (string, bool) { return "", false }))
	require.NoError(t, err)
	h := newHost(t, cfg)
	_, err = h.Runtime()
	require.ErrorIs(t, err, host.ErrNoRuntime)
	assert.True(t, h.Readiness(context.Background()).Ready)
}

// TestMetricLabelsAreBounded drives traffic (admitted, rejected, failed)
// and then enumerates every exported series: each label value must come
// from its closed, pre-registered set — never a key, endpoint or value.
func TestMetricLabelsAreBounded(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg := load(t, map[string]string{"main": srv.Addr()},
		map[policy.Role]string{policy.RoleCoordination: "main"}, map[policy.Role]bool{policy.RoleCoordination: true})
	h := newHost(t, cfg)
	rt, err := h.Runtime()
	require.NoError(t, err)
	ctx := context.Background()
	rep := rt.Probe(ctx) // SET/GET/DEL, CONFIG GET, INFO, SCRIPT EXISTS …
	require.NoError(t, rep.Err())
	d, err := rt.Role(policy.RoleCoordination)
	require.NoError(t, err)
	require.NoError(t, d.Ping(ctx))
	srv.Kill()
	require.Error(t, d.Ping(ctx)) // an UNAVAILABLE outcome series

	cat, err := commands.Default()
	require.NoError(t, err)
	allowed := map[string]map[string]bool{
		"deployment": {"main": true, "unknown": true},
		"lane":       {},
		"command":    {"unknown": true},
		"outcome":    {},
		"reason":     {"unknown": true},
		"role":       {},
		"status":     {string(health.Up): true, string(health.Degraded): true, string(health.Down): true},
		"kind":       {runtime.RedirectMoved: true, runtime.RedirectAsk: true},
		"result": {"followed": true, "not_followed": true, runtime.SentinelDiscovered: true, runtime.SentinelSwitched: true,
			runtime.SentinelUnchanged: true, runtime.SentinelNoQuorum: true, runtime.SentinelUnconfirmed: true},
	}
	for _, r := range policy.Roles() {
		allowed["role"][string(r)] = true
	}
	for _, l := range policy.Lanes() {
		allowed["lane"][string(l)] = true
	}
	allowed["command"]["pipeline"] = true
	for _, n := range cat.Names() {
		allowed["command"][n] = true
	}
	for _, o := range certainty.Outcomes() {
		allowed["outcome"][o.String()] = true
	}
	for _, r := range guard.Reasons() {
		allowed["reason"][string(r)] = true
	}

	mfs, err := h.Registry().Gather()
	require.NoError(t, err)
	var caphostSeries int
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "caphost_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			caphostSeries++
			for _, lp := range m.GetLabel() {
				set, known := allowed[lp.GetName()]
				require.True(t, known, "%s has unexpected label %q", mf.GetName(), lp.GetName())
				assert.True(t, set[lp.GetValue()], "%s{%s=%q} is outside the closed set", mf.GetName(), lp.GetName(), lp.GetValue())
				assert.NotContains(t, lp.GetValue(), "ca:", "a key reached a label")
			}
		}
	}
	assert.Greater(t, caphostSeries, 10)
	// The traffic above is visible.
	code, body := get(t, h.Handler(), "/metrics")
	require.Equal(t, http.StatusOK, code)
	assert.True(t, strings.Contains(body, `caphost_redis_commands_total{command="SET",deployment="main",lane="regular",outcome="APPLIED"} 1`), "SET series")
	// The failed PING is UNAVAILABLE_BEFORE_SEND when the pool notices the
	// closed socket and redials, INDETERMINATE when it wrote to a pooled
	// connection before the server's FIN arrived; which one is a race with
	// the kernel, and both are honest.
	assert.Regexp(t, `caphost_redis_commands_total\{command="PING",deployment="main",lane="regular",outcome="(UNAVAILABLE_BEFORE_SEND|INDETERMINATE)"\} 1`, body, "failed PING series")
}
