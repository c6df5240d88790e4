package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/strict"
)

// Provider values.
const (
	ProviderRedis          = "redis"
	DegradedDisabled       = "disabled"
	DegradedLocalEmergency = "local-emergency"
)

// Bounds of the local emergency limiter configuration.
const (
	MaxLocalEntries  = 1_000_000
	MaxLocalEntryTTL = time.Hour
	MaxLocalInFlight = 65_536
	MaxAssumedPods   = 100_000
	MaxRoutes        = 1024
	MaxSelections    = 8
	MaxAttemptTime   = 30 * time.Second
)

// LocalEmergencyConfig bounds the process-local emergency limiter.
type LocalEmergencyConfig struct {
	MaxEntries     int
	EntryTTL       time.Duration
	MaxInFlight    int
	AssumedMaxPods int
	PerPodShare    float64
}

// ShadowSampleLog bounds the sample log of shadow would-have-denied
// decisions (policy and revision only, never a subject).
type ShadowSampleLog struct {
	// PerMinute is the maximum number of sample log lines per minute (0: none).
	PerMinute int
}

// RouteRule maps a route (and optionally a method) to policy selections for
// StaticSelector.
type RouteRule struct {
	Route      string
	Method     string // "" matches every method
	Selections []Selection
}

// Config is the decoded `capabilities.rate-limit` block.
type Config struct {
	Provider         string
	RedisRole        policy.Role
	DegradedProvider string
	// LocalEmergency is nil unless DegradedProvider is local-emergency.
	LocalEmergency *LocalEmergencyConfig
	// AttemptTimeout bounds one program call (0: the first attempt gets half
	// of the remaining deadline when a retry is possible, else all of it).
	AttemptTimeout  time.Duration
	ShadowSampleLog ShadowSampleLog
	// Policies are the declared policies, sorted by id.
	Policies []policy.RatePolicyDecl
	// Routes feed StaticSelector, in declaration order.
	Routes []RouteRule
	// Headers is the RateLimit header mode of the middleware and of the
	// sidecar's evaluate answers when they do not choose one (key
	// headers; Decode defaults it to HeadersLegacy).
	Headers HeaderMode
}

// RuleHeaders is the rule id of a headers value that is not a mode.
const RuleHeaders = policy.RuleRateHeaders

// compileOptions returns the compile options for policies of this config.
func (c Config) compileOptions(prefix string) policy.RateCompileOptions {
	o := policy.RateCompileOptions{PathPrefix: prefix}
	if c.LocalEmergency != nil {
		o.LocalEmergency = &policy.RateLocalEmergency{AssumedMaxPods: c.LocalEmergency.AssumedMaxPods, PerPodShare: c.LocalEmergency.PerPodShare}
	}
	return o
}

// CompilePolicies compiles the declared policies into a set.
func (c Config) CompilePolicies() (*policy.RatePolicySet, error) {
	return policy.CompileRatePolicies(c.Policies, c.compileOptions(capPath+".policies"))
}

const capPath = "capabilities.rate-limit"

