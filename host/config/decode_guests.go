package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/caphost/caphost/plugins/trust"
	"github.com/caphost/caphost/policy"
)

// MaxModuleBytes bounds a guest module file read at load time.
const MaxModuleBytes = 64 << 20

// DefaultGuestLimits returns the limits used when guests.modules.<name>.limits
// (or one of its keys) is absent. Documented in docs/configuration.md.
func DefaultGuestLimits() policy.GuestLimits {
	return policy.GuestLimits{
		MemoryPages:    256, // 16 MiB
		CallTimeout:    100 * time.Millisecond,
		MaxInputBytes:  64 << 10,
		MaxOutputBytes: 64 << 10,
		MaxHostCalls:   64,
		PoolSize:       4,
		RecycleAfter:   100_000,
		MaxStackBytes:  1 << 20,
	}
}

func (d *decoder) guests(g map[string]any, out *policy.GuestsConfig) {
	d.Known("guests", g, "compile-cache-dir", "modules", "watch")
	out.Watch, _ = d.Bool("guests.watch", g["watch"])
	if s, ok := d.Str("guests.compile-cache-dir", g["compile-cache-dir"]); ok {
		if s == "" {
			d.Problems.Add("guests.compile-cache-dir", policy.RuleType, "must be a directory path when set")
		} else {
			out.CompileCacheDir = d.resolvePath(s)
		}
	}
	mods, _ := d.Object("guests.modules", g["modules"])
	names := make([]string, 0, len(mods))
	for n := range mods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := "guests.modules." + n
		m, ok := d.Object(p, mods[n])
		if !ok {
			if mods[n] == nil {
				d.Problems.Add(p+".path", policy.RuleGuestsPath, "required: the .wasm file")
			}
			continue
		}
		d.Known(p, m, "grants", "limits", "path", "sha256", "signature")
		gm := policy.GuestModule{Name: n, Limits: DefaultGuestLimits()}
		if s, ok := d.Str(p+".path", m["path"]); ok && s != "" {
			gm.Path = d.resolvePath(s)
		}
		gm.SHA256, _ = d.Str(p+".sha256", m["sha256"])
		if s, ok := d.Str(p+".signature", m["signature"]); ok && s != "" {
			gm.Signature = d.resolvePath(s)
		}
		if l, ok := d.Object(p+".limits", m["limits"]); ok {
			d.guestLimits(p+".limits", l, &gm.Limits)
		}
		gm.Grants, _ = d.StrList(p+".grants", m["grants"])
		if out.Modules == nil {
			out.Modules = map[string]policy.GuestModule{}
		}
		out.Modules[n] = gm
	}
}

func (d *decoder) guestLimits(p string, l map[string]any, out *policy.GuestLimits) {
	d.Known(p, l, "call-timeout", "max-host-calls", "max-input-bytes", "max-output-bytes", "max-stack-bytes", "memory-pages", "pool-size", "recycle-after")
	ints := []struct {
		key string
		dst *int
	}{
		{"memory-pages", &out.MemoryPages}, {"max-input-bytes", &out.MaxInputBytes}, {"max-output-bytes", &out.MaxOutputBytes},
		{"max-host-calls", &out.MaxHostCalls}, {"pool-size", &out.PoolSize}, {"recycle-after", &out.RecycleAfter},
		{"max-stack-bytes", &out.MaxStackBytes},
	}
	for _, f := range ints {
		if v, ok := d.Int(p+"."+f.key, l[f.key]); ok {
			*f.dst = v
		} else if l[f.key] != nil {
			*f.dst = 0 // decode problem reported; policy's echo is shadowed
		}
	}
	if v, ok := d.Duration(p+".call-timeout", l["call-timeout"]); ok {
		out.CallTimeout = v
	} else if l["call-timeout"] != nil {
		out.CallTimeout = 0
	}
}

func (d *decoder) security(s map[string]any, out *policy.SecurityConfig) {
	d.Known("security", s, "allow-unsigned-swaps", "require-signed-guests", "trusted-keys")
	out.AllowUnsignedSwaps, _ = d.Bool("security.allow-unsigned-swaps", s["allow-unsigned-swaps"])
	out.RequireSignedGuests, _ = d.Bool("security.require-signed-guests", s["require-signed-guests"])
	keys, _ := d.Object("security.trusted-keys", s["trusted-keys"])
	for n, v := range keys {
		if out.TrustedKeys == nil {
			out.TrustedKeys = map[string]string{}
		}
		path, ok := d.Str("security.trusted-keys."+n, v)
		if ok && path != "" {
			path = d.resolvePath(path)
		}
		out.TrustedKeys[n] = path
	}
}

