package runtime

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/programs"
)

func checkOf(t *testing.T, d DeploymentProbe, name string) Check {
	t.Helper()
	for _, c := range d.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("probe has no %q check: %+v", name, d.Checks)
	return Check{}
}

// aclDeployment authenticates every lane as a least-privilege data user
// except admin, which gets the operator user (CONFIG GET, FUNCTION LOAD).
func aclDeployment(id, addr string) (policy.Deployment, []redistest.ACLUser) {
	d := testDeployment(id, standalone(addr))
	app := policy.Credential{User: "app", Password: policy.NewSecret([]byte("app-secret-123"))}
	ops := policy.Credential{User: "ops", Password: policy.NewSecret([]byte("ops-secret-123"))}
	d.Default = app
	d.Auth = map[policy.Lane]policy.Credential{policy.LaneAdmin: ops}
	d.AdminShared = false // the admin lane has its own user
	return d, []redistest.ACLUser{
		{Name: "app", Password: "app-secret-123", Rules: []string{"~" + testNS + "*", "resetchannels", "-@all", "+@connection",
			"+get", "+set", "+del", "+evalsha", "+script|load", "+script|exists", "+fcall", "+fcall_ro"}},
		{Name: "ops", Password: "ops-secret-123", Rules: []string{"~*", "&*", "+@all"}},
	}
}

func TestProbeStandaloneACLBothModes(t *testing.T) {
	d, users := aclDeployment("main", "")
	srv := redistest.StartStandalone(t, redistest.WithACL(users...), redistest.WithConfig("maxmemory-policy", "noeviction"))
	d.Topology = standalone(srv.Addr())
	ctx := ctxT(t, 30e9)

	cfg := testConfig(d)
	rep := newRuntime(t, cfg).Probe(ctx)
	require.Len(t, rep.Deployments, 1)
	dp := rep.Deployments[0]
	assert.Equal(t, []policy.Role{policy.RoleCoordination}, dp.Roles)
	for _, name := range []string{CheckAuth, CheckTopology, CheckVersion, CheckWriteRead, CheckEviction} {
		assert.Equal(t, CheckOK, checkOf(t, dp, name).Status, "%s: %s", name, checkOf(t, dp, name).Detail)
	}
	// Scripts are not cached yet: evalsha-managed warns, does not fail.
	assert.Equal(t, CheckWarn, checkOf(t, dp, CheckPrograms).Status)
	require.NoError(t, rep.Err())
	// The probe key is gone and nothing else was written.
	assert.Zero(t, srv.Admin().DBSize(ctx).Val())

	// functions-provisioned without a deployed library fails, names the fix.
	cfg.Programs.Mode = policy.ProgramsFunctionsProvisioned
	rt := newRuntime(t, cfg)
	rep = rt.Probe(ctx)
	pc := checkOf(t, rep.Deployments[0], CheckPrograms)
	assert.Equal(t, CheckFailed, pc.Status)
	assert.Contains(t, pc.Detail, "caphost programs deploy")
	require.ErrorIs(t, rep.Err(), ErrProbeFailed)

	// After deploying the library on the admin lane, the probe passes.
	cat, err := programs.Load()
	require.NoError(t, err)
	dep, _ := rt.Role(policy.RoleCoordination)
	require.NoError(t, programs.Deploy(ctx, cat, dep.client(policy.LaneAdmin)))
	rep = rt.Probe(ctx)
	require.NoError(t, rep.Err())
	assert.Equal(t, CheckOK, checkOf(t, rep.Deployments[0], CheckPrograms).Status)
}

