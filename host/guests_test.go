package host_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/metrics"
	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/trust"
	"github.com/caphost/caphost/policy"
)

// guestEnv is one test's files: the module (a copy of the v1 build, so a
// watch test may replace it), keys and the configuration.
type guestEnv struct {
	dir      string
	module   string
	priv     []byte // trusted signing key
	stranger []byte // a key nobody trusts
}

type guestOpts struct {
	redisAddr    string // "" → no Redis and no rate-limit capability
	keys         bool   // configure a trusted key
	allowUnsign  bool
	watch        bool
	signature    bool // configure guests.modules.rate-policy.signature
	rateExtra    string
	moduleSource string // test guest name for the initial module (default rate-v1)
	callTimeout  string // guests.modules.rate-policy.limits.call-timeout
	grants       string // guests.modules.rate-policy.grants, a YAML list ("[log, count]")
}

func newGuestEnv(t *testing.T) *guestEnv {
	t.Helper()
	e := &guestEnv{dir: t.TempDir()}
	pub, priv, _, err := trust.GenerateKey()
	require.NoError(t, err)
	_, e.stranger, _, err = trust.GenerateKey()
	require.NoError(t, err)
	e.priv = priv
	require.NoError(t, os.WriteFile(filepath.Join(e.dir, "ops.pub"), pub, 0o600))
	e.module = filepath.Join(e.dir, "rate-policy.wasm")
	return e
}

func (e *guestEnv) sign(t *testing.T, key, wasm []byte) []byte {
	t.Helper()
	sig, err := trust.Sign(key, wasm)
	require.NoError(t, err)
	return sig.Marshal()
}

func (e *guestEnv) config(t *testing.T, o guestOpts) *config.Config {
	t.Helper()
	if o.callTimeout == "" {
		// The machine is shared and -race is slow: the conformance suite's
		// first calls must not hit the 100ms production default.
		o.callTimeout = "1s"
	}
	src := o.moduleSource
	if src == "" {
		src = "rate-v1"
	}
	wasm := th.wasm[src]
	require.NoError(t, os.WriteFile(e.module, wasm, 0o600))
	var b strings.Builder
	if o.redisAddr != "" {
		fmt.Fprintf(&b, `redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    coordination: {deployment: main, required: true, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/HOST_TEST_KEY"}
capabilities:
  rate-limit:
    provider: redis
    redis-role: coordination
%s`, o.redisAddr, o.rateExtra)
	}
	fmt.Fprintf(&b, "guests:\n  compile-cache-dir: %q\n  watch: %t\n  modules:\n    rate-policy:\n      path: %q\n      sha256: %q\n",
		th.cacheDir, o.watch, e.module, trust.Digest(wasm).String())
	if o.callTimeout != "" {
		fmt.Fprintf(&b, "      limits: {call-timeout: %s}\n", o.callTimeout)
	}
	if o.grants != "" {
		fmt.Fprintf(&b, "      grants: %s\n", o.grants)
	}
	if o.signature {
		sigPath := e.module + ".sig"
		require.NoError(t, os.WriteFile(sigPath, e.sign(t, e.priv, wasm), 0o600))
		fmt.Fprintf(&b, "      signature: %q\n", sigPath)
	}
	fmt.Fprintf(&b, "security:\n  allow-unsigned-swaps: %t\n", o.allowUnsign)
	if o.keys {
		fmt.Fprintf(&b, "  trusted-keys: {ops: %q}\n", filepath.Join(e.dir, "ops.pub"))
	}
	path := filepath.Join(e.dir, "caphost.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	env := func(k string) (string, bool) {
		if k == "HOST_TEST_KEY" {
			return hmacKey, true
		}
		return "", false
	}
	cfg, err := config.Load(context.Background(), path, config.WithEnv(env))
	require.NoError(t, err)
	return cfg
}

// logBuffer collects log lines from every goroutine.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startHost(t *testing.T, cfg *config.Config) (*host.Host, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	h, err := host.New(context.Background(), cfg,
		host.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h, logs
}

