package dispatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// TestSentinelFailoverDuringDispatch kills the primary (SIGKILL) under a
// dispatcher and lets the Sentinels promote a replica. What was
// replicated before the kill holds; what only the dead primary
// acknowledged is lost, exactly as the card's non-guarantees say:
//
//   - delivered: submitted, sent and finalized, replicated. It stays
//     DELIVERED and is never sent again.
//   - queued: submitted and replicated, not yet read. Delivered once
//     after the failover.
//   - resent: submitted and replicated, then read, sent and finalized
//     while the replicas were detached. The promoted replica never saw
//     the claim, the finalize or the acknowledgement: the intent is
//     PENDING there and is sent a second time, with the same intent id
//     for the receiver to deduplicate on (exact-across-failover is not
//     promised).
//   - lost: submitted while the replicas were detached and acknowledged
//     APPLIED by the primary alone. The promoted replica has no record
//     and no entry: it is never sent, and Get answers not found.
func TestSentinelFailoverDuringDispatch(t *testing.T) {
	sen := redistest.StartSentinel(t)
	s := newStore(t, &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()}, 1)
	old := sen.Primary()
	runFailoverDuringDispatch(t, s, old, sen.Replicas(), func() {
		require.NotEqual(t, old.Addr(), sen.AwaitFailover(t, old).Addr())
	})
}

// TestClusterFailoverDuringDispatch is the Cluster counterpart: the
// primary owning the shard's slot (its stream, quarantine stream and
// records) is killed and the cluster promotes its replica.
func TestClusterFailoverDuringDispatch(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithConfig("cluster-node-timeout", "1000"))
	s := newStore(t, &policy.Cluster{Seeds: cl.Seeds()}, 1)
	stream, _, err := s.StreamKeys(0)
	require.NoError(t, err)
	primary, replica := cl.ShardOf(t, stream)
	runFailoverDuringDispatch(t, s, primary, []*redistest.Server{replica}, func() { redistest.AwaitPromoted(t, replica) })
}

// runFailoverDuringDispatch plays the scenario of
// TestSentinelFailoverDuringDispatch on s, whose one shard lives on old
// with replicas; promote waits until a replica took over.
func runFailoverDuringDispatch(t *testing.T, s *intent.Store, old *redistest.Server, replicas []*redistest.Server, promote func()) {
	ctx := ctxT(t)
	tr, obs := newScripted("primary", accepted), &counting{}
	d, err := New(s, crashConfig(obs, 1, tr))
	require.NoError(t, err)
	submit := func(key string) intent.ID {
		t.Helper()
		sub, err := s.Submit(ctx, []byte(key), testPlan(t, "primary"))
		require.NoError(t, err)
		require.False(t, sub.Duplicate)
		return sub.ID
	}
	sent := func() map[string]int {
		n := map[string]int{}
		for _, c := range tr.Calls() {
			n[c.IntentID]++
		}
		return n
	}

	delivered := submit("delivered")
	n, err := d.Poll(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	resent, queued := submit("resent"), submit("queued")
	redistest.AwaitReplicated(t, old, len(replicas))

	reattach := redistest.DetachReplicas(t, old, replicas...)
	n, err = d.Poll(ctx, 0) // ReadCount 1: resent only
	require.NoError(t, err)
	require.Equal(t, 1, n)
	st, err := s.Get(ctx, resent)
	require.NoError(t, err)
	require.Equal(t, intent.Delivered, st.State, "on the old primary")
	lost := submit("lost")
	old.Kill()
	reattach()
	promote()

	// The promoted replica answers once the client follows it.
	require.Eventually(t, func() bool {
		st, err := s.Get(ctx, delivered)
		return err == nil && st.State == intent.Delivered
	}, 30*time.Second, 50*time.Millisecond, "the replicated final state survives")
	_, err = s.Get(ctx, lost)
	require.ErrorIs(t, err, intent.ErrNotFound, "an unreplicated submit is gone")
	st, err = s.Get(ctx, resent)
	require.NoError(t, err)
	assert.Equal(t, intent.Pending, st.State, "the claim and finalize the old primary acknowledged are gone")

	require.Eventually(t, func() bool {
		_, _ = d.Poll(ctx, 0)
		q, err1 := s.Get(ctx, queued)
		r, err2 := s.Get(ctx, resent)
		return err1 == nil && err2 == nil && q.State == intent.Delivered && r.State == intent.Delivered
	}, 30*time.Second, 20*time.Millisecond)
	assert.Equal(t, map[string]int{string(delivered): 1, string(resent): 2, string(queued): 1}, sent(),
		"delivered and queued once; resent twice (same intent id); lost never")
	for _, c := range tr.Calls() {
		assert.NotEqual(t, string(lost), c.IntentID)
	}
}

// TestMinReplicasToWriteRefusesAnUnreplicatedSubmit: with
// min-replicas-to-write 1, a primary that lost its replicas refuses a
// submit before it writes anything (NOREPLICAS): an error with certainty
// NOT_APPLIED, never an APPLIED intent a failover could lose. Once a
// replica is back the same key submits.
func TestMinReplicasToWriteRefusesAnUnreplicatedSubmit(t *testing.T) {
	sen := redistest.StartSentinel(t, redistest.WithConfig("min-replicas-to-write", "1"),
		redistest.WithConfig("min-replicas-max-lag", "10"))
	s := newStore(t, &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()}, 1)
	ctx := ctxT(t)
	primary := sen.Primary()

	reattach := redistest.DetachReplicas(t, primary, sen.Replicas()...)
	sub, err := s.Submit(ctx, []byte("isolated"), testPlan(t, "primary"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOREPLICAS")
	assert.Equal(t, certainty.NotApplied, sub.Certainty, "%v", err)
	n, err := primary.Admin().DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing was written")

	reattach()
	require.Eventually(t, func() bool {
		sub, err = s.Submit(ctx, []byte("isolated"), testPlan(t, "primary"))
		return err == nil && sub.Certainty == certainty.Applied && !sub.Duplicate
	}, 30*time.Second, 50*time.Millisecond, "submits work once a replica is back (last %v)", err)
}