func TestProbeFindsEveryProblem(t *testing.T) {
	ctx := ctxT(t, 30e9)
	// An evicting server for a correctness role, and an admin user that
	// cannot read CONFIG: the eviction guarantee is unverifiable → failed.
	srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "allkeys-lru"))
	d := testDeployment("evicting", standalone(srv.Addr()))
	rep := newRuntime(t, testConfig(d)).Probe(ctx)
	ev := checkOf(t, rep.Deployments[0], CheckEviction)
	assert.Equal(t, CheckFailed, ev.Status)
	assert.Contains(t, ev.Detail, "expects noeviction")
	assert.Contains(t, ev.Detail, "allkeys-lru")

	// The same server as an optional cache role only warns.
	cfg := testConfig(d)
	cfg.Roles = map[policy.Role]policy.RoleBinding{policy.RoleCache: {Deployment: d.ID}}
	rep = newRuntime(t, cfg).Probe(ctx)
	assert.Equal(t, CheckOK, checkOf(t, rep.Deployments[0], CheckEviction).Status)

	// Wrong password on one lane: auth fails and names the lane, nothing
	// else is attempted on a dead connection.
	d2, users := aclDeployment("badauth", "")
	srv2 := redistest.StartStandalone(t, redistest.WithACL(users...))
	d2.Topology = standalone(srv2.Addr())
	d2.Auth[policy.LaneScript] = policy.Credential{User: "app", Password: policy.NewSecret([]byte("wrong-password"))}
	rep = newRuntime(t, testConfig(d2)).Probe(ctx)
	auth := checkOf(t, rep.Deployments[0], CheckAuth)
	assert.Equal(t, CheckFailed, auth.Status)
	assert.Contains(t, auth.Detail, "script")
	assert.NotContains(t, auth.Detail, "wrong-password")
	assert.NotContains(t, rep.Err().Error(), srv2.Addr(), "no endpoints in probe errors")
}

func TestProbeCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	d := testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})
	ctx := ctxT(t, 30e9)
	rep := newRuntime(t, testConfig(d)).Probe(ctx)
	dp := rep.Deployments[0]
	for _, name := range []string{CheckAuth, CheckTopology, CheckVersion, CheckClusterCoverage, CheckWriteRead, CheckEviction} {
		assert.Equal(t, CheckOK, checkOf(t, dp, name).Status, "%s: %s", name, checkOf(t, dp, name).Detail)
	}
	assert.Contains(t, checkOf(t, dp, CheckTopology).Detail, "3 writable primaries")
	// Attestation per primary: one replica each, no AOF (a warning for
	// coordination), the harness's default user is on without a password.
	assert.Equal(t, CheckWarn, checkOf(t, dp, CheckPersistence).Status)
	assert.Contains(t, checkOf(t, dp, CheckPersistence).Detail, "3 of 3 primaries run without it")
	assert.Contains(t, checkOf(t, dp, CheckPersistence).Detail, "replicas per primary: 1")
	assert.Contains(t, checkOf(t, dp, CheckDefaultUser).Detail, "on 3 of 3 primaries")
	rt := newRuntime(t, testConfig(d))
	require.NoError(t, rt.Live(ctx, "cl", ""))
}

func TestProbeSentinel(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	d := testDeployment("sn", &policy.Sentinel{MasterName: s.MasterName(), Endpoints: s.SentinelAddrs()})
	rep := newRuntime(t, testConfig(d)).Probe(context.Background())
	require.NoError(t, rep.Err())
	assert.Contains(t, checkOf(t, rep.Deployments[0], CheckTopology).Detail, "sentinel: 1 writable primary")
	assert.Contains(t, checkOf(t, rep.Deployments[0], CheckPersistence).Detail, "replicas per primary: 2")
	require.NoError(t, newRuntime(t, testConfig(d)).Live(context.Background(), "sn", ""))
}

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		have string
		ok   bool
	}{{"7.0.0", true}, {"7.0.15", true}, {"7.2.4", true}, {"10.0.0", true}, {"6.2.14", false}, {"6.9.99", false}, {"7", true}} {
		assert.Equal(t, c.ok, versionAtLeast(c.have, MinRedisVersion), c.have)
	}
}

// restricted returns an ACL deployment whose data user is app and whose
// admin user is ops with exactly adminRules (plus connection set-up), so a
// test can take one permission away.
func restricted(id string, appRules, adminRules []string) (policy.Deployment, []redistest.ACLUser) {
	d, users := aclDeployment(id, "")
	users[0].Rules = append([]string{"~" + testNS + "*", "resetchannels", "-@all", "+@connection"}, appRules...)
	users[1].Rules = append([]string{"resetchannels", "-@all", "+@connection"}, adminRules...)
	return d, users
}

var (
	appAll   = []string{"+get", "+set", "+del", "+evalsha", "+script|load", "+script|exists", "+fcall", "+fcall_ro"}
	adminAll = []string{"+role", "+info", "+config|get", "+acl|getuser", "+function|list", "+function|load"}
)

