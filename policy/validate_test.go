package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func validLanes() map[Lane]LaneConfig {
	m := map[Lane]LaneConfig{}
	for _, l := range Lanes() {
		m[l] = LaneConfig{PoolSize: 2, MaxInFlight: 8}
	}
	return m
}

func validDeployment(id string, t Topology) Deployment {
	return Deployment{
		ID: id, Topology: t, ClientName: "caphost",
		Default:  Credential{User: "app", Password: NewSecret([]byte("app-password"))},
		Auth:     map[Lane]Credential{LaneAdmin: {User: "ops", Password: NewSecret([]byte("ops-password"))}},
		Timeouts: Timeouts{Connect: time.Second, Command: 250 * time.Millisecond, Acquire: 100 * time.Millisecond, Shutdown: 5 * time.Second},
		Lanes:    validLanes(),
		Budgets:  Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20},
	}
}

func validConfig() RedisConfig {
	return RedisConfig{
		Deployments: map[string]Deployment{
			"cache-main": validDeployment("cache-main", &Standalone{Endpoint: "127.0.0.1:6380"}),
			"coord-main": validDeployment("coord-main", &Sentinel{MasterName: "m", Endpoints: []string{"127.0.0.1:26379", "[::1]:26380", "127.0.0.2:26379"}}),
		},
		Roles: map[Role]RoleBinding{
			RoleCache:        {Deployment: "cache-main", ExpectedEviction: "allkeys-lfu"},
			RoleCoordination: {Deployment: "coord-main", Required: true, ExpectedEviction: "noeviction"},
		},
		Programs: ProgramsConfig{Mode: ProgramsEvalshaManaged},
		Keys: KeysConfig{App: "demo", Env: "dev", HMAC: KeyMaterial{WriteVersion: 1, Versions: map[int]Secret{
			1: NewSecret([]byte(strings.Repeat("k", 32))),
		}}},
	}
}

func TestValidConfigHasNoProblems(t *testing.T) {
	require.NoError(t, validConfig().Validate())
	require.NoError(t, RedisConfig{}.Validate(), "Redis unused: nothing to validate")
}

