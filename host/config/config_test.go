package config

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/caphost/caphost/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const fixtures = "../../testdata/config"

// testEnv is the injected environment; no test touches the process env.
func testEnv(extra map[string]string) func(string) (string, bool) {
	m := map[string]string{
		"CACHE_PASS":     "cache-pass-value-123",
		"COORD_PASS":     "coord-pass-value-456",
		"SENTINEL_PASS":  "sentinel-pass-value-789",
		"CAPHOST_KEY_V1": "hmac-key-version-1-0123456789abcdefghijklmnop",
		"SHORT_KEY":      "too-short",
		"EMPTY_PASS":     "",
	}
	for k, v := range extra {
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// secretValues are every secret the fixtures can resolve; none may appear
// in an error.
var secretValues = []string{
	"cache-pass-value-123", "coord-pass-value-456", "sentinel-pass-value-789",
	"hmac-key-version-1-0123456789abcdefghijklmnop", "too-short",
	"hmac-key-version-2-0123456789abcdefghijklmnopqrstuv", "admin-password-from-file",
	"hunter2-plaintext-password", "plain-text-password",
}

var envOverrides = map[string]string{
	"CAPHOST_REDIS__ROLES__CACHE__DEPLOYMENT":                   "cache-main",
	"CAPHOST_REDIS__DEPLOYMENTS__CACHE_MAIN__TIMEOUTS__COMMAND": "250ms",
}

func loadFixture(t *testing.T, name string, extra map[string]string, opts ...Option) (*Config, error) {
	t.Helper()
	opts = append([]Option{WithEnv(testEnv(extra)), WithRoles(fixtureRoles(t, filepath.Join(fixtures, name))...)}, opts...)
	return Load(context.Background(), filepath.Join(fixtures, name), opts...)
}

// fixtureRoles reads a fixture's "# roles: a, b" header line (within its
// first two lines): the roles the fixture selects explicitly, as `caphost
// check --role` does. No capability this host implements selects the cache
// role, so fixtures about cache deployments select it this way.
func fixtureRoles(t *testing.T, path string) []policy.Role {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitN(string(data), "\n", 3)
	for _, l := range lines[:min(2, len(lines))] {
		if rest, ok := strings.CutPrefix(l, "# roles: "); ok {
			var out []policy.Role
			for _, r := range strings.Split(rest, ",") {
				out = append(out, policy.Role(strings.TrimSpace(r)))
			}
			return out
		}
	}
	return nil
}

func problems(t *testing.T, err error) policy.Problems {
	t.Helper()
	require.Error(t, err)
	var verr *policy.ValidationError
	require.ErrorAs(t, err, &verr)
	require.ErrorIs(t, err, policy.ErrInvalid)
	return verr.Problems
}

func TestValidFixturesLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtures, "valid", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, 7)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var extra map[string]string
			if filepath.Base(f) == "env-override.yaml" {
				extra = envOverrides
			}
			cfg, err := loadFixture(t, filepath.Join("valid", filepath.Base(f)), extra)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(fixtures, "valid", filepath.Base(f)), cfg.Source)
			require.NoError(t, cfg.Redis.Validate(), "the loaded model must satisfy policy on its own")
			require.NoError(t, policy.ValidateGuests(cfg.Guests, cfg.Security))
		})
	}
}