// rateServer puts the host's limiter and selector in front of a handler,
// with attributes from headers.
func rateServer(t *testing.T, h *host.Host) http.Handler {
	t.Helper()
	lim, sel, err := h.RateLimit()
	require.NoError(t, err)
	ext := &ratelimit.HeaderExtractor{APIKeyPlanHeader: "X-Api-Key-Plan", APIKeyHeader: "X-Api-Key", PrincipalTierHeader: "X-Tier"}
	mw := ratelimit.Middleware(lim, sel, ext, ratelimit.MiddlewareOptions{Budget: 2 * time.Second})
	return mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
}

// burst sends n reads on the free plan and counts the answers by status.
func burst(h http.Handler, n int) map[int]int {
	codes := map[int]int{}
	for range n {
		r := httptest.NewRequest(http.MethodGet, "/items", nil)
		r.Header.Set("X-Api-Key-Plan", "free")
		r.Header.Set("X-Api-Key", "subject-secret-4711")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		codes[rec.Code]++
	}
	return codes
}

func guestStatus(t *testing.T, h *host.Host) host.GuestStatus {
	t.Helper()
	gs := h.Guests()
	require.Len(t, gs, 1)
	return gs[0]
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("metric %s %v not found", name, labels)
	return 0
}

// TestRatePolicyGuestHotSwap: host.New wires the rate-policy guest into the
// rate-limit capability; a signed v2 build swapped in through the admin
// surface doubles the limits without a restart.
func TestRatePolicyGuestHotSwap(t *testing.T) {
	srv := redistest.StartStandalone(t)
	env := newGuestEnv(t)
	h, logs := startHost(t, env.config(t, guestOpts{redisAddr: srv.Addr(), keys: true}))

	st := guestStatus(t, h)
	assert.Equal(t, "rate-policy", st.Name)
	assert.Equal(t, uint64(1), st.Generation)
	assert.Equal(t, trust.Digest(th.wasm["rate-v1"]).String(), st.SHA256)
	assert.Equal(t, []string{string(abi.KindRatePolicy)}, st.Kinds)
	assert.Contains(t, st.Declared, "rate-policy:free.read")

	lim, sel, err := h.RateLimit()
	require.NoError(t, err)
	assert.IsType(t, &ratelimit.GuestSelector{}, sel)
	p, ok := lim.Policies().Policy("free-read")
	require.True(t, ok, "guest-declared policies are compiled into the set")
	assert.Equal(t, "r1", p.Revision)
	assert.Equal(t, int64(15), p.Parameters.Capacity)

	srvH := rateServer(t, h)
	reg := h.Registry()
	selects := func() float64 {
		return gaugeValue(t, reg, "caphost_guest_calls_total", map[string]string{"module": "rate-policy", "export": "rate_select"})
	}
	before := selects()
	codes := burst(srvH, 20)
	// One attribute tuple: the guest is asked once, its answer memoized
	// for the generation.
	assert.Equal(t, before+1, selects(), "select memoized per generation")
	// Capacity 15, refilled at 1 token/s: one refill may land during the burst.
	assert.GreaterOrEqual(t, codes[http.StatusNoContent], 15, codes)
	assert.LessOrEqual(t, codes[http.StatusNoContent], 16, codes)
	assert.Equal(t, 20, codes[http.StatusNoContent]+codes[http.StatusTooManyRequests], codes)

	v2 := th.wasm["rate-v2"]
	st, err = h.SwapGuest(context.Background(), "rate-policy", v2, env.sign(t, env.priv, v2))
	require.NoError(t, err, logs.String())
	assert.Equal(t, uint64(2), st.Generation)
	assert.True(t, st.LastSwapOK)
	assert.Equal(t, trust.Digest(v2).String(), st.SHA256)

	p, ok = lim.Policies().Policy("free-read")
	require.True(t, ok)
	assert.Equal(t, "r2", p.Revision, "the policy set follows the swapped guest")
	assert.Equal(t, int64(30), p.Parameters.Capacity)

	// A new revision is a new state key: the doubled bucket starts full.
	before = selects()
	codes = burst(srvH, 40)
	assert.Equal(t, before+1, selects(), "the new generation is asked afresh, once")
	assert.GreaterOrEqual(t, codes[http.StatusNoContent], 30, codes)
	assert.LessOrEqual(t, codes[http.StatusNoContent], 31, codes)

	assert.Equal(t, 2.0, gaugeValue(t, reg, "caphost_guest_generation", map[string]string{"module": "rate-policy"}))
	// The initial load counts as an installation too.
	assert.Equal(t, 2.0, gaugeValue(t, reg, "caphost_guest_swaps_total", map[string]string{"module": "rate-policy", "result": "ok"}))
	assert.Equal(t, 1.0, gaugeValue(t, reg, "caphost_rate_policy_reloads_total", map[string]string{"result": "ok"}))
	assert.Positive(t, gaugeValue(t, reg, "caphost_guest_calls_total", map[string]string{"module": "rate-policy", "export": "rate_select"}))
}

