package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caphost/caphost/policy"
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
}

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
	cfg := Config{Provider: provider, RedisRole: role, DegradedProvider: DegradedDisabled}
	if cfg.RedisRole == "" {
		cfg.RedisRole = policy.RoleCoordination
	}
	if provider != ProviderRedis {
		d.ps.Add(capPath+".provider", policy.RuleCapabilityProvider, "the rate-limit capability needs provider redis")
	}
	if !cfg.RedisRole.Valid() || cfg.RedisRole == policy.RoleCache {
		// The cache role is evictable: a limiter whose state can be evicted
		// silently grants fresh quota.
		d.ps.Add(capPath+".redis-role", policy.RuleCapabilityRole, "rate-limit state needs a non-evicting role (coordination or session)")
	}
	d.known(capPath, raw, "degraded-provider", "local-emergency", "attempt-timeout", "shadow-sample-log", "policies", "routes")
	if s, ok := d.str(capPath+".degraded-provider", raw["degraded-provider"]); ok {
		switch s {
		case DegradedDisabled, DegradedLocalEmergency:
			cfg.DegradedProvider = s
		default:
			d.ps.Add(capPath+".degraded-provider", policy.RuleCapabilityProvider, "want disabled or local-emergency")
		}
	}
	if v, ok := d.duration(capPath+".attempt-timeout", raw["attempt-timeout"]); ok {
		if v <= 0 || v > MaxAttemptTime {
			d.ps.Add(capPath+".attempt-timeout", policy.RuleTimeoutsBound, "must be within (0, %s]", MaxAttemptTime)
		}
		cfg.AttemptTimeout = v
	}
	if m, ok := d.object(capPath+".shadow-sample-log", raw["shadow-sample-log"]); ok {
		d.known(capPath+".shadow-sample-log", m, "per-minute")
		if n, ok := d.integer(capPath+".shadow-sample-log.per-minute", m["per-minute"], 0, 600); ok {
			cfg.ShadowSampleLog.PerMinute = int(n)
		}
	}
	le, leOK := d.object(capPath+".local-emergency", raw["local-emergency"])
	switch {
	case cfg.DegradedProvider == DegradedLocalEmergency && !leOK:
		if raw["local-emergency"] == nil {
			d.ps.Add(capPath+".local-emergency", policy.RuleRateLocal, "required with degraded-provider: local-emergency")
		}
	case cfg.DegradedProvider != DegradedLocalEmergency && raw["local-emergency"] != nil:
		d.ps.Add(capPath+".local-emergency", policy.RuleRateLocal, "only allowed with degraded-provider: local-emergency")
	case leOK:
		cfg.LocalEmergency = d.local(le)
	}
	if m, ok := d.object(capPath+".policies", raw["policies"]); ok {
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
		d.ps.Add(capPath+".policies", policy.RuleRateCount, "at least one policy is required")
	}
	if l, ok := raw["routes"].([]any); ok {
		if len(l) > MaxRoutes {
			d.ps.Add(capPath+".routes", policy.RuleRateCount, "%d routes, at most %d allowed", len(l), MaxRoutes)
		} else {
			for i, e := range l {
				if r, ok := d.route(fmt.Sprintf("%s.routes.%d", capPath, i), e); ok {
					cfg.Routes = append(cfg.Routes, r)
				}
			}
		}
	} else if raw["routes"] != nil {
		d.ps.Add(capPath+".routes", policy.RuleType, "must be a list, got %s", kind(raw["routes"]))
	}
	// Policy semantics (bounds, fail-open, per-pod share) are checked by the
	// compiler; they are reported together with the shape problems.
	if _, err := cfg.CompilePolicies(); err != nil {
		var verr *policy.ValidationError
		if errors.As(err, &verr) {
			d.ps = append(d.ps, verr.Problems...)
		}
	}
	for i, r := range cfg.Routes {
		for j, s := range r.Selections {
			if !containsID(cfg.Policies, s.Policy) {
				d.ps.Add(fmt.Sprintf("%s.routes.%d.policies.%d.policy", capPath, i, j), policy.RuleRateID, "unknown policy")
			}
		}
	}
	if err := d.ps.Err(); err != nil {
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

func (d *decoder) local(m map[string]any) *LocalEmergencyConfig {
	p := capPath + ".local-emergency"
	d.known(p, m, "maximum-entries", "entry-ttl", "maximum-in-flight", "assumed-maximum-pods", "per-pod-share")
	le := &LocalEmergencyConfig{}
	req := func(k string) bool {
		if m[k] == nil {
			d.ps.Add(p+"."+k, policy.RuleRateLocal, "required")
			return false
		}
		return true
	}
	if req("maximum-entries") {
		if n, ok := d.integer(p+".maximum-entries", m["maximum-entries"], 1, MaxLocalEntries); ok {
			le.MaxEntries = int(n)
		}
	}
	if req("entry-ttl") {
		if v, ok := d.duration(p+".entry-ttl", m["entry-ttl"]); ok {
			if v < time.Millisecond || v > MaxLocalEntryTTL {
				d.ps.Add(p+".entry-ttl", policy.RuleRateLocal, "must be within 1ms..%s", MaxLocalEntryTTL)
			}
			le.EntryTTL = v
		}
	}
	if req("maximum-in-flight") {
		if n, ok := d.integer(p+".maximum-in-flight", m["maximum-in-flight"], 1, MaxLocalInFlight); ok {
			le.MaxInFlight = int(n)
		}
	}
	if req("assumed-maximum-pods") {
		if n, ok := d.integer(p+".assumed-maximum-pods", m["assumed-maximum-pods"], 1, MaxAssumedPods); ok {
			le.AssumedMaxPods = int(n)
		}
	}
	if req("per-pod-share") {
		if f, ok := d.float(p+".per-pod-share", m["per-pod-share"]); ok {
			switch {
			case f <= 0 || f > 1:
				d.ps.Add(p+".per-pod-share", policy.RuleRateLocal, "must be within (0, 1]")
			case le.AssumedMaxPods > 0 && f*float64(le.AssumedMaxPods) > 1+1e-12:
				d.ps.Add(p+".per-pod-share", policy.RuleRateLocal, "per-pod-share × assumed-maximum-pods must not exceed 1")
			}
			le.PerPodShare = f
		}
	}
	return le
}

// policy decodes one policy block.
func (d *decoder) policy(id string, v any) (policy.RatePolicyDecl, bool) {
	p := capPath + ".policies." + id
	m, ok := d.object(p, v)
	if !ok {
		if v == nil {
			d.ps.Add(p, policy.RuleType, "must be a mapping, got null")
		}
		return policy.RatePolicyDecl{}, false
	}
	d.known(p, m, "revision", "algorithm", "limit", "window", "capacity", "refill-tokens", "refill-period", "permit-ttl",
		"max-cost", "subject", "failure-mode", "critical", "per-pod-share", "dedup", "shadow", "hierarchy",
		"max-clock-step", "cleanup-grace")
	decl := policy.RatePolicyDecl{ID: id}
	decl.Revision, _ = d.str(p+".revision", m["revision"])
	alg, _ := d.str(p+".algorithm", m["algorithm"])
	decl.Algorithm = policy.RateAlgorithm(alg)
	decl.Parameters.Limit, _ = d.integer(p+".limit", m["limit"], math.MinInt64, math.MaxInt64)
	decl.Parameters.Window, _ = d.duration(p+".window", m["window"])
	decl.Parameters.Capacity, _ = d.integer(p+".capacity", m["capacity"], math.MinInt64, math.MaxInt64)
	decl.Parameters.RefillTokens, _ = d.integer(p+".refill-tokens", m["refill-tokens"], math.MinInt64, math.MaxInt64)
	decl.Parameters.RefillPeriod, _ = d.duration(p+".refill-period", m["refill-period"])
	decl.Parameters.PermitTTL, _ = d.duration(p+".permit-ttl", m["permit-ttl"])
	decl.MaxCost, _ = d.integer(p+".max-cost", m["max-cost"], math.MinInt64, math.MaxInt64)
	if dims, ok := d.strList(p+".subject", m["subject"]); ok {
		for _, s := range dims {
			decl.Dimensions = append(decl.Dimensions, policy.RateDimension(s))
		}
	}
	fm, _ := d.str(p+".failure-mode", m["failure-mode"])
	decl.FailureMode = policy.RateFailureMode(fm)
	decl.Critical, _ = d.boolean(p+".critical", m["critical"])
	decl.PerPodShare, _ = d.float(p+".per-pod-share", m["per-pod-share"])
	if dm, ok := d.object(p+".dedup", m["dedup"]); ok {
		d.known(p+".dedup", dm, "enabled", "ttl", "max-entries")
		decl.Dedup.Enabled, _ = d.boolean(p+".dedup.enabled", dm["enabled"])
		decl.Dedup.TTL, _ = d.duration(p+".dedup.ttl", dm["ttl"])
		n, _ := d.integer(p+".dedup.max-entries", dm["max-entries"], math.MinInt32, math.MaxInt32)
		decl.Dedup.MaxEntries = int(n)
	}
	decl.Shadow, _ = d.boolean(p+".shadow", m["shadow"])
	decl.Hierarchy, _ = d.str(p+".hierarchy", m["hierarchy"])
	decl.MaxClockStep, _ = d.duration(p+".max-clock-step", m["max-clock-step"])
	decl.CleanupGrace, _ = d.duration(p+".cleanup-grace", m["cleanup-grace"])
	return decl, true
}

// route decodes one routes entry: {route, method?, policies: [{policy, cost?, dimensions?}]}.
func (d *decoder) route(p string, v any) (RouteRule, bool) {
	m, ok := d.object(p, v)
	if !ok {
		return RouteRule{}, false
	}
	d.known(p, m, "route", "method", "policies")
	var r RouteRule
	r.Route, _ = d.str(p+".route", m["route"])
	r.Method, _ = d.str(p+".method", m["method"])
	if r.Route == "" || len(r.Route) > 256 {
		d.ps.Add(p+".route", policy.RuleRateParameters, "required, at most 256 bytes")
	}
	l, ok := m["policies"].([]any)
	if !ok || len(l) == 0 || len(l) > MaxSelections {
		d.ps.Add(p+".policies", policy.RuleRateCount, "must be a list of 1..%d selections", MaxSelections)
		return r, false
	}
	for i, e := range l {
		sp := fmt.Sprintf("%s.policies.%d", p, i)
		sm, ok := d.object(sp, e)
		if !ok {
			continue
		}
		d.known(sp, sm, "policy", "cost", "dimensions")
		s := Selection{Cost: 1}
		s.Policy, _ = d.str(sp+".policy", sm["policy"])
		if sm["cost"] != nil {
			s.Cost, _ = d.integer(sp+".cost", sm["cost"], 1, policy.RateMaxLimit)
		}
		if dm, ok := d.object(sp+".dimensions", sm["dimensions"]); ok {
			s.Dimensions = map[string]string{}
			for k, v := range dm {
				src, ok := d.str(sp+".dimensions."+k, v)
				if !ok {
					continue
				}
				if !policy.RateDimension(k).Valid() || !validSource(src) {
					d.ps.Add(sp+".dimensions."+k, policy.RuleRateDimensions, "unknown dimension or attribute source")
					continue
				}
				s.Dimensions[k] = src
			}
		}
		r.Selections = append(r.Selections, s)
	}
	return r, true
}

// decoder collects problems while reading untyped YAML values.
type decoder struct{ ps policy.Problems }

func (d *decoder) known(path string, m map[string]any, keys ...string) {
	for k := range m {
		found := false
		for _, want := range keys {
			found = found || k == want
		}
		if !found {
			d.ps.Add(path+"."+boundKey(k), policy.RuleUnknownKey, "unknown key")
		}
	}
}

func boundKey(k string) string {
	if len(k) > 48 {
		return k[:48] + "..."
	}
	return k
}

func (d *decoder) object(path string, v any) (map[string]any, bool) {
	switch m := v.(type) {
	case nil:
		return nil, false
	case map[string]any:
		return m, true
	}
	d.ps.Add(path, policy.RuleType, "must be a mapping, got %s", kind(v))
	return nil, false
}

func (d *decoder) str(path string, v any) (string, bool) {
	switch s := v.(type) {
	case nil:
		return "", false
	case string:
		return s, true
	}
	d.ps.Add(path, policy.RuleType, "must be a string, got %s", kind(v))
	return "", false
}

func (d *decoder) boolean(path string, v any) (bool, bool) {
	switch b := v.(type) {
	case nil:
		return false, false
	case bool:
		return b, true
	case string: // environment overrides arrive as strings
		switch strings.ToLower(strings.TrimSpace(b)) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	d.ps.Add(path, policy.RuleType, "must be true or false, got %s", kind(v))
	return false, false
}

// integer accepts YAML integers, integral floats and decimal strings
// (environment overrides) within [lo, hi].
func (d *decoder) integer(path string, v any, lo, hi int64) (int64, bool) {
	var n int64
	switch x := v.(type) {
	case nil:
		return 0, false
	case int:
		n = int64(x)
	case int64:
		n = x
	case uint64:
		if x > math.MaxInt64 {
			d.ps.Add(path, policy.RuleType, "integer out of range")
			return 0, false
		}
		n = int64(x)
	case float64:
		if x != math.Trunc(x) || x < -(1<<53) || x > 1<<53 {
			d.ps.Add(path, policy.RuleType, "must be an integer, got %s", kind(v))
			return 0, false
		}
		n = int64(x)
	case string:
		parsed, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			d.ps.Add(path, policy.RuleType, "must be an integer, got %s", kind(v))
			return 0, false
		}
		n = parsed
	default:
		d.ps.Add(path, policy.RuleType, "must be an integer, got %s", kind(v))
		return 0, false
	}
	if n < lo || n > hi {
		d.ps.Add(path, policy.RuleType, "must be within %d..%d", lo, hi)
		return 0, false
	}
	return n, true
}

func (d *decoder) float(path string, v any) (float64, bool) {
	switch x := v.(type) {
	case nil:
		return 0, false
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			return x, true
		}
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true
		}
	}
	d.ps.Add(path, policy.RuleType, "must be a number, got %s", kind(v))
	return 0, false
}

// duration accepts Go duration strings only: a bare number's unit would be a guess.
func (d *decoder) duration(path string, v any) (time.Duration, bool) {
	if v == nil {
		return 0, false
	}
	if s, ok := v.(string); ok {
		if dur, err := time.ParseDuration(strings.TrimSpace(s)); err == nil {
			return dur, true
		}
	}
	d.ps.Add(path, policy.RuleType, "must be a duration with a unit such as 250ms or 1m, got %s", kind(v))
	return 0, false
}

func (d *decoder) strList(path string, v any) ([]string, bool) {
	switch l := v.(type) {
	case nil:
		return nil, false
	case string:
		var out []string
		for _, s := range strings.Split(l, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, true
	case []any:
		out := make([]string, 0, len(l))
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				d.ps.Add(fmt.Sprintf("%s.%d", path, i), policy.RuleType, "must be a string, got %s", kind(e))
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	d.ps.Add(path, policy.RuleType, "must be a list of strings, got %s", kind(v))
	return nil, false
}

// kind names a value's YAML type without echoing the value.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int64, uint64:
		return "an integer"
	case float64:
		return "a number"
	}
	return "an unsupported value"
}
