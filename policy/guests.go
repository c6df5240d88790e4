package policy

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/caphost/caphost/abi"
)

// GuestsConfig lists the guest modules the host loads (the `guests` block).
type GuestsConfig struct {
	// CompileCacheDir, when set, holds wazero's on-disk compilation cache
	// (an absolute path once loaded).
	CompileCacheDir string
	// Modules by name (a slug).
	Modules map[string]GuestModule
	// Watch makes the host watch every module file and hot-swap a changed
	// module (`guests.watch`, default false). A swapped module no longer
	// matches its sha256 pin, so a watched swap is authorised like an admin
	// swap: by a trusted signature, or by security.allow-unsigned-swaps.
	Watch bool
}

// GuestModule is one configured guest module.
type GuestModule struct {
	// Name is the module's key in guests.modules.
	Name string
	// Path is the .wasm file (absolute once loaded).
	Path string
	// SHA256 is the required pin: 64 lower-case hex digits.
	SHA256 string
	// Signature is the detached signature file (absolute once loaded), or
	// empty when the module is unsigned.
	Signature string
	// Limits bound the module's sandbox.
	Limits GuestLimits
	// Grants are the host imports the module may call, from GuestGrants.
	Grants []string
}

// GuestLimits bound one module's sandbox. Every field is > 0 after
// defaults and within the GuestMax* caps.
type GuestLimits struct {
	MemoryPages    int           // 64 KiB wasm pages
	CallTimeout    time.Duration // deadline of one call
	MaxInputBytes  int           // request size cap
	MaxOutputBytes int           // response size cap
	MaxHostCalls   int           // host-function calls per invocation
	PoolSize       int           // live instances
	RecycleAfter   int           // calls before an instance is replaced
	MaxStackBytes  int           // Wasm call stack of one call, outside linear memory
}

// SecurityConfig is the `security` block.
type SecurityConfig struct {
	// RequireSignedGuests makes a valid signature by a trusted key mandatory
	// for every module.
	RequireSignedGuests bool
	// TrustedKeys maps a key name (slug) to a PEM public key file (absolute
	// once loaded).
	TrustedKeys map[string]string
	// AllowUnsignedSwaps lets a module be hot-swapped without a signature
	// when no trusted key is configured (`security.allow-unsigned-swaps`,
	// default false). A candidate cannot match the configured sha256 pin, so
	// without keys nothing else authorises it; keep this off outside
	// development. It has no effect when trusted keys are configured.
	AllowUnsignedSwaps bool
}

// Host hard caps for guest limits. Configuration may choose smaller values,
// never larger ones; each is at most the engine's own cap (plugins.HardCaps,
// checked by a plugins test), so a value `caphost check` accepts loads.
const (
	GuestMaxMemoryPages = 1024 // 64 MiB
	GuestMaxCallTimeout = 5 * time.Second
	// GuestMaxIOBytes is the ABI's message bound: no frame can be larger.
	GuestMaxIOBytes   = abi.MaxMessageBytes
	GuestMaxHostCalls = 10000
	GuestMaxPoolSize  = 64
	// GuestMaxRecycleAfter only keeps the value inside 32 bits; any
	// positive count is meaningful.
	GuestMaxRecycleAfter = 1<<31 - 1
	// GuestMinStackBytes and GuestMaxStackBytes bound max-stack-bytes: below
	// 64 KiB a Go guest's runtime cannot start; above 16 MiB one module's
	// pool of overflowing calls would cost the host more than its memory.
	GuestMinStackBytes = 64 << 10
	GuestMaxStackBytes = 16 << 20
)

// Guest grants: the closed set of host imports a module may be granted.
const (
	GrantLog   = "log"
	GrantCount = "count"
)

// GuestGrants lists every grant, sorted.
func GuestGrants() []string { return []string{GrantCount, GrantLog} }

// Guest and security rules. Rules checked here are pure; guests.file,
// guests.digest, guests.signature and security.trusted-key-file are
// reported by the loader, which reads the files.
const (
	RuleGuestsName             Rule = "guests.name"
	RuleGuestsPath             Rule = "guests.path"
	RuleGuestsSHA256           Rule = "guests.sha256"
	RuleGuestsLimits           Rule = "guests.limits"
	RuleGuestsGrants           Rule = "guests.grants"
	RuleGuestsDuplicate        Rule = "guests.duplicate"
	RuleGuestsUnsigned         Rule = "guests.unsigned"
	RuleGuestsFile             Rule = "guests.file"
	RuleGuestsDigest           Rule = "guests.digest"
	RuleGuestsSignature        Rule = "guests.signature"
	RuleSecurityTrustedKeys    Rule = "security.trusted-keys"
	RuleSecurityTrustedKeyFile Rule = "security.trusted-key-file"
)

