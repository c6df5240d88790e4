package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func validLimits() GuestLimits {
	return GuestLimits{MemoryPages: 256, CallTimeout: 50 * time.Millisecond, MaxInputBytes: 65536, MaxOutputBytes: 65536, MaxHostCalls: 64, PoolSize: 4, RecycleAfter: 100000, MaxStackBytes: 1 << 20}
}

func validGuests() (GuestsConfig, SecurityConfig) {
	return GuestsConfig{Modules: map[string]GuestModule{
			"rate-tiers": {Name: "rate-tiers", Path: "/g/rate.wasm", SHA256: strings.Repeat("a", 64), Signature: "/g/rate.wasm.sig", Limits: validLimits(), Grants: []string{GrantLog, GrantCount}},
			"codec":      {Name: "codec", Path: "/g/codec.wasm", SHA256: strings.Repeat("b", 64), Signature: "/g/codec.wasm.sig", Limits: validLimits()},
		}},
		SecurityConfig{RequireSignedGuests: true, TrustedKeys: map[string]string{"release-2026": "/k/release.pub"}}
}

func TestValidGuestsHaveNoProblems(t *testing.T) {
	g, s := validGuests()
	require.NoError(t, ValidateGuests(g, s))
	require.NoError(t, ValidateGuests(GuestsConfig{}, SecurityConfig{}), "no guests at all is fine")
	l := GuestLimits{MemoryPages: GuestMaxMemoryPages, CallTimeout: GuestMaxCallTimeout, MaxInputBytes: GuestMaxIOBytes, MaxOutputBytes: GuestMaxIOBytes, MaxHostCalls: GuestMaxHostCalls, PoolSize: GuestMaxPoolSize, RecycleAfter: 1, MaxStackBytes: GuestMaxStackBytes}
	g.Modules["codec"] = GuestModule{Path: "/c.wasm", SHA256: strings.Repeat("c", 64), Signature: "/c.sig", Limits: l}
	require.NoError(t, ValidateGuests(g, s), "caps are inclusive")
}