func TestStandaloneModel(t *testing.T) {
	cfg, err := loadFixture(t, "valid/standalone.yaml", nil)
	require.NoError(t, err)
	require.Len(t, cfg.Redis.Deployments, 1)
	d := cfg.Redis.Deployments["cache-main"]
	assert.Equal(t, "cache-main", d.ID)
	assert.Equal(t, &policy.Standalone{Endpoint: "127.0.0.1:6380"}, d.Topology)
	assert.Equal(t, "caphost-cache", d.ClientName)
	assert.Equal(t, "cache-runtime", d.Default.User)
	assert.Equal(t, "cache-pass-value-123", string(d.Default.Password.Reveal()))
	admin := d.Credential(policy.LaneAdmin)
	assert.Equal(t, "cache-admin", admin.User)
	assert.Equal(t, "admin-password-from-file", string(admin.Password.Reveal()), "trailing newline trimmed")
	assert.Equal(t, d.Default, d.Credential(policy.LaneScript), "lanes without an entry use default")
	assert.Equal(t, policy.Timeouts{Connect: time.Second, Command: 250 * time.Millisecond, Acquire: 100 * time.Millisecond, Shutdown: 5 * time.Second,
		IdleCheck: policy.DefaultIdleCheck}, d.Timeouts, "idle-check defaults")
	assert.Equal(t, policy.LaneConfig{PoolSize: 16, MaxInFlight: 256}, d.Lanes[policy.LaneRegular])
	assert.Equal(t, DefaultLanes()[policy.LaneScript], d.Lanes[policy.LaneScript], "unset lanes get defaults")
	assert.Equal(t, 10*time.Second, d.Lanes[policy.LaneBlocking].CommandTimeout)
	assert.Len(t, d.Lanes, len(policy.Lanes()))
	assert.Equal(t, policy.RoleBinding{Deployment: "cache-main", Required: false, ExpectedEviction: "allkeys-lfu"}, cfg.Redis.Roles[policy.RoleCache])
	assert.Equal(t, policy.ProgramsEvalshaManaged, cfg.Redis.Programs.Mode)
	assert.Equal(t, 2, cfg.Redis.Keys.HMAC.WriteVersion)
	assert.Len(t, cfg.Redis.Keys.HMAC.Versions, 2)
	assert.Equal(t, "hmac-key-version-2-0123456789abcdefghijklmnopqrstuv", string(cfg.Redis.Keys.HMAC.Versions[2].Reveal()))
	assert.Empty(t, cfg.Capabilities, "the cache role is selected by the fixture's roles header")
	assert.Equal(t, "127.0.0.1:8080", cfg.Server.Listen)
}

func TestSentinelModel(t *testing.T) {
	cfg, err := loadFixture(t, "valid/sentinel.yaml", nil)
	require.NoError(t, err)
	d := cfg.Redis.Deployments["coord-main"]
	s, ok := d.Topology.(*policy.Sentinel)
	require.True(t, ok)
	assert.Equal(t, "ca-coordination", s.MasterName)
	assert.Len(t, s.Endpoints, 3)
	assert.Equal(t, "coordination-sentinel-discovery", s.Auth.User)
	assert.Equal(t, "sentinel-pass-value-789", string(s.Auth.Password.Reveal()))
	assert.True(t, s.TLS.Enabled)
	assert.True(t, filepath.IsAbs(s.TLS.CAFile), "TLS paths resolve against the config file directory")
	assert.True(t, d.TLS.Enabled)
	assert.False(t, d.TLS.SkipVerifyHostname)
	assert.Equal(t, "redis.internal", d.TLS.ServerName)
	assert.Equal(t, "caphost", DefaultClientName)
	assert.True(t, cfg.Redis.Roles[policy.RoleCoordination].Required)
	assert.Equal(t, DefaultListen, cfg.Server.Listen)
}

func TestClusterModel(t *testing.T) {
	cfg, err := loadFixture(t, "valid/cluster.yaml", nil)
	require.NoError(t, err)
	d := cfg.Redis.Deployments["cache-main"]
	assert.Equal(t, &policy.Cluster{Seeds: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}}, d.Topology)
	assert.Equal(t, DefaultClientName, d.ClientName)
	assert.Equal(t, policy.Budgets{MaxRequestBytes: DefaultBudgetBytes, MaxReplyBytes: DefaultBudgetBytes}, d.Budgets)
	assert.True(t, d.Default.IsZero())
}