// TestBadSwapCandidatesLeaveV1Serving: an unsigned candidate, one signed by
// an untrusted key, a hostile guest and a guest that changes a policy
// without a new revision are all refused; generation 1 keeps serving with
// its limits.
func TestBadSwapCandidatesLeaveV1Serving(t *testing.T) {
	srv := redistest.StartStandalone(t)
	env := newGuestEnv(t)
	h, _ := startHost(t, env.config(t, guestOpts{redisAddr: srv.Addr(), keys: true}))
	ctx := context.Background()
	v2, bomb, reuse := th.wasm["rate-v2"], th.wasm["ratebomb"], th.wasm["ratereuse"]

	cases := []struct {
		name string
		wasm []byte
		sig  []byte
		want error
	}{
		{"unsigned", v2, nil, host.ErrSwapUnauthorized},
		{"untrusted key", v2, env.sign(t, env.stranger, v2), host.ErrSwapUnauthorized},
		{"signature for other bytes", v2, env.sign(t, env.priv, th.wasm["rate-v1"]), host.ErrSwapUnauthorized},
		{"malformed signature", v2, []byte(`{"format":"nope"}`), host.ErrSwapUnauthorized},
		{"revision reuse", reuse, env.sign(t, env.priv, reuse), host.ErrGuestPolicies},
		{"hostile memory bomb", bomb, env.sign(t, env.priv, bomb), plugins.ClassMemory},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := h.SwapGuest(ctx, "rate-policy", c.wasm, c.sig)
			require.Error(t, err)
			if c.want != nil {
				assert.ErrorIs(t, err, c.want)
			}
			assert.Equal(t, uint64(1), st.Generation, "generation 1 keeps serving")
			assert.Equal(t, trust.Digest(th.wasm["rate-v1"]).String(), st.SHA256)
		})
	}
	st := guestStatus(t, h)
	assert.False(t, st.LastSwapOK)
	assert.NotEmpty(t, st.LastSwapError)

	_, err := h.SwapGuest(ctx, "no-such-guest", v2, env.sign(t, env.priv, v2))
	assert.ErrorIs(t, err, plugins.ErrUnknownModule)

	lim, _, err := h.RateLimit()
	require.NoError(t, err)
	p, _ := lim.Policies().Policy("free-read")
	assert.Equal(t, "r1", p.Revision)
	codes := burst(rateServer(t, h), 20)
	assert.GreaterOrEqual(t, codes[http.StatusNoContent], 15, codes)
	assert.LessOrEqual(t, codes[http.StatusNoContent], 16, codes)
	assert.Equal(t, 1.0, gaugeValue(t, h.Registry(), "caphost_guest_swaps_total", map[string]string{"module": "rate-policy", "result": "ok"}), "only the initial load")
	// The malformed signature is refused before the swap pipeline starts.
	assert.Equal(t, float64(len(cases)-1), gaugeValue(t, h.Registry(), "caphost_guest_swaps_total", map[string]string{"module": "rate-policy", "result": "failed"}))
	assert.Equal(t, 1.0, gaugeValue(t, h.Registry(), "caphost_guest_generation", map[string]string{"module": "rate-policy"}))
}

