package host_test

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/internal/builtin"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/conformance"
	"github.com/caphost/caphost/policy"
)

// capConfig writes a configuration with one coordination deployment at addr
// (required or not) and the capabilities block body (YAML, indented by the
// caller under "capabilities:"), and loads it.
func capConfig(t *testing.T, addr string, required bool, caps string, extra ...config.Option) (*config.Config, error) {
	t.Helper()
	body := fmt.Sprintf(`redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    coordination: {deployment: main, required: %t, expected-eviction: noeviction}
    cache: {deployment: main, required: false, expected-eviction: noeviction}
  allow-unsafe-colocation: true
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/HOST_TEST_KEY"}
capabilities:
%s`, addr, required, caps)
	path := filepath.Join(t.TempDir(), "caphost.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	env := func(k string) (string, bool) {
		if k == "HOST_TEST_KEY" {
			return hmacKey, true
		}
		return "", false
	}
	return config.Load(context.Background(), path, append([]config.Option{config.WithEnv(env)}, extra...)...)
}

// block indents a capability's YAML block under its id.
func block(id, yaml string, extraLines ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n", id)
	for _, l := range append(strings.Split(strings.TrimRight(yaml, "\n"), "\n"), extraLines...) {
		fmt.Fprintf(&b, "    %s\n", l)
	}
	return b.String()
}

// TestEveryCapabilityDecodesStrictly: for every registered capability, its
// own example block loads, and the same block with an unknown key fails —
// in config.Load (what `caphost check` runs) and in host.New (which decodes
// again before it builds anything).
func TestEveryCapabilityDecodesStrictly(t *testing.T) {
	require.NotEmpty(t, builtin.Capabilities())
	for _, info := range builtin.Capabilities() {
		t.Run(info.ID, func(t *testing.T) {
			require.NotEmpty(t, info.Example, "a registered capability ships a minimal valid example block")
			cfg, err := capConfig(t, "127.0.0.1:1", true, block(info.ID, info.Example))
			require.NoError(t, err, "the registered example must be valid")
			require.Contains(t, cfg.Capabilities, info.ID)

			_, err = capConfig(t, "127.0.0.1:1", true, block(info.ID, info.Example, "no-such-key: 1"))
			ps := problemsOf(t, err)
			assert.Contains(t, ps, policy.Problem{Path: "capabilities." + info.ID + ".no-such-key", Rule: policy.RuleUnknownKey,
				Message: ps[slices.IndexFunc(ps, func(p policy.Problem) bool { return p.Rule == policy.RuleUnknownKey })].Message})

			// A hand-built configuration that skipped config.Load is refused
			// by host.New before it builds anything.
			bad := *cfg
			bad.Capabilities = map[string]config.Capability{}
			for k, v := range cfg.Capabilities {
				raw := map[string]any{"no-such-key": 1}
				for rk, rv := range v.Raw {
					raw[rk] = rv
				}
				v.Raw = raw
				bad.Capabilities[k] = v
			}
			h, err := host.New(context.Background(), &bad, host.WithLogger(nil))
			require.Error(t, err)
			assert.Nil(t, h)
			assert.ErrorIs(t, err, policy.ErrInvalid)
			assert.Contains(t, err.Error(), "capabilities."+info.ID+".no-such-key")
		})
	}
}

func problemsOf(t *testing.T, err error) []policy.Problem {
	t.Helper()
	require.Error(t, err)
	var verr *policy.ValidationError
	require.ErrorAs(t, err, &verr)
	return verr.Problems
}

// TestUnimplementedCapabilityRefused: the configuration accepts only
// capabilities the host implements — the reported case: a cache block
// (before the cache was implemented) with an unknown key and a bad duration
// printed "ok".
func TestUnimplementedCapabilityRefused(t *testing.T) {
	for _, name := range []string{"session"} {
		_, err := capConfig(t, "127.0.0.1:1", true, fmt.Sprintf("  %s: {provider: redis, redis-role: coordination, no-such-key: 1, idle-ttl: \"not-a-duration\"}\n", name))
		ps := problemsOf(t, err)
		require.Len(t, ps, 1, "%v", ps)
		assert.Equal(t, policy.RuleCapabilityUnimplemented, ps[0].Rule)
		assert.Equal(t, "capabilities."+name, ps[0].Path)
		assert.Contains(t, ps[0].Message, strings.Join(config.CapabilityNames(), ", "))
	}
	_, err := capConfig(t, "127.0.0.1:1", true, "  queueing: {provider: redis}\n")
	ps := problemsOf(t, err)
	assert.Equal(t, policy.RuleCapabilityUnknown, ps[0].Rule)
	// Disabled does not make an unimplemented name acceptable.
	_, err = capConfig(t, "127.0.0.1:1", true, "  session: {provider: disabled}\n")
	assert.Equal(t, policy.RuleCapabilityUnimplemented, problemsOf(t, err)[0].Rule)
}