func TestSelectiveDecoding(t *testing.T) {
	cfg, err := loadFixture(t, "valid/multi-role.yaml", nil)
	require.NoError(t, err, "garbage in an unselected deployment and a disabled capability must not fail")
	assert.ElementsMatch(t, []string{"cache-main", "coord-main"}, keys(cfg.Redis.Deployments))
	assert.NotContains(t, cfg.Redis.Roles, policy.RoleSession)
	assert.ElementsMatch(t, []string{"rate-limit"}, keys(cfg.Capabilities))
	rl := cfg.Capabilities["rate-limit"]
	assert.Equal(t, policy.RoleCoordination, rl.RedisRole)
	assert.Contains(t, rl.Raw, "policies", "the capability's own keys are handed over raw")
	assert.NotContains(t, rl.Raw, "provider")
	assert.Equal(t, policy.LaneConfig{PoolSize: 1, MaxInFlight: 2}, cfg.Redis.Deployments["coord-main"].Lanes[policy.LaneAdmin])

	// Selecting the session role explicitly decodes and validates its deployment.
	_, err = loadFixture(t, "valid/multi-role.yaml", nil, WithRoles(policy.RoleSession))
	ps := problems(t, err)
	got := map[policy.Rule]bool{}
	for _, p := range ps {
		got[p.Rule] = true
		assert.True(t, strings.HasPrefix(p.Path, "redis.deployments.legacy-main") || strings.HasPrefix(p.Path, "redis.roles.session"), p.String())
	}
	for _, r := range []policy.Rule{policy.RuleTopologyExactlyOne, policy.RuleUnknownKey, policy.RuleDeploymentDatabase, policy.RuleRolesEviction, policy.RuleTimeoutsPositive} {
		assert.True(t, got[r], "want %s in %v", r, ps)
	}
}

func TestColocationAllowed(t *testing.T) {
	cfg, err := loadFixture(t, "valid/colocation-allowed.yaml", nil)
	require.NoError(t, err)
	assert.True(t, cfg.Redis.AllowUnsafeColocation)
	cfg.Redis.AllowUnsafeColocation = false
	err = cfg.Redis.Validate()
	require.Error(t, err)
	var verr *policy.ValidationError
	require.ErrorAs(t, err, &verr)
	assert.True(t, verr.Has(policy.RuleRolesColocation))
}

func TestEnvOverride(t *testing.T) {
	_, err := loadFixture(t, "valid/env-override.yaml", nil)
	ps := problems(t, err)
	assert.Equal(t, []policy.Rule{policy.RuleRolesDeployment}, rules(ps), "cache-main is not referenced, so not decoded")

	_, err = loadFixture(t, "valid/env-override.yaml", map[string]string{"CAPHOST_REDIS__ROLES__CACHE__DEPLOYMENT": "cache-main"})
	ps = problems(t, err)
	assert.Equal(t, []policy.Problem{{Path: "redis.deployments.cache-main.timeouts.command", Rule: policy.RuleTimeoutsPositive, Message: "required and must be > 0"}}, []policy.Problem(ps))

	cfg, err := loadFixture(t, "valid/env-override.yaml", envOverrides)
	require.NoError(t, err)
	assert.Equal(t, "cache-main", cfg.Redis.Roles[policy.RoleCache].Deployment)
	assert.Equal(t, 250*time.Millisecond, cfg.Redis.Deployments["cache-main"].Timeouts.Command)

	// Typed values arrive as strings from the environment and are converted.
	cfg, err = loadFixture(t, "valid/cluster.yaml", map[string]string{
		"CAPHOST_REDIS__DEPLOYMENTS__CACHE_MAIN__LANES__REGULAR__POOL_SIZE": "32",
		"CAPHOST_REDIS__DEPLOYMENTS__CACHE_MAIN__CLUSTER__SEEDS":            "10.0.0.1:7000, 10.0.0.2:7000",
		"CAPHOST_REDIS__ALLOW_UNSAFE_COLOCATION":                            "true",
		"CAPHOST_SERVER__LISTEN":                                            "127.0.0.1:9090",
		"CAPHOST_REDIS__DEPLOYMENTS__CACHE_MAIN__TIMEOUTS__IDLE_CHECK":      "0s",
	})
	require.NoError(t, err)
	d := cfg.Redis.Deployments["cache-main"]
	assert.Equal(t, 32, d.Lanes[policy.LaneRegular].PoolSize)
	assert.Zero(t, d.Timeouts.IdleCheck, "0s is kept (peek on every reuse), not replaced by the default")
	assert.Equal(t, &policy.Cluster{Seeds: []string{"10.0.0.1:7000", "10.0.0.2:7000"}}, d.Topology)
	assert.True(t, cfg.Redis.AllowUnsafeColocation)
	assert.Equal(t, "127.0.0.1:9090", cfg.Server.Listen)

	_, err = loadFixture(t, "valid/cluster.yaml", map[string]string{"CAPHOST_REDIS__DEPLOYMENTS__CACHE_MAIN__DATABASE": "two"})
	ps = problems(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, policy.Problem{Path: "redis.deployments.cache-main.database", Rule: policy.RuleType, Message: "must be an integer (32-bit), got a string"}, ps[0])
}