func TestProblemsPerRule(t *testing.T) {
	cases := []struct {
		rule Rule
		path string
		mut  func(*RedisConfig)
	}{
		{RuleTopologyExactlyOne, "redis.deployments.cache-main", func(c *RedisConfig) { setDep(c, "cache-main", func(d *Deployment) { d.Topology = nil }) }},
		{RuleTopologyEndpoint, "redis.deployments.cache-main.standalone.endpoint", func(c *RedisConfig) {
			setDep(c, "cache-main", func(d *Deployment) { d.Topology = &Standalone{Endpoint: "127.0.0.1:0"} })
		}},
		{RuleTopologyEndpointsUnique, "redis.deployments.coord-main.sentinel.endpoints.1", func(c *RedisConfig) {
			setDep(c, "coord-main", func(d *Deployment) { d.Topology = &Sentinel{MasterName: "m", Endpoints: []string{"h:1", "H:1", "h:2"}} })
		}},
		{RuleTopologySentinelQuorum, "redis.deployments.coord-main.sentinel.endpoints", func(c *RedisConfig) {
			setDep(c, "coord-main", func(d *Deployment) { d.Topology = &Sentinel{MasterName: "m", Endpoints: []string{"h:1", "h:2"}} })
		}},
		{RuleTopologyClusterDatabase, "redis.deployments.cache-main.database", func(c *RedisConfig) {
			setDep(c, "cache-main", func(d *Deployment) { d.Topology = &Cluster{Seeds: []string{"h:1"}}; d.Database = 2 })
		}},
		{RuleDeploymentID, "redis.deployments.cache-main", func(c *RedisConfig) { setDep(c, "cache-main", func(d *Deployment) { d.ID = "other" }) }},
		{RuleTLSClientPair, "redis.deployments.cache-main.tls", func(c *RedisConfig) { setDep(c, "cache-main", func(d *Deployment) { d.TLS.KeyFile = "/k" }) }},
		{RuleTimeoutsOrder, "redis.deployments.cache-main.shutdown", nil},
		{RuleLanesPositive, "redis.deployments.cache-main.lanes.admin", func(c *RedisConfig) {
			setDep(c, "cache-main", func(d *Deployment) { d.Lanes = validLanes(); delete(d.Lanes, LaneAdmin) })
		}},
		{RuleUnknownKey, "redis.deployments.cache-main.lanes.transaction", func(c *RedisConfig) {
			setDep(c, "cache-main", func(d *Deployment) {
				d.Lanes = validLanes()
				d.Lanes["transaction"] = LaneConfig{PoolSize: 1, MaxInFlight: 1}
			})
		}},
		{RuleTimeoutsPositive, "redis.deployments.cache-main.lanes.blocking.command-timeout", func(c *RedisConfig) {
			setDep(c, "cache-main", func(d *Deployment) {
				d.Lanes = validLanes()
				d.Lanes[LaneBlocking] = LaneConfig{PoolSize: 1, MaxInFlight: 1, CommandTimeout: -1}
			})
		}},
		{RuleRolesUnknown, "redis.roles.queue", func(c *RedisConfig) { c.Roles["queue"] = RoleBinding{Deployment: "cache-main"} }},
		{RuleRolesColocation, "redis.roles.coordination.deployment", func(c *RedisConfig) {
			c.Roles[RoleCoordination] = RoleBinding{Deployment: "cache-main", ExpectedEviction: "noeviction"}
		}},
		{RuleRolesEvictionUnsafe, "redis.roles.coordination.expected-eviction", func(c *RedisConfig) {
			c.Roles[RoleCoordination] = RoleBinding{Deployment: "coord-main", ExpectedEviction: "volatile-ttl"}
		}},
		{RuleProgramsMode, "redis.programs.mode", func(c *RedisConfig) { c.Programs.Mode = "" }},
		{RuleKeysHMACWrite, "redis.keys.hmac.write-version", func(c *RedisConfig) { c.Keys.HMAC.WriteVersion = 2 }},
		{RuleKeysHMACVersions, "redis.keys.hmac.versions.0", func(c *RedisConfig) {
			c.Keys.HMAC.Versions = map[int]Secret{0: NewSecret(make([]byte, 32)), 1: NewSecret(make([]byte, 32))}
		}},
		{RuleKeysHMACMaterial, "redis.keys.hmac.versions.1", func(c *RedisConfig) {
			c.Keys.HMAC.Versions = map[int]Secret{1: NewSecret(make([]byte, 31))}
		}},
		{RuleAuthAdminShared, "redis.deployments.cache-main.auth.admin", func(c *RedisConfig) {
			setDep(c, "cache-main", func(d *Deployment) { d.Auth = nil }) // admin falls back to auth.default
		}},
		{RuleAuthAdminShared, "redis.deployments.coord-main.auth.admin-shared", func(c *RedisConfig) {
			setDep(c, "coord-main", func(d *Deployment) { d.AdminShared = true }) // claims sharing that does not happen
		}},
		{RuleStartupOnFailure, "redis.startup.on-failure", func(c *RedisConfig) { c.Startup.OnFailure = "crash" }},
		{RuleStartupBound, "redis.startup.retry-initial", func(c *RedisConfig) { c.Startup.RetryInitial = time.Millisecond }},
		{RuleStartupBound, "redis.startup.retry-max", func(c *RedisConfig) {
			c.Startup.RetryInitial, c.Startup.RetryMax = 10*time.Second, 5*time.Second
		}},
		{RuleStartupBound, "redis.startup.attempt-timeout", func(c *RedisConfig) { c.Startup.AttemptTimeout = 2 * time.Minute }},
	}
	for _, c := range cases {
		t.Run(string(c.rule)+"@"+c.path, func(t *testing.T) {
			cfg := validConfig()
			if c.mut == nil { // timeouts.order: command longer than shutdown
				setDep(&cfg, "cache-main", func(d *Deployment) { d.Timeouts.Command = 20 * time.Second; d.Timeouts.Shutdown = 10 * time.Second })
				c.path = "redis.deployments.cache-main.timeouts.shutdown"
			} else {
				c.mut(&cfg)
			}
			ps := cfg.Problems()
			require.NotEmpty(t, ps)
			found := false
			for _, p := range ps {
				assert.Equal(t, c.rule, p.Rule, p.String())
				found = found || p.Path == c.path
			}
			assert.True(t, found, "want a problem at %s, got %v", c.path, ps)
			err := cfg.Validate()
			assert.True(t, errors.Is(err, ErrInvalid))
			var verr *ValidationError
			require.ErrorAs(t, err, &verr)
			assert.True(t, verr.Has(c.rule))
		})
	}
}

func setDep(c *RedisConfig, id string, f func(*Deployment)) {
	d := c.Deployments[id]
	f(&d)
	c.Deployments[id] = d
}

func TestProblemsSortedAndFormatted(t *testing.T) {
	ps := Problems{{Path: "b", Rule: "x.y", Message: "m2"}, {Path: "a", Rule: "z", Message: "m1"}, {Path: "a", Rule: "b", Message: "m0"}}
	err := ps.Err()
	var verr *ValidationError
	require.ErrorAs(t, err, &verr)
	assert.Equal(t, []string{"a: m0 [b]", "a: m1 [z]", "b: m2 [x.y]"}, []string{verr.Problems[0].String(), verr.Problems[1].String(), verr.Problems[2].String()})
	assert.Equal(t, "invalid configuration (3 problems)\n  a: m0 [b]\n  a: m1 [z]\n  b: m2 [x.y]", err.Error())
	assert.Equal(t, "b", ps[0].Path, "Err sorts a copy")
	assert.NoError(t, Problems(nil).Err())
	assert.Equal(t, "(root): m [r]", Problem{Rule: "r", Message: "m"}.String())
}