func without(rules []string, drop string) []string {
	var out []string
	for _, r := range rules {
		if r != drop {
			out = append(out, r)
		}
	}
	return out
}

// TestProbeClassifiesFailures drives each kind of failure against a real
// server and checks the failed check's class: what an operator must fix
// (misconfiguration) apart from what may heal (outage).
func TestProbeClassifiesFailures(t *testing.T) {
	ctx := ctxT(t, 60e9)
	type want struct {
		check  string
		class  Class
		detail string
	}
	cases := []struct {
		name  string
		setup func(t *testing.T) policy.RedisConfig
		want  []want
	}{
		{"wrong password", func(t *testing.T) policy.RedisConfig {
			d, users := aclDeployment("wrongpass", "")
			srv := redistest.StartStandalone(t, redistest.WithACL(users...))
			d.Topology = standalone(srv.Addr())
			d.Auth[policy.LaneScript] = policy.Credential{User: "app", Password: policy.NewSecret([]byte("wrong-password"))}
			return testConfig(d)
		}, []want{{CheckAuth, ClassMisconfiguration, "script (WRONGPASS)"}, {CheckWriteRead, ClassMisconfiguration, "not checked"}}},
		{"refused", func(t *testing.T) policy.RedisConfig {
			srv := redistest.StartStandalone(t)
			srv.Kill()
			return testConfig(testDeployment("refused", standalone(srv.Addr())))
		}, []want{{CheckAuth, ClassOutage, "regular ("}}},
		{"paused (timeout)", func(t *testing.T) policy.RedisConfig {
			srv := redistest.StartStandalone(t)
			srv.Pause()
			t.Cleanup(srv.Resume)
			d := testDeployment("paused", standalone(srv.Addr()))
			d.Timeouts.Command, d.Timeouts.Acquire = 200*time.Millisecond, 100*time.Millisecond
			return testConfig(d)
		}, []want{{CheckAuth, ClassOutage, "regular ("}}},
		{"standalone endpoint is a replica", func(t *testing.T) policy.RedisConfig {
			primary := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
			replica := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
			require.NoError(t, replica.Admin().Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port())).Err())
			return testConfig(testDeployment("replica", standalone(replica.Addr())))
		}, []want{{CheckTopology, ClassMisconfiguration, "1 of 1 nodes are not writable primaries"}, {CheckWriteRead, ClassMisconfiguration, "READONLY"}}},
		{"data user may not SET", func(t *testing.T) policy.RedisConfig {
			d, users := restricted("noset", without(appAll, "+set"), adminAll)
			srv := redistest.StartStandalone(t, redistest.WithACL(users...), redistest.WithConfig("maxmemory-policy", "noeviction"))
			d.Topology = standalone(srv.Addr())
			return testConfig(d)
		}, []want{{CheckWriteRead, ClassMisconfiguration, "SET with TTL: NOPERM"}}},
		{"admin user may not CONFIG GET", func(t *testing.T) policy.RedisConfig {
			d, users := restricted("noconfig", appAll, without(adminAll, "+config|get"))
			srv := redistest.StartStandalone(t, redistest.WithACL(users...), redistest.WithConfig("maxmemory-policy", "noeviction"))
			d.Topology = standalone(srv.Addr())
			return testConfig(d)
		}, []want{{CheckEviction, ClassMisconfiguration, "unreadable (NOPERM) (grant +config|get"}}},
		{"admin user may not ROLE or INFO", func(t *testing.T) policy.RedisConfig {
			d, users := restricted("norole", appAll, without(without(adminAll, "+role"), "+info"))
			srv := redistest.StartStandalone(t, redistest.WithACL(users...), redistest.WithConfig("maxmemory-policy", "noeviction"))
			d.Topology = standalone(srv.Addr())
			return testConfig(d)
		}, []want{{CheckTopology, ClassMisconfiguration, "ROLE: NOPERM"}, {CheckVersion, ClassMisconfiguration, "grant +info"}}},
		{"evicting server for coordination", func(t *testing.T) policy.RedisConfig {
			srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "allkeys-lru"))
			return testConfig(testDeployment("evicting", standalone(srv.Addr())))
		}, []want{{CheckEviction, ClassMisconfiguration, "role coordination expects noeviction, a primary has allkeys-lru"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.setup(t)
			rep := newRuntime(t, cfg).Probe(ctx)
			require.Len(t, rep.Deployments, 1)
			dp := rep.Deployments[0]
			for _, w := range c.want {
				ch := checkOf(t, dp, w.check)
				assert.Equal(t, CheckFailed, ch.Status, "%s: %s", w.check, ch.Detail)
				assert.Equal(t, w.class, ch.Class, "%s: %s", w.check, ch.Detail)
				assert.Contains(t, ch.Detail, w.detail)
			}
			assert.Equal(t, c.want[0].class, dp.Class())
			// Every failure is classified, every other check is not.
			for _, ch := range dp.Checks {
				if ch.Status == CheckFailed {
					assert.Contains(t, []Class{ClassMisconfiguration, ClassOutage}, ch.Class, ch.Name)
				} else {
					assert.Empty(t, ch.Class, ch.Name)
				}
			}
			err := rep.Err()
			require.ErrorIs(t, err, ErrProbeFailed)
			assert.Contains(t, err.Error(), "("+string(c.want[0].class)+")")
			assert.NotContains(t, err.Error(), "127.0.0.1", "no endpoints in probe errors")
			assert.NotContains(t, err.Error(), "wrong-password")
		})
	}
}