func TestUnknownProcessEnvOverrideFails(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtures, "valid", "cluster.yaml"))
	require.NoError(t, err)
	o := options{
		lookup: testEnv(map[string]string{"CAPHOST_REDIS__PROGRAMZ": "x"}),
		environ: func() []string {
			// CAPHOST_KEY_V1 is a secret the file references, not an override.
			return []string{"PATH=/bin", "CAPHOST_REDIS__PROGRAMZ=x", "CAPHOST_KEY_V1=ignored-as-override", "CAPHOST_OTHER__X=1"}
		},
	}
	_, err = load(context.Background(), data, "mem", filepath.Join(fixtures, "valid"), o)
	ps := problems(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, "redis.programz", ps[0].Path)
	assert.Equal(t, policy.RuleUnknownKey, ps[0].Rule)
}

func TestEnvNameRoundTrip(t *testing.T) {
	assert.Equal(t, "CAPHOST_REDIS__ROLES__CACHE__DEPLOYMENT", EnvName("redis.roles.cache.deployment"))
	assert.Equal(t, "CAPHOST_REDIS__DEPLOYMENTS__CACHE_MAIN__LANES__REGULAR__POOL_SIZE", EnvName("redis.deployments.cache-main.lanes.regular.pool-size"))
	for _, tmpl := range envTemplates {
		p := strings.NewReplacer("{deployment}", "cache-main", "{role}", "cache", "{lane}", "pubsub", "{capability}", "rate-limit", "{version}", "2", "{module}", "rate-tiers").Replace(tmpl)
		back, ok := EnvPath(EnvName(p))
		require.True(t, ok, p)
		assert.Equal(t, p, back)
	}
	for _, bad := range []string{"PATH", "CAPHOST_", "CAPHOST_A____B", "caphost_redis"} {
		_, ok := EnvPath(bad)
		assert.False(t, ok, bad)
	}
}

// expectation reads the `# expect: <rule>` header of an invalid fixture.
func expectation(t *testing.T, path string) []policy.Rule {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	require.True(t, sc.Scan())
	line, ok := strings.CutPrefix(sc.Text(), "# expect: ")
	require.True(t, ok, "%s must begin with '# expect: <rule>'", path)
	var out []policy.Rule
	for _, r := range strings.Split(line, ",") {
		out = append(out, policy.Rule(strings.TrimSpace(r)))
	}
	return out
}

func TestInvalidFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtures, "invalid", "*.yaml"))
	require.NoError(t, err)
	covered := map[policy.Rule]bool{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want := expectation(t, f)
			require.Len(t, want, 1, "one rule per invalid fixture")
			assert.Equal(t, string(want[0])+".yaml", filepath.Base(f), "file is named after its rule")
			covered[want[0]] = true
			_, err := loadFixture(t, filepath.Join("invalid", filepath.Base(f)), nil)
			ps := problems(t, err)
			require.NotEmpty(t, ps)
			for _, p := range ps {
				assert.Equal(t, want[0], p.Rule, "fails only for the expected reason: %s", p)
			}
			msg := err.Error()
			for _, s := range secretValues {
				assert.NotContains(t, msg, s, "secret or rejected literal leaked into the error")
			}
		})
	}
	for _, r := range policy.Rules() {
		assert.True(t, covered[r], "no invalid fixture for rule %s", r)
	}
}

func TestAllProblemsReportedAtOnce(t *testing.T) {
	path := filepath.Join(fixtures, "multi", "three-problems.yaml")
	want := expectation(t, path)
	_, err := loadFixture(t, "multi/three-problems.yaml", nil)
	ps := problems(t, err)
	assert.ElementsMatch(t, want, rules(ps))
	assert.True(t, sort.SliceIsSorted(ps, func(i, j int) bool { return ps[i].Path < ps[j].Path }))
	// Deterministic: the same input gives the same report.
	_, err2 := loadFixture(t, "multi/three-problems.yaml", nil)
	assert.Equal(t, err.Error(), err2.Error())
	assert.NotContains(t, err.Error(), "plain-text-password")
}

func TestNoRedisNoDecoding(t *testing.T) {
	// Redis is not used at all: garbage under redis.deployments, programs and
	// keys is not decoded; only the top-level shape is checked.
	fsys := fstest.MapFS{"c.yaml": {Data: []byte(`
redis:
  deployments: {x: {nonsense: 1}}
  programs: {mode: bogus}
  keys: {app: "NOT A SLUG"}
capabilities:
  rate-limit: {provider: disabled, policies: "not even looked at"}
server: {listen: "127.0.0.1:9000"}
`)}}
	cfg, err := Load(context.Background(), "c.yaml", WithFS(fsys), WithEnv(testEnv(nil)))
	require.NoError(t, err)
	assert.Empty(t, cfg.Redis.Deployments)
	assert.Empty(t, cfg.Capabilities)
	assert.Equal(t, "127.0.0.1:9000", cfg.Server.Listen)
}

func TestWithRolesUnknownRole(t *testing.T) {
	_, err := loadFixture(t, "valid/cluster.yaml", nil, WithRoles("queue"))
	ps := problems(t, err)
	assert.Equal(t, []policy.Rule{policy.RuleRolesUnknown}, rules(ps))
}

func TestSecretFileBounds(t *testing.T) {
	dir := t.TempDir()
	exact := strings.Repeat("k", MaxSecretBytes)
	files := map[string]string{"exact": exact, "over": exact + "\n", "crlf": "pw\r\n", "newline-only": "\n"}
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
	}
	b, rule, _ := readSecretFile(filepath.Join(dir, "exact"))
	assert.Empty(t, rule)
	assert.Len(t, b, MaxSecretBytes)
	_, rule, _ = readSecretFile(filepath.Join(dir, "over"))
	assert.Equal(t, policy.RuleSecretTooLarge, rule, "the limit applies to the file as stored")
	b, rule, _ = readSecretFile(filepath.Join(dir, "crlf"))
	assert.Empty(t, rule)
	assert.Equal(t, "pw", string(b))
	_, rule, _ = readSecretFile(filepath.Join(dir, "newline-only"))
	assert.Equal(t, policy.RuleSecretEmpty, rule)
	_, rule, _ = readSecretFile(dir)
	assert.Equal(t, policy.RuleSecretFile, rule, "a directory is not a secret")
}

