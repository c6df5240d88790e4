package config

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/caphost/caphost/policy"
)

// Defaults applied when a key is absent. The timeouts other than
// timeouts.idle-check (policy.DefaultIdleCheck) and programs.mode have no
// default on purpose: an operator must decide them.
const (
	DefaultClientName  = "caphost"
	DefaultBudgetBytes = 1 << 20
)

// DefaultLanes returns the lane bounds used when lanes.<lane> (or one of its
// keys) is absent.
func DefaultLanes() map[policy.Lane]policy.LaneConfig {
	return map[policy.Lane]policy.LaneConfig{
		policy.LaneRegular:  {PoolSize: 16, MaxInFlight: 256},
		policy.LaneScript:   {PoolSize: 8, MaxInFlight: 128},
		policy.LaneBlocking: {PoolSize: 4, MaxInFlight: 4, CommandTimeout: 10 * time.Second},
		policy.LanePubSub:   {PoolSize: 2, MaxInFlight: 64},
		policy.LaneAdmin:    {PoolSize: 1, MaxInFlight: 1},
	}
}

func (d *decoder) decode(root map[string]any, extra []policy.Role) *Config {
	cfg := &Config{Capabilities: map[string]Capability{}, Server: Server{Listen: DefaultListen}, Dir: d.base}
	d.Known("", root, "capabilities", "guests", "redis", "security", "server")

	selected := map[policy.Role]string{} // role → why it is selected
	if caps, ok := d.Object("capabilities", root["capabilities"]); ok {
		d.capabilities(caps, cfg, selected)
	}
	for _, r := range extra {
		if !r.Valid() {
			d.Problems.Add("(option) roles", policy.RuleRolesUnknown, "unknown role %q (want one of cache, coordination, session)", string(r))
			continue
		}
		if _, ok := selected[r]; !ok {
			selected[r] = "explicitly selected"
		}
	}
	if srv, ok := d.Object("server", root["server"]); ok {
		d.Known("server", srv, "admin-token", "envoy-rate-limit", "listen")
		if s, ok := d.Str("server.listen", srv["listen"]); ok {
			cfg.Server.Listen = s
		}
		if ref, sec, ok := d.secret("server.admin-token", srv["admin-token"]); ok {
			cfg.Server.AdminToken, cfg.Server.AdminTokenRef = sec, ref
		}
		if m, ok := d.Object("server.envoy-rate-limit", srv["envoy-rate-limit"]); ok {
			cfg.Server.EnvoyRateLimit = d.envoyRateLimit(m, selected)
		}
	}
	if err := policy.CheckEndpoint(cfg.Server.Listen); err != nil {
		d.Problems.Add("server.listen", policy.RuleServerListen, "%v", err)
	}

	if g, ok := d.Object("guests", root["guests"]); ok {
		d.guests(g, &cfg.Guests)
	}
	if s, ok := d.Object("security", root["security"]); ok {
		d.security(s, &cfg.Security)
	}

	redis, _ := d.Object("redis", root["redis"])
	d.Known("redis", redis, "allow-unsafe-colocation", "deployments", "keys", "programs", "roles", "startup")
	d.redis(redis, selected, &cfg.Redis)
	d.capabilityModules(cfg)
	return cfg
}