// settledGoroutines waits until the goroutine count has held still for 20
// consecutive samples (200 ms) and returns it; it fails the test if the
// count never settles within 10 s, rather than compare a moving number.
func settledGoroutines(t *testing.T) int {
	t.Helper()
	n, stable := goruntime.NumGoroutine(), 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		m := goruntime.NumGoroutine()
		if m != n {
			n, stable = m, 0
			continue
		}
		if stable++; stable >= 20 {
			return n
		}
	}
	t.Fatalf("the goroutine count never settled (last %d)", n)
	return n
}

// TestDisabledCapabilityIsInert: for every registered capability,
// `provider: disabled` (with garbage in the rest of the block and its role
// bound to a real server) creates no client, connection, goroutine, program
// load or health dependency, and the capability reports itself disabled.
func TestDisabledCapabilityIsInert(t *testing.T) {
	srv := redistest.StartStandalone(t)
	for _, info := range builtin.Capabilities() {
		t.Run(info.ID, func(t *testing.T) {
			cfg, err := capConfig(t, srv.Addr(), true, fmt.Sprintf("  %s: {provider: disabled, policies: [not, decoded], no-such-key: 1}\n", info.ID))
			require.NoError(t, err)
			assert.Empty(t, cfg.Capabilities)
			assert.Empty(t, cfg.Redis.Roles, "a disabled capability selects no role")

			scripts := func() int64 {
				return srv.CommandCalls(t, "evalsha") + srv.CommandCalls(t, "script|load") + srv.CommandCalls(t, "fcall") +
					srv.CommandCalls(t, "function|load") + srv.CommandCalls(t, "hello") + srv.CommandCalls(t, "auth")
			}
			before, calls := settledGoroutines(t), scripts()
			h, err := host.New(context.Background(), cfg, host.WithLogger(nil))
			require.NoError(t, err)
			rep := h.Readiness(context.Background())
			assert.True(t, rep.Ready)
			assert.Empty(t, rep.Roles, "no health dependency")
			_, err = h.Runtime()
			assert.ErrorIs(t, err, host.ErrNoRuntime, "no client")
			st := h.Capabilities(context.Background())
			i := slices.IndexFunc(st, func(s capability.Status) bool { return s.Capability == info.ID })
			require.GreaterOrEqual(t, i, 0)
			assert.Equal(t, capability.StateDisabled, st[i].State)
			assert.Nil(t, st[i].Descriptor)
			assert.LessOrEqual(t, settledGoroutines(t), before, "no goroutine")
			assert.Zero(t, srv.ConnectedClients(t), "no connection")
			assert.Equal(t, calls, scripts(), "no program load, no handshake")
			require.NoError(t, h.Close(context.Background()))
		})
	}
}

// repoRoot is the module root (the test runs in host/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	return root
}

// cardFile finds the markdown file in the repository whose bytes are card,
// so its relative links can be resolved.
func cardFile(t *testing.T, root string, card []byte) string {
	t.Helper()
	var found string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != "" {
			return nil
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "third_party" || d.Name() == "build") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, card) {
				found = p
			}
		}
		return nil
	})
	require.NotEmpty(t, found, "the card is a file in the repository")
	return found
}

// testFuncs lists the Test/Fuzz/Example functions of the package in dir.
func testFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range af.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil {
				out[fd.Name.Name] = true
			}
		}
	}
	return out
}