// tamperedLibrary is the catalog's Functions library with its info
// function reporting another digest: the same name and set, different code.
func tamperedLibrary(t *testing.T) (code, digest string) {
	t.Helper()
	cat, err := programs.Load()
	require.NoError(t, err)
	_, code, want := cat.Library()
	sum := sha256.Sum256([]byte("not the catalog"))
	digest = hex.EncodeToString(sum[:])
	require.Equal(t, 1, strings.Count(code, want), "the digest appears once, in the info function")
	return strings.Replace(code, want, digest, 1), digest
}

// TestProbeWrongLibraryDigest deploys a library under the catalog's name
// whose info function reports another digest (what an old or foreign
// release looks like): the programs check fails as a misconfiguration and
// names both digests. A library whose info claims the right digest over
// different code fails too.
func TestProbeWrongLibraryDigest(t *testing.T) {
	ctx := ctxT(t, 30e9)
	srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	cfg := testConfig(testDeployment("main", standalone(srv.Addr())))
	cfg.Programs.Mode = policy.ProgramsFunctionsProvisioned
	rt := newRuntime(t, cfg)
	cat, err := programs.Load()
	require.NoError(t, err)
	name, code, want := cat.Library()

	bad, badDigest := tamperedLibrary(t)
	require.NoError(t, srv.Admin().FunctionLoadReplace(ctx, bad).Err())
	pc := checkOf(t, rt.Probe(ctx).Deployments[0], CheckPrograms)
	assert.Equal(t, CheckFailed, pc.Status)
	assert.Equal(t, ClassMisconfiguration, pc.Class)
	assert.Contains(t, pc.Detail, "library "+name+" on 1 of 1 primaries reports set ")
	assert.Contains(t, pc.Detail, "digest "+badDigest+", want ")
	assert.Contains(t, pc.Detail, "digest "+want)

	// Right info, different code (a hand-edited body).
	edited := strings.Replace(code, "\nend)\n", "\n-- edited\nend)\n", 1)
	require.NotEqual(t, code, edited)
	require.NoError(t, srv.Admin().FunctionLoadReplace(ctx, edited).Err())
	pc = checkOf(t, rt.Probe(ctx).Deployments[0], CheckPrograms)
	assert.Equal(t, CheckFailed, pc.Status)
	assert.Equal(t, ClassMisconfiguration, pc.Class)
	assert.Contains(t, pc.Detail, "differs from the catalog's code (want set ")

	// The exact library passes.
	require.NoError(t, srv.Admin().FunctionLoadReplace(ctx, code).Err())
	pc = checkOf(t, rt.Probe(ctx).Deployments[0], CheckPrograms)
	assert.Equal(t, CheckOK, pc.Status, pc.Detail)
}