func (d *decoder) redis(redis map[string]any, selected map[policy.Role]string, out *policy.RedisConfig) {
	out.Deployments = map[string]policy.Deployment{}
	out.Roles = map[policy.Role]policy.RoleBinding{}
	if v, ok := d.Bool("redis.allow-unsafe-colocation", redis["allow-unsafe-colocation"]); ok {
		out.AllowUnsafeColocation = v
	}
	roles, _ := d.Object("redis.roles", redis["roles"])
	for name := range roles {
		if !policy.Role(name).Valid() {
			d.Problems.Add("redis.roles."+name, policy.RuleRolesUnknown, "unknown role (want one of cache, coordination, session)")
		}
	}
	deps, _ := d.Object("redis.deployments", redis["deployments"])
	wanted := map[string]bool{}
	for _, r := range policy.Roles() {
		why, ok := selected[r]
		if !ok {
			continue // unselected: not decoded, not validated
		}
		p := "redis.roles." + string(r)
		raw, present := roles[string(r)]
		if !present {
			d.Problems.Add(p, policy.RuleRolesMissing, "role is %s but not configured", why)
			continue
		}
		b, ok := d.Object(p, raw)
		if !ok {
			if raw == nil {
				d.Problems.Add(p, policy.RuleRolesMissing, "role is %s but empty", why)
			}
			continue
		}
		d.Known(p, b, "deployment", "expected-eviction", "required")
		var rb policy.RoleBinding
		rb.Deployment, _ = d.Str(p+".deployment", b["deployment"])
		rb.ExpectedEviction, _ = d.Str(p+".expected-eviction", b["expected-eviction"])
		if b["required"] == nil {
			d.Problems.Add(p+".required", policy.RuleRolesRequired, "must be set explicitly to true or false")
		} else {
			rb.Required, _ = d.Bool(p+".required", b["required"])
		}
		out.Roles[r] = rb
		if rb.Deployment != "" {
			wanted[rb.Deployment] = true
		}
	}
	ids := make([]string, 0, len(wanted))
	for id := range wanted {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		raw, ok := deps[id]
		if !ok {
			continue // policy reports roles.deployment
		}
		p := "redis.deployments." + id
		m, ok := d.Object(p, raw)
		if !ok {
			if raw == nil {
				d.Problems.Add(p, policy.RuleTopologyExactlyOne, "exactly one of standalone, sentinel, cluster is required")
			}
			continue
		}
		out.Deployments[id] = d.deployment(p, id, m)
	}
	if len(out.Roles) == 0 && len(selected) == 0 {
		return // Redis unused: programs and keys are not decoded
	}
	if prog, ok := d.Object("redis.programs", redis["programs"]); ok {
		d.Known("redis.programs", prog, "mode")
		if s, ok := d.Str("redis.programs.mode", prog["mode"]); ok {
			out.Programs.Mode = policy.ProgramMode(s)
		}
	}
	out.Startup = d.startup(redis["startup"])
	keys, _ := d.Object("redis.keys", redis["keys"])
	d.Known("redis.keys", keys, "app", "env", "hmac")
	out.Keys.App, _ = d.Str("redis.keys.app", keys["app"])
	out.Keys.Env, _ = d.Str("redis.keys.env", keys["env"])
	hmac, _ := d.Object("redis.keys.hmac", keys["hmac"])
	d.Known("redis.keys.hmac", hmac, "versions", "write-version")
	if hmac["write-version"] == nil {
		d.Problems.Add("redis.keys.hmac.write-version", policy.RuleKeysHMACWrite, "required")
	} else {
		out.Keys.HMAC.WriteVersion, _ = d.Int("redis.keys.hmac.write-version", hmac["write-version"])
	}
	versions, _ := d.Object("redis.keys.hmac.versions", hmac["versions"])
	out.Keys.HMAC.Versions = map[int]policy.Secret{}
	vkeys := make([]string, 0, len(versions))
	for k := range versions {
		vkeys = append(vkeys, k)
	}
	sort.Strings(vkeys)
	if len(vkeys) > policy.MaxHMACVersions {
		// Do not resolve an unbounded number of secrets; policy reports the count.
		vkeys = vkeys[:policy.MaxHMACVersions+1]
	}
	for _, k := range vkeys {
		p := "redis.keys.hmac.versions." + k
		n, err := strconv.Atoi(k)
		if err != nil || strconv.Itoa(n) != k {
			d.Problems.Add(p, policy.RuleKeysHMACVersions, "version must be a positive integer")
			continue
		}
		_, sec, _ := d.secret(p, versions[k])
		out.Keys.HMAC.Versions[n] = sec
	}
}