// verifyGuests reads every trusted key and module file and checks pins and
// signatures through plugins/trust, reporting each problem. Modules or keys
// that already failed static validation (static) are not read: their
// problem is already reported and reading would only add an echo of it.
func verifyGuests(ctx context.Context, cfg *Config, static policy.Problems) (trust.TrustedKeys, policy.Problems, error) {
	var ps policy.Problems
	failed := func(prefix string) bool {
		for _, p := range static {
			if p.Path == prefix || hasPathPrefix(p.Path, prefix) {
				return true
			}
		}
		return false
	}
	names := make([]string, 0, len(cfg.Security.TrustedKeys))
	for n := range cfg.Security.TrustedKeys {
		names = append(names, n)
	}
	sort.Strings(names)
	parsed := map[string]trust.PublicKey{}
	// With require-signed-guests but no keys, every signature would fail as
	// "unknown key": an echo of the security.trusted-keys problem.
	keysOK := !failed("security.trusted-keys")
	for _, n := range names {
		p := "security.trusted-keys." + n
		if failed(p) {
			keysOK = false
			continue
		}
		k, err := trust.ReadPublicKeyFile(cfg.Security.TrustedKeys[n])
		if err != nil {
			ps.Add(p, policy.RuleSecurityTrustedKeyFile, "%s", keyFileReason(err))
			keysOK = false
			continue
		}
		parsed[n] = k
	}
	keys, err := trust.NewTrustedKeys(parsed)
	if err != nil {
		ps.Add("security.trusted-keys", policy.RuleSecurityTrustedKeyFile, "two names for one key: %s", trustDetail(err))
		keysOK = false
	}

	mods := make([]string, 0, len(cfg.Guests.Modules))
	for n := range cfg.Guests.Modules {
		mods = append(mods, n)
	}
	sort.Strings(mods)
	for _, n := range mods {
		if err := ctx.Err(); err != nil {
			return trust.TrustedKeys{}, nil, err
		}
		m := cfg.Guests.Modules[n]
		p := "guests.modules." + n
		if failed(p+".path") || failed(p+".sha256") || m.Path == "" {
			continue
		}
		module, reason := readModule(m.Path)
		if reason != "" {
			ps.Add(p+".path", policy.RuleGuestsFile, "%s", reason)
			continue
		}
		pin, err := trust.ParsePin(m.SHA256)
		if err != nil {
			continue // reported by policy as guests.sha256
		}
		if got := trust.Digest(module); got != pin {
			ps.Add(p+".sha256", policy.RuleGuestsDigest, "file sha256 is %s, config pins %s", got, pin)
			continue
		}
		if m.Signature == "" || failed(p+".signature") {
			continue // unsigned: allowed, or reported by policy as guests.unsigned
		}
		sig, err := trust.ReadSignatureFile(m.Signature)
		if err != nil {
			ps.Add(p+".signature", policy.RuleGuestsSignature, "%s", sigFileReason(err))
			continue
		}
		if !keysOK {
			continue // a broken key file is reported; "unknown key" would be its echo
		}
		if _, err := trust.Verify(module, pin, sig, keys, cfg.Security.RequireSignedGuests); err != nil {
			ps.Add(p+".signature", policy.RuleGuestsSignature, "%s", trustDetail(err))
		}
	}
	return keys, ps, nil
}

// readModule reads a module file of at most MaxModuleBytes; the reason is
// empty on success.
func readModule(path string) ([]byte, string) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Sprintf("file %s does not exist", path)
		}
		return nil, fmt.Sprintf("file %s cannot be opened", path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Sprintf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxModuleBytes+1))
	if err != nil {
		return nil, fmt.Sprintf("file %s cannot be read", path)
	}
	if len(b) > MaxModuleBytes {
		return nil, fmt.Sprintf("file %s exceeds %d MiB", path, MaxModuleBytes>>20)
	}
	return b, ""
}

// trustDetail returns the trust error's kind and detail without the
// "trust: " prefix or an operating-system cause.
func trustDetail(err error) string {
	var te *trust.Error
	if errors.As(err, &te) {
		if te.Detail != "" {
			return te.Kind.Error() + ": " + te.Detail
		}
		return te.Kind.Error()
	}
	return err.Error()
}

func keyFileReason(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "public key file does not exist"
	case errors.Is(err, trust.ErrTooLarge):
		return fmt.Sprintf("public key file exceeds %d bytes", trust.MaxKeyFileBytes)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return "public key file cannot be read"
	}
	return trustDetail(err)
}

func sigFileReason(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "signature file does not exist"
	case errors.Is(err, trust.ErrTooLarge):
		return fmt.Sprintf("signature file exceeds %d bytes", trust.MaxSignatureFileBytes)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return "signature file cannot be read"
	}
	return trustDetail(err)
}
