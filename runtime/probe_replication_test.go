package runtime

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// probeAcks is the replication timeout of the probe tests' profiles.
const probeAcks = 500 * time.Millisecond

// hasCheck reports whether the probe of d ran check name.
func hasCheck(d DeploymentProbe, name string) bool {
	for _, c := range d.Checks {
		if c.Name == name {
			return true
		}
	}
	return false
}

// startPrimaryWithReplica starts two private standalone servers, makes the
// second a replica of the first and waits until it is online.
func startPrimaryWithReplica(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	replica = redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	ctx := ctxT(t, 30*time.Second)
	require.NoError(t, replica.Admin().Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port())).Err())
	require.Eventually(t, func() bool {
		info, err := primary.Admin().Info(ctx, "replication").Result()
		return err == nil && onlineReplicas(info) == 1
	}, 30*time.Second, 10*time.Millisecond, "the replica comes online")
	return primary, replica
}

// TestProbeReplicationAbsentWithoutProfile: without a replica-wait profile
// the probe has no replication check and sends no WAIT (INFO commandstats
// on the server counts every WAIT it received, refused ones included).
func TestProbeReplicationAbsentWithoutProfile(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	rt := newRuntime(t, testConfig(testDeployment("main", standalone(srv.Addr()))))
	rep := rt.Probe(ctxT(t, 30*time.Second))
	require.NoError(t, rep.Err())
	assert.False(t, hasCheck(rep.Deployments[0], CheckReplication), "%+v", rep.Deployments[0].Checks)
	assert.Zero(t, srv.CommandCalls(t, "wait"), "no WAIT without the profile")

	// A profile on another role than the deployment's is not proven here.
	cfg := testConfig(testDeployment("main", standalone(srv.Addr())))
	cfg.Roles[policy.RoleSession] = policy.RoleBinding{Deployment: "main", Required: true}
	rt = newRuntime(t, cfg)
	require.NoError(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleSession, Acks: 1, Timeout: probeAcks}))
	var re *RoleError
	require.ErrorAs(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleCache, Acks: 1, Timeout: probeAcks}), &re)
	require.ErrorIs(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleSession, Acks: 17, Timeout: probeAcks}), ErrReplicaWaitProfile)
	require.ErrorIs(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleSession, Acks: 1}), ErrReplicaWaitProfile)
}

// TestProbeReplicationWithoutWaitPermission: the script lane's ACL user
// lacks +wait. The probe's WAIT — sent as the fenced lease's would be,
// under its grant — is refused with NOPERM: the check fails as a
// misconfiguration whose detail names the fix and neither the user nor
// the endpoint.
func TestProbeReplicationWithoutWaitPermission(t *testing.T) {
	d, users := aclDeployment("main", "")
	// Redis 7.0 files WAIT under @connection, which the data user has:
	// take it away explicitly.
	users[0].Rules = append(users[0].Rules, "-wait")
	srv := redistest.StartStandalone(t, redistest.WithACL(users...), redistest.WithConfig("maxmemory-policy", "noeviction"))
	d.Topology = standalone(srv.Addr())
	rt := newRuntime(t, testConfig(d))
	require.NoError(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleCoordination, Acks: 1, Timeout: probeAcks}))

	rep := rt.Probe(ctxT(t, 30*time.Second))
	c := checkOf(t, rep.Deployments[0], CheckReplication)
	assert.Equal(t, CheckFailed, c.Status)
	assert.Equal(t, ClassMisconfiguration, c.Class)
	assert.Contains(t, c.Detail, "NOPERM")
	assert.Contains(t, c.Detail, "grant +wait to the script lane's data user")
	assert.Equal(t, ClassMisconfiguration, rep.Deployments[0].Class())
	require.ErrorIs(t, rep.Err(), ErrProbeFailed)
	for _, secret := range []string{srv.Addr(), strconv.Itoa(srv.Port()), "app", "app-secret-123"} {
		assert.NotContains(t, c.Detail, secret)
	}
	assert.Contains(t, rep.Err().Error(), "main/replication (misconfiguration): WAIT refused")
	assert.Equal(t, int64(1), srv.CommandCalls(t, "wait"), "one WAIT, refused by the server's ACL")

	// The same user with +wait passes the permission half; with no replica
	// the check then only warns (TestProbeReplicationTooFewReplicas).
	require.NoError(t, srv.Admin().Do(ctxT(t, 10*time.Second), "ACL", "SETUSER", "app", "+wait").Err())
	c = checkOf(t, rt.Probe(ctxT(t, 30*time.Second)).Deployments[0], CheckReplication)
	assert.Equal(t, CheckWarn, c.Status, c.Detail)
}

