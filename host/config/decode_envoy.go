package config

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/policy"
)

// EnvoyRateLimit configures the Envoy rate-limit service of `caphost
// serve` (server.envoy-rate-limit; nil when absent): a gRPC listener that
// answers envoy.service.ratelimit.v3 from envoyproxy/ratelimit descriptor
// files (see package host/ratelimit/envoyrls).
type EnvoyRateLimit struct {
	// Listen is the gRPC listener's host:port (required).
	Listen string
	// ConfigFiles are the descriptor files, resolved against the
	// configuration file's directory; Descriptors is what they hold,
	// loaded and checked with the rest of the configuration.
	ConfigFiles []string
	Descriptors *rlsconfig.Config
	// RedisRole holds the counters (default coordination; never cache).
	RedisRole policy.Role
	// Algorithm and FailureMode apply to every rule without a caphost
	// block of its own (defaults fixed-window and fail-closed).
	Algorithm   policy.RateAlgorithm
	FailureMode policy.RateFailureMode
	// LocalEmergency is the local emergency limiter of local-emergency
	// rules (nil: none, and such a rule is a problem).
	LocalEmergency *ratelimit.LocalEmergencyConfig
	// SelectorDomains are answered through the rate-limit capability's
	// selector (its rate-policy guest) instead of descriptor files.
	SelectorDomains []string
	// ResponseHeaders adds RateLimit-Limit/-Remaining/-Reset for Envoy.
	ResponseHeaders bool
	// HeaderLimit, HeaderRemaining and HeaderReset rename the response
	// headers (empty: the defaults).
	HeaderLimit, HeaderRemaining, HeaderReset string
	// ShadowMode answers every call OK overall, whatever its descriptors'
	// statuses (envoyproxy/ratelimit's SHADOW_MODE).
	ShadowMode bool
	// AttemptTimeout bounds one program call (0: the request's deadline).
	AttemptTimeout time.Duration
}

// Bounds of server.envoy-rate-limit.
const (
	MaxEnvoyConfigFiles     = 64
	MaxEnvoyAttemptTimeout  = 30 * time.Second
	envoyPath               = "server.envoy-rate-limit"
	RuleEnvoyRateLimit      = policy.Rule("server.envoy-rate-limit")
	RuleEnvoyRateLimitFiles = policy.Rule("server.envoy-rate-limit.config-files")
)

