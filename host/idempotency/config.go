package idempotency

import (
	"slices"
	"strconv"
	"time"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/strict"
	"github.com/caphost/caphost/runtime/programs"
)

// ProviderRedis is the idempotency capability's only provider.
const ProviderRedis = "redis"

const capPath = "capabilities.idempotency"

// MaxRoutes bounds the routes allowlist, and the route labels of the
// metrics without one.
const MaxRoutes = 64

// MaxPolicyRevisionBytes bounds policy-revision (the programs' bound).
const MaxPolicyRevisionBytes = 128

// Rules of the idempotency block's values (the shape rules are policy's:
// config.unknown-key, config.type, capability.provider, capability.role).
const (
	// RuleBounds: a duration, max-response-bytes or policy-revision out of
	// its bounds.
	RuleBounds policy.Rule = "idempotency.bounds"
	// RuleRoutes: a route that is not a slug, listed twice, an empty list,
	// or more than MaxRoutes of them.
	RuleRoutes policy.Rule = "idempotency.routes"
)

// Rules lists the idempotency block's own rules.
func Rules() []policy.Rule { return []policy.Rule{RuleBounds, RuleRoutes} }

// ValidRoute reports whether s is a route slug: 1..64 lower-case letters,
// digits and '-', starting with a letter or digit (a key region).
func ValidRoute(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Decode decodes the capabilities.idempotency block strictly: unknown keys,
// wrong types and bad values fail, every problem at once as a
// *policy.ValidationError. role is the block's redis-role ("" defaults to
// coordination); the evictable cache role is refused, because an evicted
// record runs the action a second time.
//
// Keys (besides provider and redis-role):
//   - lease: the processing lease of a claimed or executing request
//     (default 30s, whole milliseconds, 1ms..720h);
//   - retention: how long a claimed or executing record outlives its lease
//     (default 10m; lease + retention at most 720h);
//   - replay-ttl: how long a completed response is replayed (default 24h,
//     1ms..720h);
//   - failed-ttl: how long FAILED_RETRYABLE and ABANDONED records stay
//     (default 1h, 1ms..720h);
//   - max-response-bytes: the bound of a stored response (default 65536,
//     1..1048576; the role's deployment budgets must admit it, checked
//     when the capability is provisioned);
//   - policy-revision: stored with each record, a response is replayed only
//     under the same revision (default "1", 1..128 bytes);
//   - routes: the closed list of routes callers may use (slugs, at most 64,
//     unique); absent: any route slug, the first 64 seen getting their own
//     metric label.
func Decode(provider string, role policy.Role, raw map[string]any) (Config, error) {
	d := &strict.Reader{}
	cfg := Config{Role: role, Lease: DefaultLease, Retention: DefaultRetention, ReplayTTL: DefaultReplayTTL,
		FailedTTL: DefaultFailedTTL, MaxResponseBytes: DefaultMaxResponseBytes, PolicyRevision: DefaultPolicyRevision}
	if cfg.Role == "" {
		cfg.Role = policy.RoleCoordination
	}
	if provider != ProviderRedis {
		d.Add(capPath+".provider", policy.RuleCapabilityProvider, "the idempotency capability needs provider redis")
	}
	if !cfg.Role.Correctness() {
		d.Add(capPath+".redis-role", policy.RuleCapabilityRole,
			"idempotency records need a correctness role (coordination or session): an evicted record runs the action again")
	}
	d.Known(capPath, raw, "lease", "retention", "replay-ttl", "failed-ttl", "max-response-bytes", "policy-revision", "routes")
	dur := func(key string, into *time.Duration) {
		if v, ok := d.Duration(capPath+"."+key, raw[key]); ok {
			if v < time.Millisecond || v > programs.MaxIdemTTL || v%time.Millisecond != 0 {
				d.Add(capPath+"."+key, RuleBounds, "must be whole milliseconds within 1ms..%s", programs.MaxIdemTTL)
			}
			*into = v
		}
	}
	dur("lease", &cfg.Lease)
	dur("retention", &cfg.Retention)
	dur("replay-ttl", &cfg.ReplayTTL)
	dur("failed-ttl", &cfg.FailedTTL)
	if cfg.Lease > 0 && cfg.Retention > 0 && cfg.Lease <= programs.MaxIdemTTL && cfg.Retention <= programs.MaxIdemTTL &&
		cfg.Lease+cfg.Retention > programs.MaxIdemTTL {
		d.Add(capPath+".retention", RuleBounds, "lease + retention must be at most %s", programs.MaxIdemTTL)
	}
	if v, ok := d.Int(capPath+".max-response-bytes", raw["max-response-bytes"]); ok {
		if v < 1 || v > programs.MaxIdemResponseBytes {
			d.Add(capPath+".max-response-bytes", RuleBounds, "must be within 1..%d", programs.MaxIdemResponseBytes)
		}
		cfg.MaxResponseBytes = v
	}
	if v, ok := d.Str(capPath+".policy-revision", raw["policy-revision"]); ok {
		if len(v) == 0 || len(v) > MaxPolicyRevisionBytes {
			d.Add(capPath+".policy-revision", RuleBounds, "must be 1..%d bytes", MaxPolicyRevisionBytes)
		}
		cfg.PolicyRevision = v
	}
	if rs, ok := d.StrList(capPath+".routes", raw["routes"]); ok {
		switch {
		case len(rs) == 0:
			d.Add(capPath+".routes", RuleRoutes, "an empty list allows nothing; omit the key to allow any route")
		case len(rs) > MaxRoutes:
			d.Add(capPath+".routes", RuleRoutes, "at most %d routes", MaxRoutes)
		}
		for i, r := range rs {
			switch {
			case !ValidRoute(r):
				d.Add(strict.Join(capPath+".routes", strconv.Itoa(i)), RuleRoutes, "must be a slug of 1..64 lower-case letters, digits and '-'")
			case slices.Contains(rs[:i], r):
				d.Add(strict.Join(capPath+".routes", strconv.Itoa(i)), RuleRoutes, "listed twice")
			}
		}
		cfg.Routes = rs
	}
	if err := d.Problems.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}
