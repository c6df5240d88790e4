package runtime

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
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
}

func TestProbeSentinel(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	d := testDeployment("sn", &policy.Sentinel{MasterName: s.MasterName(), Endpoints: s.SentinelAddrs()})
	rep := newRuntime(t, testConfig(d)).Probe(context.Background())
	require.NoError(t, rep.Err())
	assert.Contains(t, checkOf(t, rep.Deployments[0], CheckTopology).Detail, "sentinel: 1 writable primary")
}

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		have string
		ok   bool
	}{{"7.0.0", true}, {"7.0.15", true}, {"7.2.4", true}, {"10.0.0", true}, {"6.2.14", false}, {"6.9.99", false}, {"7", true}} {
		assert.Equal(t, c.ok, versionAtLeast(c.have, MinRedisVersion), c.have)
	}
}