// envoyRateLimit decodes server.envoy-rate-limit and marks its role as
// selected (so that redis.roles must bind it).
func (d *decoder) envoyRateLimit(m map[string]any, selected map[policy.Role]string) *EnvoyRateLimit {
	d.Known(envoyPath, m, "listen", "config-files", "redis-role", "algorithm", "failure-mode", "response-headers", "attempt-timeout", "local-emergency", "selector-domains", "shadow-mode", "response-header-names")
	e := &EnvoyRateLimit{RedisRole: policy.RoleCoordination, Algorithm: policy.RateFixedWindow, FailureMode: policy.FailClosed}
	if s, ok := d.Str(envoyPath+".listen", m["listen"]); ok {
		e.Listen = s
		if err := policy.CheckEndpoint(s); err != nil {
			d.Problems.Add(envoyPath+".listen", policy.RuleServerListen, "%v", err)
		}
	} else if m["listen"] == nil {
		d.Problems.Add(envoyPath+".listen", policy.RuleServerListen, "required: the gRPC listener's host:port")
	}
	if s, ok := d.Str(envoyPath+".redis-role", m["redis-role"]); ok {
		r, err := policy.ParseRole(s)
		switch {
		case err != nil:
			d.Problems.Add(envoyPath+".redis-role", policy.RuleCapabilityRole, "unknown role (want coordination or session)")
		case r == policy.RoleCache:
			// Evictable state would silently grant fresh quota.
			d.Problems.Add(envoyPath+".redis-role", policy.RuleCapabilityRole, "rate-limit state needs a non-evicting role (coordination or session)")
		default:
			e.RedisRole = r
		}
	}
	if _, dup := selected[e.RedisRole]; !dup {
		selected[e.RedisRole] = "selected by " + envoyPath
	}
	if s, ok := d.Str(envoyPath+".algorithm", m["algorithm"]); ok {
		if a := policy.RateAlgorithm(s); slices.Contains(rlsconfig.Algorithms(), a) {
			e.Algorithm = a
		} else {
			d.Problems.Add(envoyPath+".algorithm", policy.RuleRateAlgorithm, "want one of %v", rlsconfig.Algorithms())
		}
	}
	if le, ok := d.Object(envoyPath+".local-emergency", m["local-emergency"]); ok {
		e.LocalEmergency = ratelimit.DecodeLocalEmergency(&d.Reader, envoyPath+".local-emergency", le)
	}
	if s, ok := d.Str(envoyPath+".failure-mode", m["failure-mode"]); ok {
		switch f := policy.RateFailureMode(s); f {
		case policy.FailClosed, policy.FailOpenPolicy:
			e.FailureMode = f
		case policy.FailLocal:
			e.FailureMode = f
			if e.LocalEmergency == nil {
				d.Problems.Add(envoyPath+".failure-mode", policy.RuleRateLocal, "local-emergency needs server.envoy-rate-limit.local-emergency")
			}
		default:
			d.Problems.Add(envoyPath+".failure-mode", policy.RuleRateFailureMode, "want fail-closed, fail-open or local-emergency")
		}
	}
	if v, ok := d.Bool(envoyPath+".response-headers", m["response-headers"]); ok {
		e.ResponseHeaders = v
	}
	if hn, ok := d.Object(envoyPath+".response-header-names", m["response-header-names"]); ok {
		p := envoyPath + ".response-header-names"
		d.Known(p, hn, "limit", "remaining", "reset")
		for _, f := range []struct {
			key  string
			name *string
		}{{"limit", &e.HeaderLimit}, {"remaining", &e.HeaderRemaining}, {"reset", &e.HeaderReset}} {
			if s, ok := d.Str(p+"."+f.key, hn[f.key]); ok {
				if rlsconfig.ValidHeaderName(s) {
					*f.name = s
				} else {
					d.Problems.Add(p+"."+f.key, RuleEnvoyRateLimit, "a header name is 1..%d bytes of an HTTP token", rlsconfig.MaxHeaderNameBytes)
				}
			}
		}
		if !e.ResponseHeaders {
			d.Problems.Add(p, RuleEnvoyRateLimit, "header names without response-headers: true would never be sent")
		}
		// Checked as the service will send them: a name may clash with
		// another's default.
		if !rlsconfig.DistinctHeaderNames(rlsconfig.HeaderNamesOrDefaults(e.HeaderLimit, e.HeaderRemaining, e.HeaderReset)) {
			d.Problems.Add(p, RuleEnvoyRateLimit, "the header names must differ (unset names take their defaults)")
		}
	}
	if v, ok := d.Bool(envoyPath+".shadow-mode", m["shadow-mode"]); ok {
		e.ShadowMode = v
	}
	if v, ok := d.Duration(envoyPath+".attempt-timeout", m["attempt-timeout"]); ok {
		if v <= 0 || v > MaxEnvoyAttemptTimeout {
			d.Problems.Add(envoyPath+".attempt-timeout", policy.RuleTimeoutsBound, "must be within (0, %s]", MaxEnvoyAttemptTimeout)
		}
		e.AttemptTimeout = v
	}
	if doms, ok := d.StrList(envoyPath+".selector-domains", m["selector-domains"]); ok {
		for i, dom := range doms {
			p := fmt.Sprintf("%s.selector-domains.%d", envoyPath, i)
			switch {
			case dom == "" || len(dom) > rlsconfig.MaxDomainBytes:
				d.Problems.Add(p, RuleEnvoyRateLimit, "a domain is 1..%d bytes", rlsconfig.MaxDomainBytes)
			case slices.Contains(e.SelectorDomains, dom):
				d.Problems.Add(p, RuleEnvoyRateLimit, "duplicate domain")
			default:
				e.SelectorDomains = append(e.SelectorDomains, dom)
			}
		}
	}
	files, ok := d.StrList(envoyPath+".config-files", m["config-files"])
	switch {
	case !ok && m["config-files"] == nil && len(e.SelectorDomains) > 0:
		// Every domain goes through the selector.
		e.Descriptors, _ = rlsconfig.New()
	case !ok && m["config-files"] == nil:
		d.Problems.Add(envoyPath+".config-files", RuleEnvoyRateLimitFiles, "required: at least one envoyproxy/ratelimit descriptor file")
	case ok && len(files) == 0:
		d.Problems.Add(envoyPath+".config-files", RuleEnvoyRateLimitFiles, "at least one envoyproxy/ratelimit descriptor file is required")
	case ok && len(files) > MaxEnvoyConfigFiles:
		d.Problems.Add(envoyPath+".config-files", RuleEnvoyRateLimitFiles, "%d files, at most %d", len(files), MaxEnvoyConfigFiles)
	case ok:
		d.envoyDescriptors(e, files)
	}
	return e
}

