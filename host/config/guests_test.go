package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caphost/caphost/plugins/trust"
	"github.com/caphost/caphost/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	ratePin  = "c7bea72ce7dc1ea2724af5ae97691f21ef5e172b9f1c9fdc8ef3d37a61d44b22"
	codecPin = "cd488cb3d02d1506be13bc5d8d5f5d2075a6eee1aa573b9ddebfeb9cacf36f62"
)

func TestGuestsModel(t *testing.T) {
	cfg, err := loadFixture(t, "valid/guests.yaml", nil)
	require.NoError(t, err)
	abs, err := filepath.Abs(filepath.Join(fixtures, "guests"))
	require.NoError(t, err)
	cacheDir, err := filepath.Abs(filepath.Join(fixtures, "cache", "wazero"))
	require.NoError(t, err)
	assert.Equal(t, cacheDir, cfg.Guests.CompileCacheDir, "paths resolve against the config file directory")
	require.Len(t, cfg.Guests.Modules, 2)
	rate := cfg.Guests.Modules["rate-tiers"]
	assert.Equal(t, policy.GuestModule{
		Name: "rate-tiers", Path: filepath.Join(abs, "rate.wasm"), SHA256: ratePin, Signature: filepath.Join(abs, "rate.wasm.sig"),
		Limits: policy.GuestLimits{MemoryPages: 128, CallTimeout: 50 * time.Millisecond, MaxInputBytes: 65536, MaxOutputBytes: 65536, MaxHostCalls: 32, PoolSize: 8, RecycleAfter: 100000, MaxStackBytes: 2 << 20},
		Grants: []string{"log", "count"},
	}, rate)
	codec := cfg.Guests.Modules["codec"]
	want := DefaultGuestLimits()
	want.PoolSize = 2
	assert.Equal(t, want, codec.Limits, "absent limits take defaults")
	assert.Empty(t, codec.Grants)
	assert.True(t, cfg.Security.RequireSignedGuests)
	assert.Equal(t, map[string]string{"release-2026": filepath.Join(abs, "release.pub"), "ci": filepath.Join(abs, "other.pub")}, cfg.Security.TrustedKeys)
	assert.Equal(t, 2, cfg.TrustedKeys.Len())

	// The engine can re-verify the bytes it compiles with the loaded keys.
	mod, err := os.ReadFile(rate.Path)
	require.NoError(t, err)
	sig, err := trust.ReadSignatureFile(rate.Signature)
	require.NoError(t, err)
	pin, err := trust.ParsePin(rate.SHA256)
	require.NoError(t, err)
	v, err := trust.Verify(mod, pin, sig, cfg.TrustedKeys, true)
	require.NoError(t, err)
	assert.Equal(t, "release-2026", v.KeyName)

	// No guests block at all: empty model, no problem.
	cfg, err = loadFixture(t, "valid/cluster.yaml", nil)
	require.NoError(t, err)
	assert.Empty(t, cfg.Guests.Modules)
	assert.Zero(t, cfg.TrustedKeys.Len())
}

func TestDefaultGuestLimitsWithinCaps(t *testing.T) {
	g := policy.GuestsConfig{Modules: map[string]policy.GuestModule{"m": {Path: "/m", SHA256: ratePin, Limits: DefaultGuestLimits()}}}
	assert.NoError(t, policy.ValidateGuests(g, policy.SecurityConfig{}))
}

