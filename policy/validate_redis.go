package policy

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Hard caps. Configuration may choose smaller values, never larger ones:
// they bound memory, connections and waiting time whatever the file says.
const (
	MaxSlugBytes          = 32
	MaxEndpoints          = 64
	MaxDatabase           = 1023
	MaxMasterNameBytes    = 128
	MaxConnectTimeout     = 30 * time.Second
	MaxCommandTimeout     = 30 * time.Second
	MaxAcquireTimeout     = 30 * time.Second
	MaxShutdownTimeout    = 5 * time.Minute
	MaxLaneCommandTimeout = 5 * time.Minute
	MaxIdleCheck          = time.Second
	MaxPoolSize           = 1024
	MaxInFlight           = 65536
	MaxBudgetBytes        = 64 << 20
	MaxHMACVersions       = 4
	MaxHMACVersion        = 9999

	// MinSentinelEndpoints is the fewest Sentinels a sentinel topology may
	// name: discovery needs a quorum of two that one Sentinel down leaves.
	MinSentinelEndpoints = 3
	MinHMACMaterialBytes = 32
	MaxHMACMaterialBytes = 1024
	// Startup handshake bounds: a retry never spins faster than
	// MinStartupRetry, never waits longer than MaxStartupRetryMax, and one
	// attempt never hangs longer than MaxStartupAttemptTimeout.
	MinStartupRetry          = 10 * time.Millisecond
	MaxStartupRetryInitial   = time.Minute
	MaxStartupRetryMax       = 10 * time.Minute
	MinStartupAttemptTimeout = 100 * time.Millisecond
	MaxStartupAttemptTimeout = time.Minute
)

// Credential and startup rules.
const (
	// RuleAuthAdminShared: the admin lane would authenticate as the ACL user
	// of a data lane (or as the default user, without auth) and
	// auth.admin-shared does not say so — or says so while it does not.
	RuleAuthAdminShared Rule = "auth.admin-shared"
	// RuleStartupOnFailure: redis.startup.on-failure is not a known policy.
	RuleStartupOnFailure Rule = "startup.on-failure"
	// RuleStartupBound: a redis.startup duration is out of bounds or out of order.
	RuleStartupBound Rule = "startup.bound"
)

// EvictionPolicies lists the maxmemory-policy values a role may expect.
func EvictionPolicies() []string {
	return []string{"allkeys-lfu", "allkeys-lru", "allkeys-random", "noeviction", "volatile-lfu", "volatile-lru", "volatile-random", "volatile-ttl"}
}

// ValidSlug reports whether s matches [a-z][a-z0-9-]{0,31}: the form of
// deployment ids, client names and key namespace parts.
func ValidSlug(s string) bool {
	if s == "" || len(s) > MaxSlugBytes || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// CheckEndpoint returns nil when s is host:port with a non-empty host name
// or IP literal and a port in 1..65535.
func CheckEndpoint(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port")
	}
	if !validHost(host) {
		return fmt.Errorf("host must be a DNS name or IP address")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port must be 1..65535")
	}
	return nil
}