func TestProbePersistence(t *testing.T) {
	ctx := ctxT(t, 30e9)
	probe := func(t *testing.T, role policy.Role, opts ...redistest.Option) Check {
		srv := redistest.StartStandalone(t, opts...)
		cfg := testConfig(testDeployment("p", standalone(srv.Addr())))
		cfg.Roles = map[policy.Role]policy.RoleBinding{role: {Deployment: "p", Required: role.Correctness()}}
		return checkOf(t, newRuntime(t, cfg).Probe(ctx).Deployments[0], CheckPersistence)
	}
	t.Run("coordination with AOF", func(t *testing.T) {
		c := probe(t, policy.RoleCoordination, redistest.WithConfig("appendonly", "yes"), redistest.WithConfig("appendfsync", "everysec"))
		assert.Equal(t, CheckOK, c.Status, c.Detail)
		assert.Contains(t, c.Detail, "aof on 1 of 1 primaries (appendfsync everysec)")
		assert.Contains(t, c.Detail, "replicas per primary: 0")
	})
	t.Run("coordination without persistence", func(t *testing.T) {
		c := probe(t, policy.RoleCoordination)
		assert.Equal(t, CheckWarn, c.Status, "warned, never failed: %s", c.Detail)
		assert.Contains(t, c.Detail, "roles coordination expect AOF and 1 of 1 primaries run without it: a restart loses every record of roles coordination")
		assert.Contains(t, c.Detail, "aof off; no rdb snapshots")
	})
	t.Run("coordination with RDB only", func(t *testing.T) {
		c := probe(t, policy.RoleCoordination, redistest.WithConfig("save", "3600 1 300 100"))
		assert.Equal(t, CheckWarn, c.Status, c.Detail)
		assert.Contains(t, c.Detail, "a restart loses the writes since the last snapshot")
		assert.Contains(t, c.Detail, "rdb save 3600 1 300 100")
	})
	t.Run("cache needs none", func(t *testing.T) {
		c := probe(t, policy.RoleCache)
		assert.Equal(t, CheckOK, c.Status, c.Detail)
		assert.Contains(t, c.Detail, "cache needs no persistence (aof off")
	})
}

func TestProbeDefaultUser(t *testing.T) {
	ctx := ctxT(t, 30e9)
	probe := func(t *testing.T, cfg policy.RedisConfig) Check {
		rep := newRuntime(t, cfg).Probe(ctx)
		require.NoError(t, rep.Err(), "the default user check never fails a probe")
		return checkOf(t, rep.Deployments[0], CheckDefaultUser)
	}
	t.Run("enabled without password", func(t *testing.T) {
		srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
		c := probe(t, testConfig(testDeployment("open", standalone(srv.Addr()))))
		assert.Equal(t, CheckWarn, c.Status)
		assert.Contains(t, c.Detail, "enabled without a password on 1 of 1 primaries")
	})
	d, users := aclDeployment("acl", "")
	srv := redistest.StartStandalone(t, redistest.WithACL(users...), redistest.WithConfig("maxmemory-policy", "noeviction"))
	d.Topology = standalone(srv.Addr())
	t.Run("disabled", func(t *testing.T) {
		c := probe(t, testConfig(d))
		assert.Equal(t, CheckOK, c.Status, c.Detail)
		assert.Equal(t, "the default user is disabled", c.Detail)
	})
	t.Run("enabled with a password", func(t *testing.T) {
		require.NoError(t, srv.Admin().Do(ctx, "ACL", "SETUSER", "default", "on", ">default-password-1").Err())
		t.Cleanup(func() { _ = srv.Admin().Do(context.Background(), "ACL", "SETUSER", "default", "off").Err() })
		c := probe(t, testConfig(d))
		assert.Equal(t, CheckWarn, c.Status)
		assert.Contains(t, c.Detail, "enabled (with a password) on 1 of 1 primaries")
		assert.NotContains(t, c.Detail, "default-password-1")
	})
	t.Run("admin may not ask", func(t *testing.T) {
		d2, users2 := restricted("noacl", appAll, without(adminAll, "+acl|getuser"))
		srv2 := redistest.StartStandalone(t, redistest.WithACL(users2...), redistest.WithConfig("maxmemory-policy", "noeviction"))
		d2.Topology = standalone(srv2.Addr())
		c := probe(t, testConfig(d2))
		assert.Equal(t, CheckUnknown, c.Status)
		assert.Contains(t, c.Detail, "refused on 1 of 1 primaries (NOPERM); grant +acl|getuser")
	})
}