// checkCard parses a card and checks it against the readiness its code
// claims: the same level, and for R2 and above, evidence that exists — every
// test its item 11 names is a test function of the named package, and its
// runbook link resolves to a file.
func checkCard(t *testing.T, root string, raw []byte, claimed capability.Readiness) {
	t.Helper()
	c, err := capability.ParseCard(raw)
	require.NoError(t, err)
	assert.Equal(t, claimed, c.Readiness, "the card states the readiness the code claims")
	refs, err := c.Tests()
	require.NoError(t, err)
	path := cardFile(t, root, raw)
	for _, link := range c.Links(capability.ItemRunbook) {
		target, _, _ := strings.Cut(link, "#")
		_, err := os.Stat(filepath.Join(filepath.Dir(path), target))
		assert.NoError(t, err, "runbook link %s of %s", link, path)
	}
	if claimed < capability.R2 {
		return
	}
	require.NotEmpty(t, refs, "an R2 claim names its evidence")
	require.NotEmpty(t, c.Links(capability.ItemRunbook), "an R2 claim has a runbook")
	named := 0
	for _, ref := range refs {
		for _, pkg := range ref.Packages {
			pkg = strings.TrimSuffix(pkg, "/...")
			funcs := testFuncs(t, filepath.Join(root, pkg))
			for _, name := range ref.Tests {
				named++
				assert.True(t, funcs[name], "%s names %s, which is not a test of %s", path, name, pkg)
			}
		}
	}
	assert.Positive(t, named, "an R2 claim names specific tests")
}

// TestEveryCapabilityAndGuestKindHasACompleteCard: no capability or guest
// kind without a complete card, and no R2 claim without the evidence its
// card names.
func TestEveryCapabilityAndGuestKindHasACompleteCard(t *testing.T) {
	root := repoRoot(t)
	for _, info := range builtin.Capabilities() {
		t.Run(info.ID, func(t *testing.T) { checkCard(t, root, info.Card, info.Readiness) })
	}
	for _, k := range abi.Kinds() {
		t.Run("guest-kind/"+string(k), func(t *testing.T) {
			raw, ok := conformance.KindCard(k)
			require.True(t, ok, "guest kind %s has no card", k)
			c, err := capability.ParseCard(raw)
			require.NoError(t, err)
			checkCard(t, root, raw, c.Readiness)
		})
	}
}

// TestCardCheckCatchesMissingEvidence: the card check fails for an R2 card
// that names a test that does not exist.
func TestCardCheckCatchesMissingEvidence(t *testing.T) {
	info, ok := builtin.Lookup("rate-limit")
	require.True(t, ok)
	c, err := capability.ParseCard(info.Card)
	require.NoError(t, err)
	refs, err := c.Tests()
	require.NoError(t, err)
	root := repoRoot(t)
	funcs := testFuncs(t, filepath.Join(root, strings.TrimSuffix(refs[0].Packages[0], "/...")))
	assert.True(t, funcs[refs[0].Tests[0]])
	assert.False(t, funcs["TestThatDoesNotExist"], "the lookup is real, not a pass-through")
}

// TestCapabilitiesReportActualState: an active capability reports its
// descriptor and the state of its backing role; a downed required role is
// DOWN, a downed optional one DEGRADED; co-location with the cache role caps
// the readiness at R1.
func TestCapabilitiesReportActualState(t *testing.T) {
	info, _ := builtin.Lookup("rate-limit")
	for _, required := range []bool{true, false} {
		t.Run(fmt.Sprintf("required=%t", required), func(t *testing.T) {
			srv := redistest.StartStandalone(t)
			cfg, err := capConfig(t, srv.Addr(), required, block(info.ID, info.Example))
			require.NoError(t, err)
			h := newHost(t, cfg)
			st := statusOf(t, h, info.ID)
			assert.Equal(t, capability.StateActive, st.State)
			assert.Equal(t, info.Readiness, st.Readiness)
			assert.Equal(t, info.Readiness, st.Claimed)
			require.NotNil(t, st.Descriptor)
			require.NoError(t, st.Descriptor.Validate())
			assert.Equal(t, policy.RoleCoordination, st.Descriptor.Role)
			want := capability.ImpactOptional
			if required {
				want = capability.ImpactRequired
			}
			assert.Equal(t, want, st.Descriptor.Impact, "the impact follows the role's required flag")

			srv.Kill()
			require.Eventually(t, func() bool { return statusOf(t, h, info.ID).State != capability.StateActive }, 10*time.Second, 100*time.Millisecond)
			st = statusOf(t, h, info.ID)
			if required {
				assert.Equal(t, capability.StateDown, st.State)
			} else {
				assert.Equal(t, capability.StateDegraded, st.State)
			}
			assert.NotEmpty(t, st.Reason)
		})
	}
	t.Run("colocated", func(t *testing.T) {
		srv := redistest.StartStandalone(t)
		cfg, err := capConfig(t, srv.Addr(), true, block(info.ID, info.Example), withColocatedCache())
		require.NoError(t, err)
		h := newHost(t, cfg)
		st := statusOf(t, h, info.ID)
		assert.Equal(t, info.Readiness, st.Claimed)
		assert.Equal(t, capability.R1, st.Readiness, "explicit unsafe co-location caps the readiness at R1")
		assert.Contains(t, st.Downgrades, capability.DowngradeUnsafeColocation)
	})
}