// TestUnsignedSwapsWithoutKeys: with no trusted key a swap is refused unless
// security.allow-unsigned-swaps is set. No Redis: guests alone.
func TestUnsignedSwapsWithoutKeys(t *testing.T) {
	v2 := th.wasm["rate-v2"]
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow=%t", allow), func(t *testing.T) {
			env := newGuestEnv(t)
			h, _ := startHost(t, env.config(t, guestOpts{allowUnsign: allow}))
			_, _, err := h.RateLimit()
			assert.ErrorIs(t, err, host.ErrCapabilityDisabled)
			st, err := h.SwapGuest(context.Background(), "rate-policy", v2, nil)
			if !allow {
				assert.ErrorIs(t, err, host.ErrSwapUnauthorized)
				assert.Equal(t, uint64(1), st.Generation)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, uint64(2), st.Generation)
		})
	}
}

// TestWatchedSwap: with guests.watch, replacing the module file and its
// signature file swaps the guest and the rate policies without a restart.
func TestWatchedSwap(t *testing.T) {
	srv := redistest.StartStandalone(t)
	env := newGuestEnv(t)
	h, logs := startHost(t, env.config(t, guestOpts{redisAddr: srv.Addr(), keys: true, watch: true, signature: true}))
	v2 := th.wasm["rate-v2"]
	// Signature first, then the module renamed into place (atomic deploy).
	require.NoError(t, os.WriteFile(env.module+".sig", env.sign(t, env.priv, v2), 0o600))
	tmp := filepath.Join(env.dir, "rate-policy.wasm.tmp")
	require.NoError(t, os.WriteFile(tmp, v2, 0o600))
	require.NoError(t, os.Rename(tmp, env.module))
	lim, _, err := h.RateLimit()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, _ := lim.Policies().Policy("free-read")
		return p.Revision == "r2"
	}, 60*time.Second, 50*time.Millisecond, logs.String())
	assert.Equal(t, uint64(2), guestStatus(t, h).Generation)
}

// TestGuestPolicyDuplicatesConfig: a configured policy id that a guest also
// declares fails start-up, naming both.
func TestGuestPolicyDuplicatesConfig(t *testing.T) {
	srv := redistest.StartStandalone(t)
	env := newGuestEnv(t)
	cfg := env.config(t, guestOpts{redisAddr: srv.Addr(), rateExtra: `    policies:
      free-read:
        revision: c1
        algorithm: fixed-window
        limit: 10
        window: 1s
        subject: [global]
`})
	_, err := host.New(context.Background(), cfg, host.WithLogger(slog.New(slog.DiscardHandler)))
	require.Error(t, err)
	assert.ErrorIs(t, err, policy.ErrInvalid)
	assert.Contains(t, err.Error(), "guests.modules.rate-policy.rate-policies.free-read")
}

// TestGuestMetricLabelsAreBounded drives allowed, denied and failed
// traffic and swaps, then enumerates every guest and rate series: each
// label value comes from its closed set, and no subject appears anywhere.
func TestGuestMetricLabelsAreBounded(t *testing.T) {
	srv := redistest.StartStandalone(t)
	env := newGuestEnv(t)
	h, _ := startHost(t, env.config(t, guestOpts{redisAddr: srv.Addr(), keys: true}))
	burst(rateServer(t, h), 20)
	_, _ = h.SwapGuest(context.Background(), "rate-policy", th.wasm["rate-v2"], nil) // refused: unsigned

	exports := []string{}
	for e := abi.ExportDescribe; e.Valid(); e++ {
		exports = append(exports, strings.TrimPrefix(e.Name(), "caphost_"))
	}
	classes := []string{"unknown"}
	for _, c := range metrics.GuestClasses() {
		classes = append(classes, string(c))
	}
	allowed := map[string][]string{
		"module": {"rate-policy", "unknown"},
		"export": exports,
		"class":  classes,
		"state":  {"in-use", "idle"},
		"event":  {"started", "discarded"},
		"result": {"ok", "failed"},
	}
	mfs, err := h.Registry().Gather()
	require.NoError(t, err)
	seen := 0
	for _, mf := range mfs {
		name := mf.GetName()
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				assert.NotContains(t, lp.GetValue(), "subject-secret", "%s leaks a subject", name)
				if !strings.HasPrefix(name, "caphost_guest_") && name != "caphost_rate_policy_reloads_total" {
					continue
				}
				seen++
				vals, ok := allowed[lp.GetName()]
				if assert.True(t, ok, "%s: unexpected label %s", name, lp.GetName()) {
					assert.Contains(t, vals, lp.GetValue(), "%s{%s}", name, lp.GetName())
				}
			}
		}
	}
	assert.Positive(t, seen)
}