func (d *decoder) deployment(p, id string, m map[string]any) policy.Deployment {
	d.Known(p, m, "auth", "budgets", "client-name", "cluster", "database", "lanes", "sentinel", "standalone", "timeouts", "tls")
	dep := policy.Deployment{
		ID:         id,
		ClientName: DefaultClientName,
		Auth:       map[policy.Lane]policy.Credential{},
		Timeouts:   policy.Timeouts{IdleCheck: policy.DefaultIdleCheck},
		Lanes:      DefaultLanes(),
		Budgets:    policy.Budgets{MaxRequestBytes: DefaultBudgetBytes, MaxReplyBytes: DefaultBudgetBytes},
	}
	var blocks []string
	for _, k := range []string{"cluster", "sentinel", "standalone"} {
		if _, ok := m[k]; ok {
			blocks = append(blocks, k)
		}
	}
	switch len(blocks) {
	case 0:
		d.Problems.Add(p, policy.RuleTopologyExactlyOne, "exactly one of standalone, sentinel, cluster is required; none given")
	case 1:
		dep.Topology = d.topology(p+"."+blocks[0], blocks[0], m[blocks[0]])
	default:
		d.Problems.Add(p, policy.RuleTopologyExactlyOne, "exactly one of standalone, sentinel, cluster is allowed; found %v", blocks)
	}
	if v, ok := d.Int(p+".database", m["database"]); ok {
		dep.Database = v
	}
	if v, ok := d.Str(p+".client-name", m["client-name"]); ok {
		dep.ClientName = v
	}
	if auth, ok := d.Object(p+".auth", m["auth"]); ok {
		allowed := []string{"admin-shared", "default"}
		for _, l := range policy.Lanes() {
			allowed = append(allowed, string(l))
		}
		d.Known(p+".auth", auth, allowed...)
		if v, ok := d.Bool(p+".auth.admin-shared", auth["admin-shared"]); ok {
			dep.AdminShared = v
		}
		if c, ok := d.credential(p+".auth.default", auth["default"]); ok {
			dep.Default = c
		}
		for _, l := range policy.Lanes() {
			if c, ok := d.credential(p+".auth."+string(l), auth[string(l)]); ok {
				dep.Auth[l] = c
			}
		}
	}
	dep.TLS = d.tls(p+".tls", m["tls"])
	if t, ok := d.Object(p+".timeouts", m["timeouts"]); ok {
		d.Known(p+".timeouts", t, "acquire", "command", "connect", "idle-check", "shutdown")
		dep.Timeouts.Connect, _ = d.Duration(p+".timeouts.connect", t["connect"])
		dep.Timeouts.Command, _ = d.Duration(p+".timeouts.command", t["command"])
		dep.Timeouts.Acquire, _ = d.Duration(p+".timeouts.acquire", t["acquire"])
		dep.Timeouts.Shutdown, _ = d.Duration(p+".timeouts.shutdown", t["shutdown"])
		if v, ok := d.Duration(p+".timeouts.idle-check", t["idle-check"]); ok {
			dep.Timeouts.IdleCheck = v
		}
	}
	if lanes, ok := d.Object(p+".lanes", m["lanes"]); ok {
		var allowed []string
		for _, l := range policy.Lanes() {
			allowed = append(allowed, string(l))
		}
		d.Known(p+".lanes", lanes, allowed...)
		for _, l := range policy.Lanes() {
			lp := p + ".lanes." + string(l)
			lm, ok := d.Object(lp, lanes[string(l)])
			if !ok {
				continue
			}
			d.Known(lp, lm, "command-timeout", "max-in-flight", "pool-size")
			lc := dep.Lanes[l]
			if v, ok := d.Int(lp+".pool-size", lm["pool-size"]); ok {
				lc.PoolSize = v
			}
			if v, ok := d.Int(lp+".max-in-flight", lm["max-in-flight"]); ok {
				lc.MaxInFlight = v
			}
			if v, ok := d.Duration(lp+".command-timeout", lm["command-timeout"]); ok {
				lc.CommandTimeout = v
			}
			dep.Lanes[l] = lc
		}
	}
	if b, ok := d.Object(p+".budgets", m["budgets"]); ok {
		d.Known(p+".budgets", b, "max-reply-bytes", "max-request-bytes")
		if v, ok := d.Int(p+".budgets.max-request-bytes", b["max-request-bytes"]); ok {
			dep.Budgets.MaxRequestBytes = v
		}
		if v, ok := d.Int(p+".budgets.max-reply-bytes", b["max-reply-bytes"]); ok {
			dep.Budgets.MaxReplyBytes = v
		}
	}
	return dep
}