func validHost(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	if net.ParseIP(h) != nil {
		return true
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Validate checks the model against every rule that needs no I/O and
// returns nil or a *ValidationError listing all problems.
func (c RedisConfig) Validate() error { return c.Problems().Err() }

// Problems returns every rule violation in the model, sorted. An empty
// model (no roles, no deployments: Redis unused) has none. Paths use the
// YAML names under `redis.`.
func (c RedisConfig) Problems() Problems {
	var ps Problems
	ids := make([]string, 0, len(c.Deployments))
	for id := range c.Deployments {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		d := c.Deployments[id]
		if d.ID != id {
			ps.Add("redis.deployments."+id, RuleDeploymentID, "deployment id %q does not match its key", d.ID)
		}
		ps = append(ps, d.Problems("redis.deployments."+id)...)
	}
	c.roleProblems(&ps)
	if len(c.Roles) > 0 || len(c.Deployments) > 0 {
		c.Programs.problems(&ps)
		c.Keys.problems(&ps)
		c.Startup.problems(&ps)
	}
	ps.Sort()
	return ps
}

func (c RedisConfig) roleProblems(ps *Problems) {
	for _, r := range sortedRoles(c.Roles) {
		b := c.Roles[r]
		p := "redis.roles." + string(r)
		if !r.Valid() {
			ps.Add(p, RuleRolesUnknown, "unknown role (want one of cache, coordination, session)")
			continue
		}
		if b.Deployment == "" {
			ps.Add(p+".deployment", RuleRolesDeployment, "required: the id of a deployment under redis.deployments")
		} else if _, ok := c.Deployments[b.Deployment]; !ok {
			ps.Add(p+".deployment", RuleRolesDeployment, "deployment %q is not defined under redis.deployments", b.Deployment)
		}
		if b.ExpectedEviction != "" {
			known := false
			for _, e := range EvictionPolicies() {
				known = known || e == b.ExpectedEviction
			}
			if !known {
				ps.Add(p+".expected-eviction", RuleRolesEviction, "unknown eviction policy (want one of %s)", strings.Join(EvictionPolicies(), ", "))
			} else if r.Correctness() && b.ExpectedEviction != "noeviction" {
				ps.Add(p+".expected-eviction", RuleRolesEvictionUnsafe, "role %s holds correctness state and must expect noeviction", r)
			}
		}
		if r.Correctness() && !c.AllowUnsafeColocation {
			if cache, ok := c.Roles[RoleCache]; ok && cache.Deployment != "" && cache.Deployment == b.Deployment {
				ps.Add(p+".deployment", RuleRolesColocation,
					"role %s shares deployment %q with the evictable cache role; use a separate deployment or set redis.allow-unsafe-colocation", r, b.Deployment)
			}
		}
	}
}

func sortedRoles(m map[Role]RoleBinding) []Role {
	rs := make([]Role, 0, len(m))
	for r := range m {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}

// Problems returns the rule violations of one deployment; path is its
// configuration path (redis.deployments.<id>).
func (d Deployment) Problems(path string) Problems {
	var ps Problems
	if !ValidSlug(d.ID) {
		ps.Add(path, RuleDeploymentID, "deployment id must match [a-z][a-z0-9-]{0,31}")
	}
	switch t := d.Topology.(type) {
	case *Standalone:
		if t == nil {
			ps.Add(path, RuleTopologyExactlyOne, "exactly one of standalone, sentinel, cluster is required")
			break
		}
		if err := CheckEndpoint(t.Endpoint); err != nil {
			ps.Add(path+".standalone.endpoint", RuleTopologyEndpoint, "%v", err)
		}
	case *Sentinel:
		if t == nil {
			ps.Add(path, RuleTopologyExactlyOne, "exactly one of standalone, sentinel, cluster is required")
			break
		}
		if t.MasterName == "" || len(t.MasterName) > MaxMasterNameBytes || strings.ContainsAny(t.MasterName, " \t\r\n") {
			ps.Add(path+".sentinel.master-name", RuleTopologySentinelMaster, "required: 1-%d characters without whitespace", MaxMasterNameBytes)
		}
		endpointProblems(&ps, path+".sentinel.endpoints", t.Endpoints)
		// The runtime takes the primary a majority of these Sentinels agree
		// on, never fewer than two; with fewer than three a single Sentinel
		// down leaves no quorum, so the host could not act on the block.
		if n := len(t.Endpoints); n > 0 && n < MinSentinelEndpoints {
			ps.Add(path+".sentinel.endpoints", RuleTopologySentinelQuorum,
				"%d endpoint(s): at least %d Sentinels are needed, since the primary is what a majority of them (never fewer than 2) agree on", n, MinSentinelEndpoints)
		}
		t.TLS.problems(&ps, path+".sentinel.tls")
	case *Cluster:
		if t == nil {
			ps.Add(path, RuleTopologyExactlyOne, "exactly one of standalone, sentinel, cluster is required")
			break
		}
		endpointProblems(&ps, path+".cluster.seeds", t.Seeds)
		if d.Database != 0 {
			ps.Add(path+".database", RuleTopologyClusterDatabase, "must be 0 on cluster (Redis Cluster has only database 0)")
		}
	default:
		ps.Add(path, RuleTopologyExactlyOne, "exactly one of standalone, sentinel, cluster is required")
	}
	if d.Database < 0 || d.Database > MaxDatabase {
		ps.Add(path+".database", RuleDeploymentDatabase, "must be 0..%d", MaxDatabase)
	}
	if !ValidSlug(d.ClientName) {
		ps.Add(path+".client-name", RuleDeploymentClientName, "must match [a-z][a-z0-9-]{0,31} (no host names or user data)")
	}
	d.authProblems(&ps, path+".auth")
	d.TLS.problems(&ps, path+".tls")
	d.Timeouts.problems(&ps, path+".timeouts")
	for l := range d.Lanes {
		if !l.Valid() {
			ps.Add(path+".lanes."+string(l), RuleUnknownKey, "unknown lane (want one of regular, script, blocking, pubsub, admin)")
		}
	}
	for _, l := range Lanes() {
		lc, ok := d.Lanes[l]
		lp := path + ".lanes." + string(l)
		if !ok {
			ps.Add(lp, RuleLanesPositive, "lane is not configured")
			continue
		}
		lc.problems(&ps, lp)
	}
	positiveBounded(&ps, path+".budgets.max-request-bytes", d.Budgets.MaxRequestBytes, MaxBudgetBytes, RuleBudgetsPositive, RuleBudgetsBound)
	positiveBounded(&ps, path+".budgets.max-reply-bytes", d.Budgets.MaxReplyBytes, MaxBudgetBytes, RuleBudgetsPositive, RuleBudgetsBound)
	return ps
}

// authProblems enforces that the admin lane never silently shares an ACL
// user with a data lane: CONFIG GET and FUNCTION LOAD would otherwise run
// with the data user's credential (or the data user would need admin
// rights), which nobody decided. Identity is the ACL user name; an empty
// name is the server's default user (no auth, or a password without
// user@), so "no auth at all" shares too. Problems are reported at
// auth.admin so that a problem decoding that entry shadows this one.
func (d Deployment) authProblems(ps *Problems, path string) {
	admin := d.Credential(LaneAdmin).User
	var shared []string
	for _, l := range Lanes() {
		if l != LaneAdmin && d.Credential(l).User == admin {
			shared = append(shared, string(l))
		}
	}
	switch {
	case len(shared) > 0 && !d.AdminShared:
		how := "its own auth.admin entry names the same user"
		if _, own := d.Auth[LaneAdmin]; !own {
			how = "it has no auth.admin entry, so it falls back to auth.default"
		}
		if d.Credential(LaneAdmin).IsZero() {
			how = "there is no credential at all, so every lane is the server's default user"
		}
		ps.Add(path+".admin", RuleAuthAdminShared,
			"the admin lane (CONFIG GET, FUNCTION LOAD, ACL GETUSER) would authenticate as the same ACL user as lanes %s: %s; give it its own user (auth.admin: secret://<user>@...) or state auth.admin-shared: true",
			strings.Join(shared, ", "), how)
	case len(shared) == 0 && d.AdminShared:
		ps.Add(path+".admin-shared", RuleAuthAdminShared, "is true, but the admin lane already has an ACL user of its own; remove auth.admin-shared")
	}
}

func endpointProblems(ps *Problems, path string, eps []string) {
	if len(eps) == 0 {
		ps.Add(path, RuleTopologyEndpointsEmpty, "at least one endpoint is required")
		return
	}
	if len(eps) > MaxEndpoints {
		ps.Add(path, RuleTopologyEndpointsMax, "at most %d endpoints", MaxEndpoints)
	}
	seen := make(map[string]bool, len(eps))
	for i, ep := range eps {
		if err := CheckEndpoint(ep); err != nil {
			ps.Add(fmt.Sprintf("%s.%d", path, i), RuleTopologyEndpoint, "%v", err)
			continue
		}
		if k := strings.ToLower(ep); seen[k] {
			ps.Add(fmt.Sprintf("%s.%d", path, i), RuleTopologyEndpointsUnique, "duplicate endpoint %q", ep)
		} else {
			seen[k] = true
		}
	}
}

func (t TLSConfig) problems(ps *Problems, path string) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		ps.Add(path, RuleTLSClientPair, "cert-file and key-file must be set together")
	}
	if t.ServerName != "" && (net.ParseIP(t.ServerName) != nil || !validHost(t.ServerName)) {
		ps.Add(path+".server-name", RuleTLSServerName, "must be a DNS name")
	}
}

func (t Timeouts) problems(ps *Problems, path string) {
	type tv struct {
		name string
		v    time.Duration
		max  time.Duration
	}
	all := []tv{
		{"connect", t.Connect, MaxConnectTimeout},
		{"command", t.Command, MaxCommandTimeout},
		{"acquire", t.Acquire, MaxAcquireTimeout},
		{"shutdown", t.Shutdown, MaxShutdownTimeout},
	}
	if t.IdleCheck < 0 || t.IdleCheck > MaxIdleCheck {
		ps.Add(path+".idle-check", RuleTimeoutsBound, "must be between 0 and %s", MaxIdleCheck)
	}
	ok := true
	for _, x := range all {
		switch {
		case x.v <= 0:
			ps.Add(path+"."+x.name, RuleTimeoutsPositive, "required and must be > 0")
			ok = false
		case x.v > x.max:
			ps.Add(path+"."+x.name, RuleTimeoutsBound, "must be at most %s", x.max)
		}
	}
	if !ok {
		return
	}
	if t.Acquire > t.Command {
		ps.Add(path+".acquire", RuleTimeoutsOrder, "must not exceed timeouts.command (%s)", t.Command)
	}
	if t.Command > t.Shutdown {
		ps.Add(path+".shutdown", RuleTimeoutsOrder, "must be at least timeouts.command (%s) so in-flight commands can finish", t.Command)
	}
}

func (l LaneConfig) problems(ps *Problems, path string) {
	positiveBounded(ps, path+".pool-size", l.PoolSize, MaxPoolSize, RuleLanesPositive, RuleLanesBound)
	positiveBounded(ps, path+".max-in-flight", l.MaxInFlight, MaxInFlight, RuleLanesPositive, RuleLanesBound)
	if l.PoolSize > 0 && l.MaxInFlight > 0 && l.PoolSize > l.MaxInFlight {
		ps.Add(path+".pool-size", RuleLanesOrder, "must not exceed max-in-flight (%d): extra connections could never be used", l.MaxInFlight)
	}
	switch {
	case l.CommandTimeout < 0:
		ps.Add(path+".command-timeout", RuleTimeoutsPositive, "must be > 0 when set")
	case l.CommandTimeout > MaxLaneCommandTimeout:
		ps.Add(path+".command-timeout", RuleTimeoutsBound, "must be at most %s", MaxLaneCommandTimeout)
	}
}

func positiveBounded(ps *Problems, path string, v, max int, pos, bound Rule) {
	switch {
	case v <= 0:
		ps.Add(path, pos, "required and must be > 0")
	case v > max:
		ps.Add(path, bound, "must be at most %d", max)
	}
}

func (p ProgramsConfig) problems(ps *Problems) {
	switch p.Mode {
	case ProgramsEvalshaManaged, ProgramsFunctionsProvisioned:
	default:
		ps.Add("redis.programs.mode", RuleProgramsMode, "required: one of %s, %s (there is no default)", ProgramsEvalshaManaged, ProgramsFunctionsProvisioned)
	}
}

// Validate checks a startup policy on its own (an embedder's override):
// nil or a *ValidationError, with the rules RedisConfig.Validate applies
// under redis.startup.
func (s StartupPolicy) Validate() error {
	var ps Problems
	s.problems(&ps)
	return ps.Err()
}

func (s StartupPolicy) problems(ps *Problems) {
	const p = "redis.startup"
	if s.OnFailure != "" && !slices.Contains(StartupOnFailures(), s.OnFailure) {
		ps.Add(p+".on-failure", RuleStartupOnFailure, "unknown policy (want one of retry, fail-on-misconfiguration, fail)")
	}
	bound := func(key string, v, lo, hi time.Duration) bool {
		if v != 0 && (v < lo || v > hi) {
			ps.Add(p+"."+key, RuleStartupBound, "must be between %s and %s", lo, hi)
			return false
		}
		return true
	}
	okInitial := bound("retry-initial", s.RetryInitial, MinStartupRetry, MaxStartupRetryInitial)
	okMax := bound("retry-max", s.RetryMax, MinStartupRetry, MaxStartupRetryMax)
	bound("attempt-timeout", s.AttemptTimeout, MinStartupAttemptTimeout, MaxStartupAttemptTimeout)
	if d := s.WithDefaults(); okInitial && okMax && d.RetryMax < d.RetryInitial {
		ps.Add(p+".retry-max", RuleStartupBound, "must be at least retry-initial (%s)", d.RetryInitial)
	}
}

func (k KeysConfig) problems(ps *Problems) {
	if !ValidSlug(k.App) {
		ps.Add("redis.keys.app", RuleKeysSlug, "required: must match [a-z][a-z0-9-]{0,31}")
	}
	if !ValidSlug(k.Env) {
		ps.Add("redis.keys.env", RuleKeysSlug, "required: must match [a-z][a-z0-9-]{0,31}")
	}
	h := k.HMAC
	const p = "redis.keys.hmac"
	switch {
	case len(h.Versions) == 0:
		ps.Add(p+".versions", RuleKeysHMACVersions, "at least one version is required")
	case len(h.Versions) > MaxHMACVersions:
		ps.Add(p+".versions", RuleKeysHMACVersions, "at most %d readable versions", MaxHMACVersions)
	}
	vs := make([]int, 0, len(h.Versions))
	for v := range h.Versions {
		vs = append(vs, v)
	}
	sort.Ints(vs)
	for _, v := range vs {
		vp := fmt.Sprintf("%s.versions.%d", p, v)
		if v < 1 || v > MaxHMACVersion {
			ps.Add(vp, RuleKeysHMACVersions, "version must be 1..%d", MaxHMACVersion)
		}
		if n := h.Versions[v].Len(); n < MinHMACMaterialBytes || n > MaxHMACMaterialBytes {
			ps.Add(vp, RuleKeysHMACMaterial, "resolved material must be %d..%d bytes", MinHMACMaterialBytes, MaxHMACMaterialBytes)
		}
	}
	if _, ok := h.Versions[h.WriteVersion]; !ok && len(h.Versions) > 0 {
		ps.Add(p+".write-version", RuleKeysHMACWrite, "write version %d is not among the configured versions", h.WriteVersion)
	}
}