// TestCloseOrder: watchers and guests first, then the runtime, then the
// engine; afterwards nothing serves.
func TestCloseOrder(t *testing.T) {
	srv := redistest.StartStandalone(t)
	env := newGuestEnv(t)
	cfg := env.config(t, guestOpts{redisAddr: srv.Addr(), keys: true, watch: true})
	h, logs := startHost(t, cfg)
	_, sel, err := h.RateLimit()
	require.NoError(t, err)

	require.NoError(t, h.Close(context.Background()))
	out := logs.String()
	steps := []string{"host close: guests drained", "host close: runtime drained", "host close: guest engine closed"}
	last := -1
	for _, s := range steps {
		i := strings.Index(out, s)
		require.GreaterOrEqual(t, i, 0, "missing %q in\n%s", s, out)
		assert.Greater(t, i, last, "%q out of order", s)
		last = i
	}
	// Closed: guest calls fail (never allow), swaps are refused.
	_, err = sel.Select(context.Background(), ratelimit.Attributes{Route: "/items", Method: "GET"})
	assert.ErrorIs(t, err, ratelimit.ErrGuestSelect)
	v2 := th.wasm["rate-v2"]
	_, err = h.SwapGuest(context.Background(), "rate-policy", v2, env.sign(t, env.priv, v2))
	assert.ErrorIs(t, err, plugins.ErrManagerClosed)
	// The host's instruments left the registry with it (an embedder may
	// assemble the next host on the same registry).
	mfs, err := h.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		assert.False(t, strings.HasPrefix(mf.GetName(), "caphost_"), "still registered after Close: %s", mf.GetName())
	}
	require.NoError(t, h.Close(context.Background()), "Close is idempotent")
}

// TestEveryGuestLoadFailureListed: module files that changed after the
// configuration was loaded fail the engine's own pin check, and New lists
// every failing module at once.
func TestEveryGuestLoadFailureListed(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "guests:\n  compile-cache-dir: %q\n  modules:\n", th.cacheDir)
	for n, src := range map[string]string{"first": "rate-v1", "second": "ratereuse"} {
		path := filepath.Join(dir, n+".wasm")
		require.NoError(t, os.WriteFile(path, th.wasm[src], 0o600))
		fmt.Fprintf(&b, "    %s: {path: %q, sha256: %q}\n", n, path, trust.Digest(th.wasm[src]).String())
	}
	cfgPath := filepath.Join(dir, "caphost.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(b.String()), 0o600))
	cfg, err := config.Load(context.Background(), cfgPath, config.WithEnv(func(string) (string, bool) { return "", false }))
	require.NoError(t, err)
	for _, n := range []string{"first", "second"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n+".wasm"), th.wasm["rate-v2"], 0o600))
	}
	_, err = host.New(context.Background(), cfg, host.WithLogger(slog.New(slog.DiscardHandler)))
	require.Error(t, err)
	assert.ErrorIs(t, err, trust.ErrDigestMismatch)
	assert.Contains(t, err.Error(), "guest first")
	assert.Contains(t, err.Error(), "guest second")
}