func TestLive(t *testing.T) {
	ctx := ctxT(t, 30e9)
	liveErr := func(t *testing.T, err error) *LiveError {
		t.Helper()
		var le *LiveError
		require.ErrorAs(t, err, &le)
		assert.NotContains(t, le.Error(), "127.0.0.1")
		return le
	}
	t.Run("ok, then refused", func(t *testing.T) {
		srv := redistest.StartStandalone(t)
		rt := newRuntime(t, testConfig(testDeployment("main", standalone(srv.Addr()))))
		before := srv.CommandCalls(t, "set")
		require.NoError(t, rt.Live(ctx, "main", ""))
		assert.Equal(t, int64(1), srv.CommandCalls(t, "set")-before, "one SET per live check")
		assert.Zero(t, srv.Admin().DBSize(ctx).Val()-1, "one fixed live key, nothing else")
		require.NoError(t, rt.Live(ctx, "main", ""))
		assert.Equal(t, int64(1), srv.Admin().DBSize(ctx).Val(), "the key is reused, not one per call")
		srv.Kill()
		le := liveErr(t, rt.Live(ctx, "main", ""))
		assert.Equal(t, ClassOutage, le.Class)
		assert.Equal(t, "unreachable", le.Reason)
	})
	t.Run("replica", func(t *testing.T) {
		primary := redistest.StartStandalone(t)
		replica := redistest.StartStandalone(t)
		require.NoError(t, replica.Admin().Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port())).Err())
		rt := newRuntime(t, testConfig(testDeployment("main", standalone(replica.Addr()))))
		le := liveErr(t, rt.Live(ctx, "main", ""))
		assert.Equal(t, ClassMisconfiguration, le.Class)
		assert.Equal(t, "readonly", le.Reason)
	})
	t.Run("became a replica after the SET", func(t *testing.T) {
		// replica-read-only no lets the SET pass; INFO replication still tells.
		primary := redistest.StartStandalone(t)
		replica := redistest.StartStandalone(t, redistest.WithConfig("replica-read-only", "no"))
		require.NoError(t, replica.Admin().Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port())).Err())
		rt := newRuntime(t, testConfig(testDeployment("main", standalone(replica.Addr()))))
		le := liveErr(t, rt.Live(ctx, "main", ""))
		assert.Equal(t, ClassMisconfiguration, le.Class)
		assert.Equal(t, "not-primary", le.Reason)
	})
	t.Run("permissions", func(t *testing.T) {
		for _, c := range []struct {
			name        string
			app, admin  []string
			wantReason  string
			wantCommand string
		}{
			{"data user may not SET", without(appAll, "+set"), adminAll, "noperm", "set"},
			{"admin user may not INFO", appAll, without(adminAll, "+info"), "noperm", "info"},
		} {
			t.Run(c.name, func(t *testing.T) {
				d, users := restricted("perm", c.app, c.admin)
				srv := redistest.StartStandalone(t, redistest.WithACL(users...))
				d.Topology = standalone(srv.Addr())
				rt := newRuntime(t, testConfig(d))
				le := liveErr(t, rt.Live(ctx, "perm", ""))
				assert.Equal(t, ClassMisconfiguration, le.Class)
				assert.Equal(t, c.wantReason, le.Reason)
				assert.Positive(t, srv.CommandCalls(t, c.wantCommand), "refused by the server, not skipped")
			})
		}
	})
	t.Run("restarted primary", func(t *testing.T) {
		srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
		rt := newRuntime(t, testConfig(testDeployment("main", standalone(srv.Addr()))))
		dp, err := rt.ProbeDeployment(ctx, "main")
		require.NoError(t, err)
		require.Len(t, dp.Identity, 40, "the primary's run id")
		require.NoError(t, rt.Live(ctx, "main", dp.Identity))
		srv.Restart(t)
		var le *LiveError
		for range 3 { // the first command after the restart may meet the dead connection
			if err = rt.Live(ctx, "main", dp.Identity); errors.As(err, &le) && le.Reason == "node-changed" {
				break
			}
		}
		require.ErrorAs(t, err, &le)
		assert.Equal(t, "node-changed", le.Reason)
		assert.Equal(t, ClassOutage, le.Class)
		dp2, err := rt.ProbeDeployment(ctx, "main")
		require.NoError(t, err)
		assert.NotEqual(t, dp.Identity, dp2.Identity)
		require.NoError(t, rt.Live(ctx, "main", dp2.Identity))
	})
	t.Run("unknown deployment", func(t *testing.T) {
		srv := redistest.StartStandalone(t)
		rt := newRuntime(t, testConfig(testDeployment("main", standalone(srv.Addr()))))
		require.ErrorIs(t, rt.Live(ctx, "other", ""), ErrUnknownDeployment)
		_, err := rt.ProbeDeployment(ctx, "other")
		require.ErrorIs(t, err, ErrUnknownDeployment)
	})
}