// GuestRules lists the guest and security rules, sorted.
func GuestRules() []Rule {
	rs := []Rule{
		RuleGuestsName, RuleGuestsPath, RuleGuestsSHA256, RuleGuestsLimits, RuleGuestsGrants,
		RuleGuestsDuplicate, RuleGuestsUnsigned, RuleGuestsFile, RuleGuestsDigest, RuleGuestsSignature,
		RuleSecurityTrustedKeys, RuleSecurityTrustedKeyFile,
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}

// ValidSHA256 reports whether s is 64 lower-case hex digits.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidateGuests returns nil or a *ValidationError listing every guest and
// security problem that can be found without reading files.
func ValidateGuests(g GuestsConfig, s SecurityConfig) error { return GuestProblems(g, s).Err() }

// GuestProblems lists every guest and security problem that can be found
// without reading files, sorted.
func GuestProblems(g GuestsConfig, s SecurityConfig) Problems {
	var ps Problems
	names := make([]string, 0, len(s.TrustedKeys))
	for n := range s.TrustedKeys {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := "security.trusted-keys." + n
		if !ValidSlug(n) {
			ps.Add(p, RuleSecurityTrustedKeys, "key name must match [a-z][a-z0-9-]{0,31}")
		}
		if s.TrustedKeys[n] == "" {
			ps.Add(p, RuleSecurityTrustedKeys, "path of a PEM public key file is required")
		}
	}
	if s.RequireSignedGuests && len(s.TrustedKeys) == 0 {
		ps.Add("security.trusted-keys", RuleSecurityTrustedKeys, "require-signed-guests is true but no trusted key is configured: no module could load")
	}

	mods := make([]string, 0, len(g.Modules))
	for n := range g.Modules {
		mods = append(mods, n)
	}
	sort.Strings(mods)
	byPath, byDigest := map[string]string{}, map[string]string{}
	for _, n := range mods {
		m := g.Modules[n]
		p := "guests.modules." + n
		if !ValidSlug(n) {
			ps.Add(p, RuleGuestsName, "module name must match [a-z][a-z0-9-]{0,31}")
		}
		if m.Path == "" {
			ps.Add(p+".path", RuleGuestsPath, "required: the .wasm file")
		} else if prev, dup := byPath[m.Path]; dup {
			ps.Add(p+".path", RuleGuestsDuplicate, "same file as guests.modules.%s", prev)
		} else {
			byPath[m.Path] = n
		}
		switch {
		case m.SHA256 == "":
			ps.Add(p+".sha256", RuleGuestsSHA256, "required: the module's sha256 as 64 lower-case hex digits")
		case !ValidSHA256(m.SHA256):
			ps.Add(p+".sha256", RuleGuestsSHA256, "must be 64 lower-case hex digits")
		default:
			if prev, dup := byDigest[m.SHA256]; dup {
				ps.Add(p+".sha256", RuleGuestsDuplicate, "same module digest as guests.modules.%s", prev)
			} else {
				byDigest[m.SHA256] = n
			}
		}
		if s.RequireSignedGuests && m.Signature == "" {
			ps.Add(p+".signature", RuleGuestsUnsigned, "required: security.require-signed-guests is true")
		}
		m.Limits.problems(&ps, p+".limits")
		grantProblems(&ps, p+".grants", m.Grants)
	}
	ps.Sort()
	return ps
}

func (l GuestLimits) problems(ps *Problems, path string) {
	in := func(key string, v, max int, unit string) {
		if v <= 0 || v > max {
			ps.Add(path+"."+key, RuleGuestsLimits, "must be in 1..%d%s", max, unit)
		}
	}
	in("memory-pages", l.MemoryPages, GuestMaxMemoryPages, " (64 KiB pages)")
	if l.CallTimeout <= 0 || l.CallTimeout > GuestMaxCallTimeout {
		ps.Add(path+".call-timeout", RuleGuestsLimits, "must be > 0 and ≤ %s", GuestMaxCallTimeout)
	}
	in("max-input-bytes", l.MaxInputBytes, GuestMaxIOBytes, "")
	in("max-output-bytes", l.MaxOutputBytes, GuestMaxIOBytes, "")
	in("max-host-calls", l.MaxHostCalls, GuestMaxHostCalls, "")
	in("pool-size", l.PoolSize, GuestMaxPoolSize, "")
	in("recycle-after", l.RecycleAfter, GuestMaxRecycleAfter, "")
	if l.MaxStackBytes < GuestMinStackBytes || l.MaxStackBytes > GuestMaxStackBytes {
		ps.Add(path+".max-stack-bytes", RuleGuestsLimits, "must be in %d..%d (bytes)", GuestMinStackBytes, GuestMaxStackBytes)
	}
}

func grantProblems(ps *Problems, path string, grants []string) {
	seen := map[string]bool{}
	for i, gr := range grants {
		known := false
		for _, k := range GuestGrants() {
			known = known || k == gr
		}
		switch {
		case !known:
			ps.Add(fmt.Sprintf("%s.%d", path, i), RuleGuestsGrants, "unknown grant %.64q (known: %s)", gr, strings.Join(GuestGrants(), ", "))
		case seen[gr]:
			ps.Add(fmt.Sprintf("%s.%d", path, i), RuleGuestsGrants, "grant %.64q listed twice", gr)
		}
		seen[gr] = true
	}
}