// envoyDescriptors loads the descriptor files and checks that every rule
// becomes a valid caphost policy, so that `caphost check` reports what
// serve would refuse.
func (d *decoder) envoyDescriptors(e *EnvoyRateLimit, files []string) {
	var domains []*rlsconfig.Domain
	good := true
	for i, f := range files {
		p := fmt.Sprintf("%s.config-files.%d", envoyPath, i)
		path := d.resolvePath(f)
		e.ConfigFiles = append(e.ConfigFiles, path)
		data, err := readBounded(d.fsys, path)
		if err != nil {
			d.Problems.Add(p, RuleEnvoyRateLimitFiles, "%v", err)
			good = false
			continue
		}
		dom, err := rlsconfig.Parse(f, data)
		if !d.envoyProblems(p, err) {
			good = false
			continue
		}
		domains = append(domains, dom)
	}
	if !good {
		return
	}
	c, err := rlsconfig.New(domains...)
	if !d.envoyProblems(envoyPath+".config-files", err) {
		return
	}
	for i, dom := range e.SelectorDomains {
		if c.HasDomain(dom) {
			d.Problems.Add(fmt.Sprintf("%s.selector-domains.%d", envoyPath, i), RuleEnvoyRateLimit, "domain is also in config-files")
		}
	}
	po := rlsconfig.PolicyOptions{Algorithm: e.Algorithm, FailureMode: e.FailureMode, PathPrefix: envoyPath + ".rules"}
	if le := e.LocalEmergency; le != nil {
		po.LocalEmergency = &policy.RateLocalEmergency{AssumedMaxPods: le.AssumedMaxPods, PerPodShare: le.PerPodShare}
	}
	_, _, err = rlsconfig.Policies(c, po)
	var verr *policy.ValidationError
	if errors.As(err, &verr) {
		d.Problems = append(d.Problems, verr.Problems...)
		return
	}
	if err != nil {
		d.Problems.Add(envoyPath, RuleEnvoyRateLimit, "%v", err)
		return
	}
	e.Descriptors = c
}

// envoyProblems reports a descriptor load error, one problem per
// descriptor-file problem; it returns whether there was none.
func (d *decoder) envoyProblems(path string, err error) bool {
	if err == nil {
		return true
	}
	var rerr *rlsconfig.Error
	if !errors.As(err, &rerr) {
		d.Problems.Add(path, RuleEnvoyRateLimitFiles, "%v", err)
		return false
	}
	for _, p := range rerr.Problems {
		d.Problems.Add(path, RuleEnvoyRateLimitFiles, "%s", p.String())
	}
	return false
}