// TestProbeReplicationEnoughReplicas: a primary with one online replica
// and acks 1 passes, with exactly one WAIT sent to the primary, answered
// at once.
func TestProbeReplicationEnoughReplicas(t *testing.T) {
	primary, _ := startPrimaryWithReplica(t)
	rt := newRuntime(t, testConfig(testDeployment("main", standalone(primary.Addr()))))
	require.NoError(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleCoordination, Acks: 1, Timeout: probeAcks}))
	require.NoError(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleCoordination, Acks: 1, Timeout: probeAcks}), "the same profile twice")

	before := primary.CommandCalls(t, "wait")
	rep := rt.Probe(ctxT(t, 30*time.Second))
	require.NoError(t, rep.Err())
	c := checkOf(t, rep.Deployments[0], CheckReplication)
	assert.Equal(t, CheckOK, c.Status, c.Detail)
	assert.Contains(t, c.Detail, "WAIT admitted on the script lane of 1 primary; online replicas per primary: 1 ≥ acks 1")
	assert.Equal(t, before+1, primary.CommandCalls(t, "wait"), "one WAIT per primary")
}

// TestProbeReplicationTooFewReplicas: fewer online replicas than acks
// warns and never fails (docs/replication.md, "Proven at start-up"): a
// primary with one replica and acks 2, and a standalone server without
// replicas and acks 1. The probe's WAIT asks for acks replicas with a 1 ms
// timeout, so it returns within the server's timer resolution.
func TestProbeReplicationTooFewReplicas(t *testing.T) {
	primary, _ := startPrimaryWithReplica(t)
	lone := redistest.StartStandalone(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	for _, c := range []struct {
		name string
		srv  *redistest.Server
		acks int
		want string
	}{
		{"one replica, acks 2", primary, 2, "replication acks 2, but 1 of 1 primary has fewer online replicas (per primary: 1)"},
		{"no replica, acks 1", lone, 1, "replication acks 1, but 1 of 1 primary has fewer online replicas (per primary: 0)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := newRuntime(t, testConfig(testDeployment("main", standalone(c.srv.Addr()))))
			require.NoError(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleCoordination, Acks: c.acks, Timeout: probeAcks}))
			start := time.Now()
			rep := rt.Probe(ctxT(t, 30*time.Second))
			require.NoError(t, rep.Err(), "too few replicas never fails the probe")
			assert.Less(t, time.Since(start), 5*time.Second)
			ch := checkOf(t, rep.Deployments[0], CheckReplication)
			assert.Equal(t, CheckWarn, ch.Status)
			assert.Contains(t, ch.Detail, c.want)
			assert.Contains(t, ch.Detail, "answers NOT_REPLICATED after 500ms")
		})
	}
}

// TestWaitZeroAnswersAtOnce records the Redis 7.0 fact the probe's design
// rests on (on the harness's own, unguarded connection): WAIT with
// numreplicas 0 answers at once whatever the timeout (0 included), where
// WAIT 1 1 without a replica answers only when the server's timer fires.
// The guard refuses numreplicas 0 (runtime/guard/wait_test.go), so the
// probe sends WAIT acks 1: at once when acks replicas are caught up.
func TestWaitZeroAnswersAtOnce(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := ctxT(t, 30*time.Second)
	for _, timeout := range []int{0, 1} {
		// The fastest of five, so a scheduling hiccup of a loaded machine
		// does not count.
		fastest := time.Hour
		for range 5 {
			start := time.Now()
			n, err := srv.Admin().Do(ctx, "WAIT", 0, timeout).Int64()
			require.NoError(t, err)
			assert.Zero(t, n)
			fastest = min(fastest, time.Since(start))
		}
		assert.Less(t, fastest, 20*time.Millisecond, "WAIT 0 %d", timeout)
	}
	start := time.Now()
	n, err := srv.Admin().Do(ctx, "WAIT", 1, 1).Int64()
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Less(t, time.Since(start), time.Second, "WAIT 1 1 ends within the server's timer resolution")
}