// TestAdminLaneCredential covers every way the admin lane can end up with a
// data lane's ACL user, and that only auth.admin-shared allows it.
func TestAdminLaneCredential(t *testing.T) {
	app := Credential{User: "app", Password: NewSecret([]byte("app-password"))}
	ops := Credential{User: "ops", Password: NewSecret([]byte("ops-password"))}
	pw := Credential{Password: NewSecret([]byte("requirepass"))} // default user with a password
	cases := []struct {
		name   string
		def    Credential
		auth   map[Lane]Credential
		shared bool
		want   string // "" = valid, else the problem path suffix
		lanes  string // lanes named in the message
	}{
		{"own admin user", app, map[Lane]Credential{LaneAdmin: ops}, false, "", ""},
		{"no auth at all", Credential{}, nil, false, "auth.admin", "regular, script, blocking, pubsub"},
		{"no auth, stated", Credential{}, nil, true, "", ""},
		{"fallback to default", app, nil, false, "auth.admin", "regular, script, blocking, pubsub"},
		{"fallback, stated", app, nil, true, "", ""},
		{"password without user is the default user", pw, nil, false, "auth.admin", "regular, script, blocking, pubsub"},
		{"admin entry naming the data user", app, map[Lane]Credential{LaneAdmin: {User: "app", Password: NewSecret([]byte("other"))}}, false, "auth.admin", "regular, script, blocking, pubsub"},
		{"one lane shares", app, map[Lane]Credential{LaneAdmin: ops, LaneScript: ops}, false, "auth.admin", "script"},
		{"one lane shares, stated", app, map[Lane]Credential{LaneAdmin: ops, LaneScript: ops}, true, "", ""},
		{"stated but not shared", app, map[Lane]Credential{LaneAdmin: ops}, true, "auth.admin-shared", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := validConfig()
			setDep(&cfg, "cache-main", func(d *Deployment) { d.Default, d.Auth, d.AdminShared = c.def, c.auth, c.shared })
			ps := cfg.Problems()
			if c.want == "" {
				assert.Empty(t, ps)
				return
			}
			require.Len(t, ps, 1, "%v", ps)
			assert.Equal(t, RuleAuthAdminShared, ps[0].Rule)
			assert.Equal(t, "redis.deployments.cache-main."+c.want, ps[0].Path)
			assert.Contains(t, ps[0].Message, c.lanes)
			for _, secret := range []string{"app-password", "ops-password", "requirepass", "other"} {
				assert.NotContains(t, ps[0].Message, secret)
			}
		})
	}
}

func TestStartupPolicyDefaults(t *testing.T) {
	d := StartupPolicy{}.WithDefaults()
	assert.Equal(t, StartupPolicy{OnFailure: StartupRetry, RetryInitial: DefaultStartupRetryInitial,
		RetryMax: DefaultStartupRetryMax, AttemptTimeout: DefaultStartupAttemptTimeout}, d)
	// A long initial wait lifts the default cap instead of inverting it.
	assert.Equal(t, time.Minute, StartupPolicy{RetryInitial: time.Minute}.WithDefaults().RetryMax)
	cfg := validConfig()
	cfg.Startup = StartupPolicy{RetryInitial: time.Minute}
	assert.NoError(t, cfg.Validate())
	for _, p := range StartupOnFailures() {
		cfg.Startup = StartupPolicy{OnFailure: p}
		assert.NoError(t, cfg.Validate(), p)
	}
}

func TestSlugAndEndpoint(t *testing.T) {
	for _, s := range []string{"a", "cache-main", "a0-b", strings.Repeat("a", 32)} {
		assert.True(t, ValidSlug(s), s)
	}
	for _, s := range []string{"", "A", "0a", "a_b", "a.b", strings.Repeat("a", 33), "é"} {
		assert.False(t, ValidSlug(s), s)
	}
	for _, s := range []string{"127.0.0.1:6379", "redis.internal:1", "[::1]:6379", "a-b.c:65535"} {
		assert.NoError(t, CheckEndpoint(s), s)
	}
	for _, s := range []string{"", "localhost", ":6379", "h:0", "h:65536", "h:x", "-h:1", "h_1:1", "a..b:1", "[::1]"} {
		assert.Error(t, CheckEndpoint(s), s)
	}
}

func TestRulesListed(t *testing.T) {
	rs := Rules()
	seen := map[Rule]bool{}
	for _, r := range rs {
		assert.False(t, seen[r], "duplicate %s", r)
		seen[r] = true
		assert.Regexp(t, `^[a-z]+\.[a-z0-9-]+$`, string(r))
	}
	assert.Len(t, rs, 51+len(GuestRules()))
}