// serverErr is a server error reply as go-redis surfaces it (redis.Error).
type serverErr string

func (e serverErr) Error() string { return string(e) }
func (serverErr) RedisError()     {}

func TestClassOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		topo policy.TopologyKind
		want Class
	}{
		{serverErr("WRONGPASS invalid username-password pair"), policy.TopologyStandalone, ClassMisconfiguration},
		{serverErr("NOPERM User app has no permissions"), policy.TopologyCluster, ClassMisconfiguration},
		{serverErr("NOAUTH Authentication required."), policy.TopologyStandalone, ClassMisconfiguration},
		{serverErr("READONLY You can't write against a read only replica."), policy.TopologyStandalone, ClassMisconfiguration},
		{serverErr("READONLY You can't write against a read only replica."), policy.TopologySentinel, ClassOutage},
		{serverErr("LOADING Redis is loading the dataset in memory"), policy.TopologyStandalone, ClassOutage},
		{serverErr("BUSY Redis is busy running a script."), policy.TopologyStandalone, ClassOutage},
		{serverErr("CLUSTERDOWN The cluster is down"), policy.TopologyCluster, ClassOutage},
		{serverErr("MASTERDOWN Link with MASTER is down"), policy.TopologySentinel, ClassOutage},
		{serverErr("OOM command not allowed when used memory > 'maxmemory'."), policy.TopologyStandalone, ClassOutage},
		{serverErr("MISCONF Redis is configured to save RDB snapshots"), policy.TopologyStandalone, ClassOutage},
		{serverErr("ERR something new"), policy.TopologyStandalone, ClassOutage},
		{context.DeadlineExceeded, policy.TopologyStandalone, ClassOutage},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, policy.TopologyStandalone, ClassOutage},
		{&net.OpError{Op: "dial", Err: x509.UnknownAuthorityError{}}, policy.TopologyStandalone, ClassMisconfiguration},
		{&tls.CertificateVerificationError{Err: x509.HostnameError{}}, policy.TopologyStandalone, ClassMisconfiguration},
		{&certainty.Error{Outcome: certainty.Rejected, Code: "lane"}, policy.TopologyStandalone, ClassMisconfiguration}, // caphost's guard refused
		{&AdmissionError{Outcome: certainty.OverloadedBeforeSend}, policy.TopologyStandalone, ClassOutage},
	} {
		assert.Equal(t, c.want, classOf(c.err, c.topo), "%v", c.err)
	}
	assert.Equal(t, ClassMisconfiguration, worse(ClassOutage, ClassMisconfiguration))
	assert.Equal(t, ClassOutage, worse("", ClassOutage))
}

func TestVersionAndBoundedFacts(t *testing.T) {
	_, st, class, detail := versionCheck([]nodeFacts{{version: "6.2.14"}})
	assert.Equal(t, CheckFailed, st)
	assert.Equal(t, ClassMisconfiguration, class)
	assert.Equal(t, "server version 6.2.14 < 7.0.0", detail)
	assert.Equal(t, "?", boundedWord("evil value\r\n"))
	assert.Equal(t, "7.2.4", boundedWord("7.2.4"))
	assert.Equal(t, "custom", savePoints("3600 1 ; rm"))
	assert.Equal(t, "3600 1 300 100", savePoints(" 3600  1 300 100 "))
}