// TestPluggedGuestNeverRaisesReadiness: a rate-policy guest plugged into
// rate-limit is listed, and caps the capability at its kind's card
// readiness — the effective readiness is never above the claim.
func TestPluggedGuestNeverRaisesReadiness(t *testing.T) {
	srv := redistest.StartStandalone(t)
	e := newGuestEnv(t)
	h, _ := startHost(t, e.config(t, guestOpts{redisAddr: srv.Addr()}))
	st := statusOf(t, h, "rate-limit")
	assert.Equal(t, []string{"rate-policy"}, st.Guests)
	kind := slices.IndexFunc(h.GuestKinds(), func(k host.GuestKind) bool { return k.Kind == string(abi.KindRatePolicy) })
	require.GreaterOrEqual(t, kind, 0)
	kr := h.GuestKinds()[kind]
	assert.Equal(t, []string{"rate-limit"}, kr.ConsumedBy)
	assert.Contains(t, st.Downgrades, capability.Downgrade{Reason: "guest-kind:rate-policy", Cap: kr.Readiness})
	assert.Equal(t, min(st.Claimed, kr.Readiness), st.Readiness)
	assert.LessOrEqual(t, st.Readiness, st.Claimed)
}

// TestCapabilityDownWhenItsRoleIsMisconfigured: with the startup
// handshake, a coordination deployment whose eviction policy is wrong keeps
// the capability down, and the reason names the misconfiguration (not an
// outage).
func TestCapabilityDownWhenItsRoleIsMisconfigured(t *testing.T) {
	info, _ := builtin.Lookup("rate-limit")
	srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "allkeys-lru"))
	cfg, err := capConfig(t, srv.Addr(), true, block(info.ID, info.Example))
	require.NoError(t, err)
	h, err := host.New(context.Background(), cfg, host.WithLogger(nil), host.WithStartupHandshake())
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	require.Eventually(t, func() bool {
		st := statusOf(t, h, info.ID)
		return st.State == capability.StateDown && strings.HasSuffix(st.Reason, ":misconfiguration")
	}, 15*time.Second, 50*time.Millisecond, "%+v", statusOf(t, h, info.ID))
}

// withColocatedCache is a capConfig marker: the cache role shares the
// coordination deployment, by explicit choice.
func withColocatedCache() config.Option { return config.WithRoles(policy.RoleCache) }

func statusOf(t *testing.T, h *host.Host, id string) capability.Status {
	t.Helper()
	for _, s := range h.Capabilities(context.Background()) {
		if s.Capability == id {
			return s
		}
	}
	t.Fatalf("capability %s not reported", id)
	return capability.Status{}
}

// TestFailedProvisionCleansUp: when a capability fails to provision, New
// closes everything it built — here the guests and the runtime — and leaves
// the caller's registry as it found it, so a corrected configuration can be
// assembled on the same registry right after.
func TestFailedProvisionCleansUp(t *testing.T) {
	srv := redistest.StartStandalone(t)
	reg := prometheus.NewRegistry()
	// A configured policy that the rate-policy guest declares too: the
	// policy set cannot be compiled, so provisioning fails.
	e := newGuestEnv(t)
	bad := e.config(t, guestOpts{redisAddr: srv.Addr(), rateExtra: "    policies:\n      free-read:\n        revision: c1\n        algorithm: fixed-window\n        limit: 1\n        window: 1m\n        failure-mode: fail-closed\n        subject: [client-ip]\n"})
	before := settledGoroutines(t)
	_, err := host.New(context.Background(), bad, host.WithLogger(nil), host.WithRegistry(reg))
	require.Error(t, err)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		assert.False(t, strings.HasPrefix(mf.GetName(), "caphost_"), "left registered: %s", mf.GetName())
	}
	assert.LessOrEqual(t, settledGoroutines(t), before, "no goroutine left behind")
	assert.Zero(t, srv.ConnectedClients(t), "no connection left open")

	good := e.config(t, guestOpts{redisAddr: srv.Addr()})
	h, err := host.New(context.Background(), good, host.WithLogger(nil), host.WithRegistry(reg))
	require.NoError(t, err)
	require.NoError(t, h.Close(context.Background()))
}