// TestProbeReplicationCluster: on Cluster the WAIT goes to every primary
// (each has one replica): acks 1 passes with one WAIT per primary, acks 2
// warns naming all three.
func TestProbeReplicationCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	d := testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})
	ctx := ctxT(t, 60*time.Second)
	require.Eventually(t, func() bool {
		for _, p := range cl.Primaries() {
			info, err := p.Admin().Info(ctx, "replication").Result()
			if err != nil || onlineReplicas(info) < 1 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "every primary has its replica online")

	waits := func() (n int64) {
		for _, p := range cl.Primaries() {
			n += p.CommandCalls(t, "wait")
		}
		return n
	}
	rt := newRuntime(t, testConfig(d))
	before := waits()
	rep := rt.Probe(ctx)
	assert.False(t, hasCheck(rep.Deployments[0], CheckReplication))
	assert.Equal(t, before, waits(), "no WAIT without the profile")

	require.NoError(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleCoordination, Acks: 1, Timeout: probeAcks}))
	rep = rt.Probe(ctx)
	require.NoError(t, rep.Err())
	c := checkOf(t, rep.Deployments[0], CheckReplication)
	assert.Equal(t, CheckOK, c.Status, c.Detail)
	assert.Contains(t, c.Detail, "WAIT admitted on the script lane of 3 primaries; online replicas per primary: 1 ≥ acks 1")
	for _, p := range cl.Primaries() {
		assert.Equal(t, int64(1), p.CommandCalls(t, "wait"), "one WAIT on each primary")
	}

	rt2 := newRuntime(t, testConfig(d))
	require.NoError(t, rt2.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleCoordination, Acks: 2, Timeout: probeAcks}))
	rep = rt2.Probe(ctx)
	require.NoError(t, rep.Err())
	c = checkOf(t, rep.Deployments[0], CheckReplication)
	assert.Equal(t, CheckWarn, c.Status)
	assert.Contains(t, c.Detail, "3 of 3 primaries have fewer online replicas (per primary: 1)")
}

// TestProbeReplicationSentinel: the Sentinel primary's two replicas
// satisfy acks 2; acks 3 warns.
func TestProbeReplicationSentinel(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	d := testDeployment("sn", &policy.Sentinel{MasterName: s.MasterName(), Endpoints: s.SentinelAddrs()})
	ctx := ctxT(t, 60*time.Second)
	require.Eventually(t, func() bool {
		info, err := s.Primary().Admin().Info(ctx, "replication").Result()
		return err == nil && onlineReplicas(info) == 2
	}, 30*time.Second, 20*time.Millisecond, "both replicas online")
	for _, c := range []struct {
		acks   int
		status CheckStatus
		want   string
	}{
		{2, CheckOK, "online replicas per primary: 2 ≥ acks 2"},
		{3, CheckWarn, "replication acks 3, but 1 of 1 primary has fewer online replicas (per primary: 2)"},
	} {
		rt := newRuntime(t, testConfig(d))
		require.NoError(t, rt.ExpectReplicaWait(ReplicaWaitProfile{Role: policy.RoleCoordination, Acks: c.acks, Timeout: probeAcks}))
		rep := rt.Probe(ctx)
		require.NoError(t, rep.Err())
		ch := checkOf(t, rep.Deployments[0], CheckReplication)
		assert.Equal(t, c.status, ch.Status, ch.Detail)
		assert.Contains(t, ch.Detail, c.want)
	}
}

// TestOnlineReplicas counts only replica lines in state online and keeps
// nothing else of them.
func TestOnlineReplicas(t *testing.T) {
	info := strings.Join([]string{
		"# Replication", "role:master", "connected_slaves:3",
		"slave0:ip=10.0.0.1,port=6380,state=online,offset=290,lag=0",
		"slave1:ip=10.0.0.2,port=6380,state=wait_bgsave,offset=0,lag=0",
		"slave2:ip=10.0.0.3,port=6380,state=online,offset=290,lag=1",
		"slave_read_only:1", "slavex:state=online", "master_repl_offset:290", "",
	}, "\r\n")
	assert.Equal(t, 2, onlineReplicas(info))
	assert.Zero(t, onlineReplicas("role:master\r\nconnected_slaves:0\r\n"))
}