// startup decodes redis.startup; every absent key keeps its default
// (policy.StartupPolicy.WithDefaults), and policy validates the bounds.
func (d *decoder) startup(v any) policy.StartupPolicy {
	s := policy.StartupPolicy{}.WithDefaults()
	m, ok := d.Object("redis.startup", v)
	if !ok {
		return s
	}
	const p = "redis.startup"
	d.Known(p, m, "attempt-timeout", "on-failure", "retry-initial", "retry-max")
	if v, ok := d.Str(p+".on-failure", m["on-failure"]); ok {
		s.OnFailure = policy.StartupOnFailure(v)
		if v == "" {
			// An explicit empty string is not "the default": policy would read
			// it as such, so it is refused here.
			d.Problems.Add(p+".on-failure", policy.RuleStartupOnFailure, "unknown policy (want one of retry, fail-on-misconfiguration, fail)")
		}
	}
	// A zero duration would silently mean "default" to policy; it is
	// refused as out of bounds instead.
	dur := func(key string, dst *time.Duration) {
		if v, ok := d.Duration(p+"."+key, m[key]); ok {
			if v == 0 {
				d.Problems.Add(p+"."+key, policy.RuleStartupBound, "must be > 0")
				return
			}
			*dst = v
		}
	}
	dur("retry-initial", &s.RetryInitial)
	dur("retry-max", &s.RetryMax)
	dur("attempt-timeout", &s.AttemptTimeout)
	if _, set := m["retry-max"]; !set {
		s.RetryMax = max(policy.DefaultStartupRetryMax, s.RetryInitial)
	}
	return s
}

func (d *decoder) topology(p, kind string, v any) policy.Topology {
	m, ok := d.Object(p, v)
	if !ok {
		if v == nil {
			d.Problems.Add(p, policy.RuleType, "must be a mapping, got null")
		}
		return nil
	}
	switch kind {
	case "standalone":
		d.Known(p, m, "endpoint")
		t := &policy.Standalone{}
		t.Endpoint, _ = d.Str(p+".endpoint", m["endpoint"])
		return t
	case "sentinel":
		d.Known(p, m, "auth", "endpoints", "master-name", "tls")
		t := &policy.Sentinel{}
		t.MasterName, _ = d.Str(p+".master-name", m["master-name"])
		t.Endpoints, _ = d.StrList(p+".endpoints", m["endpoints"])
		if c, ok := d.credential(p+".auth", m["auth"]); ok {
			t.Auth = c
		}
		t.TLS = d.tls(p+".tls", m["tls"])
		return t
	default:
		d.Known(p, m, "seeds")
		t := &policy.Cluster{}
		t.Seeds, _ = d.StrList(p+".seeds", m["seeds"])
		return t
	}
}

// tls decodes a TLS block. Hostname verification defaults to on. When TLS
// is enabled the configured files must be readable now, so a typo fails at
// startup rather than at the first handshake; paths are made absolute.
func (d *decoder) tls(p string, v any) policy.TLSConfig {
	var t policy.TLSConfig
	m, ok := d.Object(p, v)
	if !ok {
		return t
	}
	d.Known(p, m, "ca-file", "cert-file", "enabled", "key-file", "server-name", "verify-hostname")
	t.Enabled, _ = d.Bool(p+".enabled", m["enabled"])
	if verify, ok := d.Bool(p+".verify-hostname", m["verify-hostname"]); ok {
		t.SkipVerifyHostname = !verify
	}
	t.ServerName, _ = d.Str(p+".server-name", m["server-name"])
	file := func(key string) string {
		s, ok := d.Str(p+"."+key, m[key])
		if !ok || s == "" {
			return ""
		}
		s = d.resolvePath(s)
		if t.Enabled {
			if err := readable(s); err != nil {
				d.Problems.Add(p+"."+key, policy.RuleTLSFile, "%v", err)
			}
		}
		return s
	}
	t.CAFile, t.CertFile, t.KeyFile = file("ca-file"), file("cert-file"), file("key-file")
	return t
}

func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("file %s cannot be opened", path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("file %s is not a regular file", path)
	}
	return nil
}