func TestGuestProblemsPerRule(t *testing.T) {
	cases := []struct {
		name string
		edit func(*GuestsConfig, *SecurityConfig)
		path string
		rule Rule
	}{
		{"bad name", func(g *GuestsConfig, _ *SecurityConfig) {
			g.Modules["Bad_Name"] = g.Modules["codec"]
			delete(g.Modules, "codec")
		}, "guests.modules.Bad_Name", RuleGuestsName},
		{"no path", func(g *GuestsConfig, _ *SecurityConfig) { setMod(g, "codec", func(m *GuestModule) { m.Path = "" }) }, "guests.modules.codec.path", RuleGuestsPath},
		{"no pin", func(g *GuestsConfig, _ *SecurityConfig) { setMod(g, "codec", func(m *GuestModule) { m.SHA256 = "" }) }, "guests.modules.codec.sha256", RuleGuestsSHA256},
		{"upper pin", func(g *GuestsConfig, _ *SecurityConfig) {
			setMod(g, "codec", func(m *GuestModule) { m.SHA256 = strings.Repeat("B", 64) })
		}, "guests.modules.codec.sha256", RuleGuestsSHA256},
		{"short pin", func(g *GuestsConfig, _ *SecurityConfig) {
			setMod(g, "codec", func(m *GuestModule) { m.SHA256 = "abc" })
		}, "guests.modules.codec.sha256", RuleGuestsSHA256},
		{"dup path", func(g *GuestsConfig, _ *SecurityConfig) {
			setMod(g, "rate-tiers", func(m *GuestModule) { m.Path = "/g/codec.wasm" })
		}, "guests.modules.rate-tiers.path", RuleGuestsDuplicate},
		{"dup digest", func(g *GuestsConfig, _ *SecurityConfig) {
			setMod(g, "rate-tiers", func(m *GuestModule) { m.SHA256 = strings.Repeat("b", 64) })
		}, "guests.modules.rate-tiers.sha256", RuleGuestsDuplicate},
		{"unsigned", func(g *GuestsConfig, _ *SecurityConfig) {
			setMod(g, "codec", func(m *GuestModule) { m.Signature = "" })
		}, "guests.modules.codec.signature", RuleGuestsUnsigned},
		{"no keys", func(_ *GuestsConfig, s *SecurityConfig) { s.TrustedKeys = nil }, "security.trusted-keys", RuleSecurityTrustedKeys},
		{"bad key name", func(_ *GuestsConfig, s *SecurityConfig) { s.TrustedKeys["Release"] = "/k" }, "security.trusted-keys.Release", RuleSecurityTrustedKeys},
		{"empty key path", func(_ *GuestsConfig, s *SecurityConfig) { s.TrustedKeys["other"] = "" }, "security.trusted-keys.other", RuleSecurityTrustedKeys},
		{"unknown grant", func(g *GuestsConfig, _ *SecurityConfig) {
			setMod(g, "codec", func(m *GuestModule) { m.Grants = []string{"log", "redis.call"} })
		}, "guests.modules.codec.grants.1", RuleGuestsGrants},
		{"dup grant", func(g *GuestsConfig, _ *SecurityConfig) {
			setMod(g, "codec", func(m *GuestModule) { m.Grants = []string{"log", "log"} })
		}, "guests.modules.codec.grants.1", RuleGuestsGrants},
	}
	limitCases := map[string]func(*GuestLimits){
		"memory-pages":     func(l *GuestLimits) { l.MemoryPages = GuestMaxMemoryPages + 1 },
		"call-timeout":     func(l *GuestLimits) { l.CallTimeout = GuestMaxCallTimeout + 1 },
		"max-input-bytes":  func(l *GuestLimits) { l.MaxInputBytes = GuestMaxIOBytes + 1 },
		"max-output-bytes": func(l *GuestLimits) { l.MaxOutputBytes = 0 },
		"max-host-calls":   func(l *GuestLimits) { l.MaxHostCalls = GuestMaxHostCalls + 1 },
		"pool-size":        func(l *GuestLimits) { l.PoolSize = GuestMaxPoolSize + 1 },
		"recycle-after":    func(l *GuestLimits) { l.RecycleAfter = 0 },
		"max-stack-bytes":  func(l *GuestLimits) { l.MaxStackBytes = GuestMinStackBytes - 1 },
	}
	for key, f := range limitCases {
		cases = append(cases, struct {
			name string
			edit func(*GuestsConfig, *SecurityConfig)
			path string
			rule Rule
		}{"limit " + key, func(g *GuestsConfig, _ *SecurityConfig) { setMod(g, "codec", func(m *GuestModule) { f(&m.Limits) }) }, "guests.modules.codec.limits." + key, RuleGuestsLimits})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, s := validGuests()
			c.edit(&g, &s)
			ps := GuestProblems(g, s)
			require.Len(t, ps, 1, "%v", ps)
			assert.Equal(t, c.path, ps[0].Path)
			assert.Equal(t, c.rule, ps[0].Rule)
		})
	}
}

func TestGuestProblemsAllAtOnce(t *testing.T) {
	g, s := validGuests()
	setMod(&g, "codec", func(m *GuestModule) { m.Path, m.SHA256, m.Signature, m.Limits.PoolSize = "", "x", "", 0 })
	s.TrustedKeys = nil
	ps := GuestProblems(g, s)
	got := map[Rule]bool{}
	for _, p := range ps {
		got[p.Rule] = true
	}
	for _, r := range []Rule{RuleGuestsPath, RuleGuestsSHA256, RuleGuestsUnsigned, RuleGuestsLimits, RuleSecurityTrustedKeys} {
		assert.True(t, got[r], "missing %s in %v", r, ps)
	}
	err := ValidateGuests(g, s)
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestGuestRulesListed(t *testing.T) {
	rs := GuestRules()
	assert.IsIncreasing(t, rs)
	assert.Equal(t, []string{"count", "log"}, GuestGrants())
	assert.True(t, ValidSHA256(strings.Repeat("0f", 32)))
	assert.False(t, ValidSHA256(strings.Repeat("0F", 32)))
}

func setMod(g *GuestsConfig, name string, f func(*GuestModule)) {
	m := g.Modules[name]
	f(&m)
	g.Modules[name] = m
}