// Decode decodes the capability block strictly: provider and redis-role as
// host/config interpreted them, and raw, the block's own keys. Unknown keys
// and wrong types fail; every problem, including every policy problem, is
// reported at once as a *policy.ValidationError. An empty role defaults to
// coordination.
func Decode(provider string, role policy.Role, raw map[string]any) (Config, error) {
	d := &decoder{}
	cfg := Config{Provider: provider, RedisRole: role, DegradedProvider: DegradedDisabled, Headers: HeadersLegacy}
	if cfg.RedisRole == "" {
		cfg.RedisRole = policy.RoleCoordination
	}
	if provider != ProviderRedis {
		d.Problems.Add(capPath+".provider", policy.RuleCapabilityProvider, "the rate-limit capability needs provider redis")
	}
	if !cfg.RedisRole.Valid() || cfg.RedisRole == policy.RoleCache {
		// The cache role is evictable: a limiter whose state can be evicted
		// silently grants fresh quota.
		d.Problems.Add(capPath+".redis-role", policy.RuleCapabilityRole, "rate-limit state needs a non-evicting role (coordination or session)")
	}
	d.Known(capPath, raw, "degraded-provider", "local-emergency", "attempt-timeout", "shadow-sample-log", "policies", "routes", "headers")
	if s, ok := d.Str(capPath+".headers", raw["headers"]); ok {
		if m := HeaderMode(s); m != "" && m.Valid() {
			cfg.Headers = m
		} else {
			d.Problems.Add(capPath+".headers", RuleHeaders, "want legacy, draft or both")
		}
	}
	if s, ok := d.Str(capPath+".degraded-provider", raw["degraded-provider"]); ok {
		switch s {
		case DegradedDisabled, DegradedLocalEmergency:
			cfg.DegradedProvider = s
		default:
			d.Problems.Add(capPath+".degraded-provider", policy.RuleCapabilityProvider, "want disabled or local-emergency")
		}
	}
	if v, ok := d.Duration(capPath+".attempt-timeout", raw["attempt-timeout"]); ok {
		if v <= 0 || v > MaxAttemptTime {
			d.Problems.Add(capPath+".attempt-timeout", policy.RuleTimeoutsBound, "must be within (0, %s]", MaxAttemptTime)
		}
		cfg.AttemptTimeout = v
	}
	if m, ok := d.Object(capPath+".shadow-sample-log", raw["shadow-sample-log"]); ok {
		d.Known(capPath+".shadow-sample-log", m, "per-minute")
		if n, ok := d.Int64In(capPath+".shadow-sample-log.per-minute", m["per-minute"], 0, 600); ok {
			cfg.ShadowSampleLog.PerMinute = int(n)
		}
	}
	le, leOK := d.Object(capPath+".local-emergency", raw["local-emergency"])
	switch {
	case cfg.DegradedProvider == DegradedLocalEmergency && !leOK:
		if raw["local-emergency"] == nil {
			d.Problems.Add(capPath+".local-emergency", policy.RuleRateLocal, "required with degraded-provider: local-emergency")
		}
	case cfg.DegradedProvider != DegradedLocalEmergency && raw["local-emergency"] != nil:
		d.Problems.Add(capPath+".local-emergency", policy.RuleRateLocal, "only allowed with degraded-provider: local-emergency")
	case leOK:
		cfg.LocalEmergency = DecodeLocalEmergency(&d.Reader, capPath+".local-emergency", le)
	}
	if m, ok := d.Object(capPath+".policies", raw["policies"]); ok {
		ids := make([]string, 0, len(m))
		for id := range m {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if decl, ok := d.policy(id, m[id]); ok {
				cfg.Policies = append(cfg.Policies, decl)
			}
		}
	} else if raw["policies"] == nil {
		d.Problems.Add(capPath+".policies", policy.RuleRateCount, "at least one policy is required")
	}
	if l, ok := raw["routes"].([]any); ok {
		if len(l) > MaxRoutes {
			d.Problems.Add(capPath+".routes", policy.RuleRateCount, "%d routes, at most %d allowed", len(l), MaxRoutes)
		} else {
			for i, e := range l {
				if r, ok := d.route(fmt.Sprintf("%s.routes.%d", capPath, i), e); ok {
					cfg.Routes = append(cfg.Routes, r)
				}
			}
		}
	} else if raw["routes"] != nil {
		d.Problems.Add(capPath+".routes", policy.RuleType, "must be a list, got %s", strict.Kind(raw["routes"]))
	}
	// Policy semantics (bounds, fail-open, per-pod share) are checked by the
	// compiler; they are reported together with the shape problems.
	if _, err := cfg.CompilePolicies(); err != nil {
		var verr *policy.ValidationError
		if errors.As(err, &verr) {
			d.Problems = append(d.Problems, verr.Problems...)
		}
	}
	for i, r := range cfg.Routes {
		for j, s := range r.Selections {
			if !containsID(cfg.Policies, s.Policy) {
				d.Problems.Add(fmt.Sprintf("%s.routes.%d.policies.%d.policy", capPath, i, j), policy.RuleRateID, "unknown policy")
			}
		}
	}
	if err := d.Problems.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func containsID(ds []policy.RatePolicyDecl, id string) bool {
	for _, d := range ds {
		if d.ID == id {
			return true
		}
	}
	return false
}

// DecodeLocalEmergency decodes a local-emergency block at path into d's
// problems: the capability's and the Envoy rate-limit service's
// (server.envoy-rate-limit.local-emergency) have the same shape.
func DecodeLocalEmergency(d *strict.Reader, p string, m map[string]any) *LocalEmergencyConfig {
	d.Known(p, m, "maximum-entries", "entry-ttl", "maximum-in-flight", "assumed-maximum-pods", "per-pod-share")
	le := &LocalEmergencyConfig{}
	req := func(k string) bool {
		if m[k] == nil {
			d.Problems.Add(p+"."+k, policy.RuleRateLocal, "required")
			return false
		}
		return true
	}
	if req("maximum-entries") {
		if n, ok := d.Int64In(p+".maximum-entries", m["maximum-entries"], 1, MaxLocalEntries); ok {
			le.MaxEntries = int(n)
		}
	}
	if req("entry-ttl") {
		if v, ok := d.Duration(p+".entry-ttl", m["entry-ttl"]); ok {
			if v < time.Millisecond || v > MaxLocalEntryTTL {
				d.Problems.Add(p+".entry-ttl", policy.RuleRateLocal, "must be within 1ms..%s", MaxLocalEntryTTL)
			}
			le.EntryTTL = v
		}
	}
	if req("maximum-in-flight") {
		if n, ok := d.Int64In(p+".maximum-in-flight", m["maximum-in-flight"], 1, MaxLocalInFlight); ok {
			le.MaxInFlight = int(n)
		}
	}
	if req("assumed-maximum-pods") {
		if n, ok := d.Int64In(p+".assumed-maximum-pods", m["assumed-maximum-pods"], 1, MaxAssumedPods); ok {
			le.AssumedMaxPods = int(n)
		}
	}
	if req("per-pod-share") {
		if f, ok := d.Float(p+".per-pod-share", m["per-pod-share"]); ok {
			switch {
			case f <= 0 || f > 1:
				d.Problems.Add(p+".per-pod-share", policy.RuleRateLocal, "must be within (0, 1]")
			case le.AssumedMaxPods > 0 && f*float64(le.AssumedMaxPods) > 1+1e-12:
				d.Problems.Add(p+".per-pod-share", policy.RuleRateLocal, "per-pod-share × assumed-maximum-pods must not exceed 1")
			}
			le.PerPodShare = f
		}
	}
	return le
}

// policy decodes one policy block.
func (d *decoder) policy(id string, v any) (policy.RatePolicyDecl, bool) {
	p := capPath + ".policies." + id
	m, ok := d.Object(p, v)
	if !ok {
		if v == nil {
			d.Problems.Add(p, policy.RuleType, "must be a mapping, got null")
		}
		return policy.RatePolicyDecl{}, false
	}
	d.Known(p, m, "revision", "algorithm", "limit", "window", "capacity", "refill-tokens", "refill-period", "permit-ttl",
		"max-cost", "subject", "failure-mode", "critical", "per-pod-share", "dedup", "shadow", "hierarchy",
		"max-clock-step", "cleanup-grace")
	decl := policy.RatePolicyDecl{ID: id}
	decl.Revision, _ = d.Str(p+".revision", m["revision"])
	alg, _ := d.Str(p+".algorithm", m["algorithm"])
	decl.Algorithm = policy.RateAlgorithm(alg)
	decl.Parameters.Limit, _ = d.Int64In(p+".limit", m["limit"], math.MinInt64, math.MaxInt64)
	decl.Parameters.Window, _ = d.Duration(p+".window", m["window"])
	decl.Parameters.Capacity, _ = d.Int64In(p+".capacity", m["capacity"], math.MinInt64, math.MaxInt64)
	decl.Parameters.RefillTokens, _ = d.Int64In(p+".refill-tokens", m["refill-tokens"], math.MinInt64, math.MaxInt64)
	decl.Parameters.RefillPeriod, _ = d.Duration(p+".refill-period", m["refill-period"])
	decl.Parameters.PermitTTL, _ = d.Duration(p+".permit-ttl", m["permit-ttl"])
	decl.MaxCost, _ = d.Int64In(p+".max-cost", m["max-cost"], math.MinInt64, math.MaxInt64)
	if dims, ok := d.StrList(p+".subject", m["subject"]); ok {
		for _, s := range dims {
			decl.Dimensions = append(decl.Dimensions, policy.RateDimension(s))
		}
	}
	fm, _ := d.Str(p+".failure-mode", m["failure-mode"])
	decl.FailureMode = policy.RateFailureMode(fm)
	decl.Critical, _ = d.Bool(p+".critical", m["critical"])
	decl.PerPodShare, _ = d.Float(p+".per-pod-share", m["per-pod-share"])
	if dm, ok := d.Object(p+".dedup", m["dedup"]); ok {
		d.Known(p+".dedup", dm, "enabled", "ttl", "max-entries")
		decl.Dedup.Enabled, _ = d.Bool(p+".dedup.enabled", dm["enabled"])
		decl.Dedup.TTL, _ = d.Duration(p+".dedup.ttl", dm["ttl"])
		n, _ := d.Int64In(p+".dedup.max-entries", dm["max-entries"], math.MinInt32, math.MaxInt32)
		decl.Dedup.MaxEntries = int(n)
	}
	decl.Shadow, _ = d.Bool(p+".shadow", m["shadow"])
	decl.Hierarchy, _ = d.Str(p+".hierarchy", m["hierarchy"])
	decl.MaxClockStep, _ = d.Duration(p+".max-clock-step", m["max-clock-step"])
	decl.CleanupGrace, _ = d.Duration(p+".cleanup-grace", m["cleanup-grace"])
	return decl, true
}

// route decodes one routes entry: {route, method?, policies: [{policy, cost?, dimensions?}]}.
func (d *decoder) route(p string, v any) (RouteRule, bool) {
	m, ok := d.Object(p, v)
	if !ok {
		return RouteRule{}, false
	}
	d.Known(p, m, "route", "method", "policies")
	var r RouteRule
	r.Route, _ = d.Str(p+".route", m["route"])
	r.Method, _ = d.Str(p+".method", m["method"])
	if r.Route == "" || len(r.Route) > 256 {
		d.Problems.Add(p+".route", policy.RuleRateParameters, "required, at most 256 bytes")
	}
	l, ok := m["policies"].([]any)
	if !ok || len(l) == 0 || len(l) > MaxSelections {
		d.Problems.Add(p+".policies", policy.RuleRateCount, "must be a list of 1..%d selections", MaxSelections)
		return r, false
	}
	for i, e := range l {
		sp := fmt.Sprintf("%s.policies.%d", p, i)
		sm, ok := d.Object(sp, e)
		if !ok {
			continue
		}
		d.Known(sp, sm, "policy", "cost", "dimensions")
		s := Selection{Cost: 1}
		s.Policy, _ = d.Str(sp+".policy", sm["policy"])
		if sm["cost"] != nil {
			s.Cost, _ = d.Int64In(sp+".cost", sm["cost"], 1, policy.RateMaxLimit)
		}
		if dm, ok := d.Object(sp+".dimensions", sm["dimensions"]); ok {
			s.Dimensions = map[string]string{}
			for k, v := range dm {
				src, ok := d.Str(sp+".dimensions."+k, v)
				if !ok {
					continue
				}
				if !policy.RateDimension(k).Valid() || !validSource(src) {
					d.Problems.Add(sp+".dimensions."+k, policy.RuleRateDimensions, "unknown dimension or attribute source")
					continue
				}
				s.Dimensions[k] = src
			}
		}
		r.Selections = append(r.Selections, s)
	}
	return r, true
}

// decoder reads the capability's block with the shared strict reader.
type decoder struct{ strict.Reader }