func TestLoadErrors(t *testing.T) {
	_, err := Load(context.Background(), filepath.Join(fixtures, "nope.yaml"))
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.False(t, errors.Is(err, policy.ErrInvalid))

	big := fstest.MapFS{"big.yaml": {Data: []byte(strings.Repeat("#", MaxFileBytes+1))}}
	_, err = Load(context.Background(), "big.yaml", WithFS(big))
	assert.ErrorIs(t, err, ErrTooLarge)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Load(ctx, filepath.Join(fixtures, "valid", "standalone.yaml"), WithEnv(testEnv(nil)))
	assert.ErrorIs(t, err, context.Canceled)
}

func rules(ps policy.Problems) []policy.Rule {
	out := make([]policy.Rule, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Rule)
	}
	return out
}

func keys[K ~string, V any](m map[K]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, string(k))
	}
	return out
}

func TestSyntaxErrorDoesNotEchoValues(t *testing.T) {
	for _, in := range []string{"hunter2-plaintext-password\n", "- hunter2-plaintext-password\n", "redis: {a: b\n"} {
		fsys := fstest.MapFS{"c.yaml": {Data: []byte(in)}}
		_, err := Load(context.Background(), "c.yaml", WithFS(fsys), WithEnv(testEnv(nil)))
		ps := problems(t, err)
		require.Len(t, ps, 1)
		assert.Equal(t, policy.RuleSyntax, ps[0].Rule)
		assert.NotContains(t, err.Error(), "hunter2")
		assert.NotContains(t, ps[0].Message, "\n")
	}
}

func TestDocsListEveryRuleAndDefault(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	for _, r := range policy.Rules() {
		assert.Contains(t, string(doc), "`"+string(r)+"`", "docs/configuration.md misses rule %s", r)
	}
	for _, l := range policy.Lanes() {
		c := DefaultLanes()[l]
		assert.Contains(t, string(doc), fmt.Sprintf("| %s | %d | %d |", l, c.PoolSize, c.MaxInFlight), "lane default table out of date")
	}
	g := DefaultGuestLimits()
	for _, row := range []string{
		fmt.Sprintf("| memory-pages | %d |", g.MemoryPages), fmt.Sprintf("| call-timeout | %s |", g.CallTimeout),
		fmt.Sprintf("| max-input-bytes | %d |", g.MaxInputBytes), fmt.Sprintf("| max-output-bytes | %d |", g.MaxOutputBytes),
		fmt.Sprintf("| max-host-calls | %d |", g.MaxHostCalls), fmt.Sprintf("| pool-size | %d |", g.PoolSize),
		fmt.Sprintf("| recycle-after | %d |", g.RecycleAfter), fmt.Sprintf("| max-stack-bytes | %d |", g.MaxStackBytes),
	} {
		assert.Contains(t, string(doc), row, "guest limit default table out of date")
	}
	for _, n := range CapabilityNames() {
		assert.Contains(t, string(doc), "`"+n+"`")
	}
}

func TestOverridesOnMisshapedFile(t *testing.T) {
	for _, body := range []string{"redis: {deployments: [1, 2]}\n", "redis: 5\n", "redis: {deployments: {x: 3}}\n", ""} {
		env := map[string]string{"CAPHOST_REDIS__DEPLOYMENTS__X__DATABASE": "1", "CAPHOST_REDIS__ROLES__CACHE__DEPLOYMENT": "x"}
		o := options{
			lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
			environ: func() []string {
				return []string{"CAPHOST_REDIS__DEPLOYMENTS__X__DATABASE=1", "CAPHOST_REDIS__ROLES__CACHE__DEPLOYMENT=x"}
			},
		}
		_, err := load(context.Background(), []byte(body), "mem", t.TempDir(), o)
		// The role is not selected, so the override only has to decode without panicking.
		assert.NoError(t, err, body)
		_, err = load(context.Background(), []byte(body), "mem", t.TempDir(), options{lookup: o.lookup, environ: o.environ, roles: []policy.Role{policy.RoleCache}})
		problems(t, err)
	}
}