// writeGuestConfig writes a config and a module in a temp dir and returns
// the config path.
func writeGuestConfig(t *testing.T, module []byte, body string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "m.wasm"), module, 0o644))
	p := filepath.Join(dir, "caphost.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

func TestGuestLoadTimeChecks(t *testing.T) {
	pub, priv, _, err := trust.GenerateKey()
	require.NoError(t, err)
	module := []byte("\x00asm\x01\x00\x00\x00 module under test")
	sig, err := trust.Sign(priv, module)
	require.NoError(t, err)
	pin := trust.Digest(module).String()

	setup := func(t *testing.T, mod []byte, sigDoc []byte, require bool) string {
		body := fmt.Sprintf("guests:\n  modules:\n    m: {path: m.wasm, sha256: %q, signature: m.wasm.sig}\nsecurity:\n  require-signed-guests: %t\n  trusted-keys: {k: k.pub}\n", pin, require)
		p := writeGuestConfig(t, mod, body)
		dir := filepath.Dir(p)
		writeFile(t, filepath.Join(dir, "m.wasm.sig"), sigDoc)
		writeFile(t, filepath.Join(dir, "k.pub"), pub)
		return p
	}
	load := func(p string) error {
		_, err := Load(context.Background(), p, WithEnv(testEnv(nil)))
		return err
	}

	require.NoError(t, load(setup(t, module, sig.Marshal(), true)))

	tampered := append([]byte(nil), module...)
	tampered[len(tampered)-1] ^= 1
	ps := problems(t, load(setup(t, tampered, sig.Marshal(), true)))
	assert.Equal(t, []policy.Rule{policy.RuleGuestsDigest}, rules(ps))
	assert.Equal(t, "guests.modules.m.sha256", ps[0].Path)
	assert.Contains(t, ps[0].Message, pin)

	badSig := sig
	badSig.Sig = append([]byte(nil), sig.Sig...)
	badSig.Sig[3] ^= 1
	ps = problems(t, load(setup(t, module, badSig.Marshal(), false)))
	assert.Equal(t, []policy.Rule{policy.RuleGuestsSignature}, rules(ps), "a configured signature is checked even when not required")
	assert.Contains(t, ps[0].Message, "does not verify")

	ps = problems(t, load(setup(t, module, []byte("{}"), true)))
	assert.Equal(t, []policy.Rule{policy.RuleGuestsSignature}, rules(ps))

	// A private key configured as a trusted key is rejected without echoing it.
	p := setup(t, module, sig.Marshal(), true)
	writeFile(t, filepath.Join(filepath.Dir(p), "k.pub"), priv)
	err = load(p)
	ps = problems(t, err)
	assert.Equal(t, []policy.Rule{policy.RuleSecurityTrustedKeyFile}, rules(ps), "the signature is not re-reported as unknown key")
	assert.NotContains(t, err.Error(), strings.Split(string(priv), "\n")[1])

	// Unsigned and not required: fine.
	p = writeGuestConfig(t, module, fmt.Sprintf("guests:\n  modules:\n    m: {path: m.wasm, sha256: %q}\n", pin))
	require.NoError(t, load(p))
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(p, b, 0o644))
}

func TestGuestModuleTooLarge(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big.wasm"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxModuleBytes+1)) // sparse: no 64 MiB write
	require.NoError(t, f.Close())
	_, reason := readModule(filepath.Join(dir, "big.wasm"))
	assert.Contains(t, reason, "exceeds 64 MiB")
}

func TestGuestDecodeProblemsAllAtOnce(t *testing.T) {
	body := `
guests:
  compile-cache-dir: 7
  bogus: 1
  modules:
    a: {path: m.wasm, sha256: "` + ratePin + `", limits: {pool-size: many, call-timeout: 5, memory-pages: 4096}, grants: log, extra: 1}
    b: [1]
security:
  require-signed-guests: maybe
  trusted-keys: {k: 3}
`
	p := writeGuestConfig(t, []byte("x"), body)
	_, err := Load(context.Background(), p, WithEnv(testEnv(nil)))
	ps := problems(t, err)
	got := map[string]policy.Rule{}
	for _, pr := range ps {
		got[pr.Path] = pr.Rule
	}
	assert.Equal(t, map[string]policy.Rule{
		"guests.bogus":                         policy.RuleUnknownKey,
		"guests.compile-cache-dir":             policy.RuleType,
		"guests.modules.a.extra":               policy.RuleUnknownKey,
		"guests.modules.a.limits.pool-size":    policy.RuleType,
		"guests.modules.a.limits.call-timeout": policy.RuleType,
		"guests.modules.a.limits.memory-pages": policy.RuleGuestsLimits,
		"guests.modules.a.sha256":              policy.RuleGuestsDigest,
		"guests.modules.b":                     policy.RuleType,
		"security.require-signed-guests":       policy.RuleType,
		"security.trusted-keys.k":              policy.RuleType,
	}, got, "%v", ps)
}

func TestGuestEnvOverrides(t *testing.T) {
	p := writeGuestConfig(t, []byte("module"), "guests:\n  modules:\n    rate-tiers: {path: m.wasm, sha256: \"\"}\n")
	pin := trust.Digest([]byte("module")).String()
	cfg, err := Load(context.Background(), p, WithEnv(testEnv(map[string]string{
		"CAPHOST_GUESTS__MODULES__RATE_TIERS__SHA256": pin,
		"CAPHOST_GUESTS__COMPILE_CACHE_DIR":           "/var/cache/caphost",
	})))
	require.NoError(t, err)
	assert.Equal(t, pin, cfg.Guests.Modules["rate-tiers"].SHA256)
	assert.Equal(t, "/var/cache/caphost", cfg.Guests.CompileCacheDir)

	_, err = Load(context.Background(), p, WithEnv(testEnv(map[string]string{
		"CAPHOST_GUESTS__MODULES__RATE_TIERS__SHA256": pin,
		"CAPHOST_SECURITY__REQUIRE_SIGNED_GUESTS":     "true",
	})))
	ps := problems(t, err)
	assert.ElementsMatch(t, []policy.Rule{policy.RuleGuestsUnsigned, policy.RuleSecurityTrustedKeys}, rules(ps))
}
