package lease

import (
	"slices"
	"strconv"
	"time"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/strict"
)

// ProviderRedis is the lease capability's only provider.
const ProviderRedis = "redis"

const capPath = "capabilities.lease"

// Defaults and bounds of the capabilities.lease block.
const (
	// DefaultConfigMaxTTL is max-ttl when the block does not set it: a
	// holder that crashes blocks its resource for at most this long.
	DefaultConfigMaxTTL = 10 * time.Minute
	// DefaultConfigMaxWait is max-wait when the block does not set it.
	DefaultConfigMaxWait = 10 * time.Second
	// MaxConfigWait bounds max-wait: a sidecar acquire that waits must
	// answer well inside `caphost serve`'s two-minute write timeout.
	MaxConfigWait = time.Minute
	// MinDriftBudget and MaxDriftBudget bound drift-budget.
	MinDriftBudget = time.Millisecond
	MaxDriftBudget = 10 * time.Second
)

// Rules of the lease block's values (the shape rules are policy's:
// config.unknown-key, config.type, capability.provider, capability.role).
const (
	// RuleBounds: drift-budget, max-ttl or max-wait out of its bounds.
	RuleBounds policy.Rule = "lease.bounds"
	// RulePurposes: a purpose that is not a slug, listed twice, or more
	// than MaxPurposes of them.
	RulePurposes policy.Rule = "lease.purposes"
)

// Rules lists the lease block's own rules.
func Rules() []policy.Rule { return []policy.Rule{RuleBounds, RulePurposes} }

// Decode decodes the capabilities.lease block strictly: unknown keys, wrong
// types and bad values fail, every problem at once as a
// *policy.ValidationError. role is the block's redis-role ("" defaults to
// coordination); the evictable cache role is refused, because an evicted
// lease silently frees its resource to a second holder.
//
// Keys (besides provider and redis-role):
//   - drift-budget: duration subtracted from every validity (default 50ms,
//     1ms..10s, below max-ttl);
//   - max-ttl: the longest lease a caller may ask for (default 10m, whole
//     milliseconds, above drift-budget, at most 720h);
//   - max-wait: the longest bounded wait of one acquire (default 10s,
//     0..1m);
//   - purposes: the closed list of purposes callers may use (slugs, at most
//     64, unique); absent: any purpose slug, the first 64 seen getting
//     their own metric label.
func Decode(provider string, role policy.Role, raw map[string]any) (Config, error) {
	d := &strict.Reader{}
	cfg := Config{Role: role, DriftBudget: DefaultDriftBudget, MaxTTL: DefaultConfigMaxTTL, MaxWait: DefaultConfigMaxWait}
	if cfg.Role == "" {
		cfg.Role = policy.RoleCoordination
	}
	if provider != ProviderRedis {
		d.Add(capPath+".provider", policy.RuleCapabilityProvider, "the lease capability needs provider redis")
	}
	if !cfg.Role.Correctness() {
		d.Add(capPath+".redis-role", policy.RuleCapabilityRole,
			"a lease needs a correctness role (coordination or session): an evicted lease silently frees its resource to a second holder")
	}
	d.Known(capPath, raw, "drift-budget", "max-ttl", "max-wait", "purposes")
	if v, ok := d.Duration(capPath+".drift-budget", raw["drift-budget"]); ok {
		if v < MinDriftBudget || v > MaxDriftBudget {
			d.Add(capPath+".drift-budget", RuleBounds, "must be within %s..%s", MinDriftBudget, MaxDriftBudget)
		}
		cfg.DriftBudget = v
	}
	if v, ok := d.Duration(capPath+".max-ttl", raw["max-ttl"]); ok {
		if v <= 0 || v > MaxTTL || v%time.Millisecond != 0 {
			d.Add(capPath+".max-ttl", RuleBounds, "must be whole milliseconds within 1ms..%s", MaxTTL)
		}
		cfg.MaxTTL = v
	}
	if cfg.MaxTTL > 0 && cfg.DriftBudget >= cfg.MaxTTL {
		d.Add(capPath+".max-ttl", RuleBounds, "must exceed drift-budget (%s): a lease no longer than the drift budget is never usable", cfg.DriftBudget)
	}
	if v, ok := d.Duration(capPath+".max-wait", raw["max-wait"]); ok {
		if v < 0 || v > MaxConfigWait {
			d.Add(capPath+".max-wait", RuleBounds, "must be within 0s..%s", MaxConfigWait)
		}
		cfg.MaxWait = v
	}
	if ps, ok := d.StrList(capPath+".purposes", raw["purposes"]); ok {
		switch {
		case len(ps) == 0:
			d.Add(capPath+".purposes", RulePurposes, "an empty list allows nothing; omit the key to allow any purpose")
		case len(ps) > MaxPurposes:
			d.Add(capPath+".purposes", RulePurposes, "at most %d purposes", MaxPurposes)
		}
		for i, p := range ps {
			switch {
			case !ValidPurpose(p):
				d.Add(strict.Join(capPath+".purposes", strconv.Itoa(i)), RulePurposes, "must be a slug of 1..64 lower-case letters, digits and '-'")
			case slices.Contains(ps[:i], p):
				d.Add(strict.Join(capPath+".purposes", strconv.Itoa(i)), RulePurposes, "listed twice")
			}
		}
		cfg.Purposes = ps
	}
	if err := d.Problems.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
