package config

import (
	"sort"
	"strconv"
	"strings"

	"github.com/caphost/caphost/host/internal/builtin"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/policy"
)

// CapabilityNames lists the capabilities this host implements, in
// provisioning order: the only names the capabilities block accepts.
func CapabilityNames() []string { return builtin.IDs() }

// ProviderDisabled turns a capability off: its block is not decoded further
// and it creates nothing.
const ProviderDisabled = "disabled"

// planned names capabilities the design describes that this host does not
// implement yet; naming one gets a clearer problem than a typo does.
var planned = [...]string{"session"}

// capabilities reads the envelope every block shares (provider, redis-role)
// and selects the roles active capabilities name. The capability's own keys
// are decoded by the capability itself (capabilityModules), once the roles
// are known.
func (d *decoder) capabilities(caps map[string]any, cfg *Config, selected map[policy.Role]string) {
	names := make([]string, 0, len(caps))
	for n := range caps {
		names = append(names, n)
	}
	sort.Strings(names)
	implemented := strings.Join(CapabilityNames(), ", ")
	for _, name := range names {
		p := "capabilities." + name
		info, ok := builtin.Lookup(name)
		if !ok {
			rule, what := policy.RuleCapabilityUnknown, "unknown capability"
			for _, pl := range planned {
				if pl == name {
					rule, what = policy.RuleCapabilityUnimplemented, "capability "+name+" is not implemented by this host yet"
				}
			}
			if len(name) > 48 {
				p = "capabilities." + name[:48] + "..."
			}
			d.Problems.Add(p, rule, "%s (implemented: %s)", what, implemented)
			continue
		}
		block, ok := d.Object(p, caps[name])
		if !ok {
			continue // absent or null: inactive
		}
		want := strings.Join(append(append([]string(nil), info.Providers...), ProviderDisabled), " or ")
		provider, ok := d.Str(p+".provider", block["provider"])
		if !ok {
			if block["provider"] == nil {
				d.Problems.Add(p+".provider", policy.RuleCapabilityProvider, "required: %s", want)
			}
			continue
		}
		if provider == ProviderDisabled {
			continue // inactive: the rest of the block is not even looked at
		}
		known := false
		for _, pr := range info.Providers {
			known = known || pr == provider
		}
		if !known {
			d.Problems.Add(p+".provider", policy.RuleCapabilityProvider, "unknown provider (want %s)", want)
			continue
		}
		c := Capability{Name: name, Provider: provider, Raw: map[string]any{}}
		roleStr, ok := d.Str(p+".redis-role", block["redis-role"])
		switch {
		case !ok && block["redis-role"] == nil:
			d.Problems.Add(p+".redis-role", policy.RuleCapabilityRole, "required with provider %s: cache, coordination or session", provider)
		case ok:
			if r, err := policy.ParseRole(roleStr); err != nil {
				d.Problems.Add(p+".redis-role", policy.RuleCapabilityRole, "unknown role (want cache, coordination or session)")
			} else {
				c.RedisRole = r
				if _, dup := selected[r]; !dup {
					selected[r] = "selected by " + p
				}
			}
		}
		for k, v := range block {
			if k != "provider" && k != "redis-role" {
				c.Raw[k] = d.resolveSecrets(p+"."+k, v)
			}
		}
		cfg.Capabilities[name] = c
	}
}

// capabilityModules runs every active capability's own strict decode —
// the code host.New runs again before it provisions — so a check of the
// file reports the capability's problems with everything else.
func (d *decoder) capabilityModules(cfg *Config) {
	for _, info := range builtin.Capabilities() {
		c, ok := cfg.Capabilities[info.ID]
		if !ok {
			continue
		}
		info.New().Decode(c.ModuleBlock(cfg), &d.Problems)
	}
}

// ModuleBlock is the view of the block that the capability's module decodes
// (host.New decodes it again, with the same code, before it provisions).
func (c Capability) ModuleBlock(cfg *Config) module.Block {
	mods := make([]string, 0, len(cfg.Guests.Modules))
	for n := range cfg.Guests.Modules {
		mods = append(mods, n)
	}
	sort.Strings(mods)
	return module.Block{
		Path: "capabilities." + c.Name, Provider: c.Provider, Role: c.RedisRole,
		RoleRequired: cfg.Redis.Roles[c.RedisRole].Required, Raw: c.Raw, GuestModules: mods, Dir: cfg.Dir,
	}
}

// SecretPrefix starts every secret reference.
const SecretPrefix = "secret://"

// resolveSecrets returns v with every string that is a secret reference
// (SecretPrefix) replaced by its resolved policy.Secret, at any depth, so a
// capability reads secrets with strict.Reader.Secret and never resolves one
// itself. A reference that does not resolve is a problem at its path and
// is left out (the capability then sees the field as absent and may report
// it missing too).
func (d *decoder) resolveSecrets(path string, v any) any {
	switch x := v.(type) {
	case string:
		if !strings.HasPrefix(x, SecretPrefix) {
			return x
		}
		if _, sec, ok := d.secret(path, x); ok {
			return sec
		}
		return nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = d.resolveSecrets(path+"."+k, e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = d.resolveSecrets(path+"["+strconv.Itoa(i)+"]", e)
		}
		return out
	}
	return v
}
