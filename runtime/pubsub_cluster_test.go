package runtime

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// TestPubSubCluster runs one subscription through the two ways a shard
// channel changes hands on a 3+3 Cluster: its slot migrates to another
// primary (the old owner sends SUNSUBSCRIBE) and its primary dies (the
// replica is promoted after cluster-node-timeout, 2 s here). Each time the
// subscription goes down and comes back up on the new owner, and messages
// flow again.
func TestPubSubCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	f := subscribed(t, testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()}), SubscribeOptions{})
	dep, ch, rec, s, ctx := f.dep, f.ch, f.rec, f.sub, ctxT(t, 2*eventually)
	owner := slotOwner(t, cl, ch)
	assert.Equal(t, 1, shardSubscribers(t, owner, ch))

	// Migrate the (empty) slot to another primary.
	var target *redistest.Server
	for _, p := range cl.Primaries() {
		if p != owner {
			target = p
			break
		}
	}
	slot := strconv.Itoa(int(ch.Slot()))
	ownerID, targetID := nodeID(t, owner), nodeID(t, target)
	moved := time.Now()
	for _, step := range []struct {
		on   *redistest.Server
		args []any
	}{
		{target, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", ownerID}},
		{owner, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", targetID}},
		{target, []any{"CLUSTER", "SETSLOT", slot, "NODE", targetID}},
		{owner, []any{"CLUSTER", "SETSLOT", slot, "NODE", targetID}},
	} {
		require.NoError(t, step.on.Admin().Do(ctx, step.args...).Err(), "%v", step.args)
	}
	down := rec.waitState(2, false)
	up := rec.waitState(3, true)
	t.Logf("cluster: migration begun → State(false) %s → State(true) %s later",
		down.Sub(moved).Round(time.Millisecond), up.Sub(down).Round(time.Millisecond))
	publishUntilReceived(t, dep, ch, rec, "after-migration")
	assert.Equal(t, 1, shardSubscribers(t, target, ch), "resubscribed on the new owner")

	// Kill the owner; its replica takes over.
	replica := replicaOf(t, cl, target)
	promoted := make(chan time.Time, 1)
	go func() {
		for ctx.Err() == nil {
			if role, err := replica.Admin().Do(ctx, "ROLE").Slice(); err == nil && role[0] == "master" {
				promoted <- time.Now()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	killed := time.Now()
	target.Kill()
	down = rec.waitState(4, false)
	up = rec.waitState(5, true)
	var at time.Time
	select {
	case at = <-promoted:
	case <-ctx.Done():
		t.Fatal("the replica was never promoted")
	}
	t.Logf("cluster: primary killed → State(false) %s; replica promoted %s after the kill; State(true) %s after the promotion (%s after the kill, node-timeout 2s, %d reconnects)",
		down.Sub(killed).Round(time.Millisecond), at.Sub(killed).Round(time.Millisecond),
		up.Sub(at).Round(time.Millisecond), up.Sub(killed).Round(time.Millisecond), s.Stats().Reconnects)
	assert.True(t, up.After(at), "up before the replica was promoted")
	publishUntilReceived(t, dep, ch, rec, "after-failover")
	assert.Equal(t, 1, shardSubscribers(t, replica, ch), "resubscribed on the promoted replica")
	for _, n := range cl.Nodes() {
		if n != target {
			assert.Zero(t, n.CommandCalls(t, "subscribe")+n.CommandCalls(t, "publish"), "classic Pub/Sub is never used")
		}
	}
}

// slotOwner is the primary serving k's slot, asked of every primary.
func slotOwner(t *testing.T, cl *redistest.Cluster, k keys.Key) *redistest.Server {
	t.Helper()
	for _, p := range cl.Primaries() {
		slots, err := p.Admin().ClusterSlots(context.Background()).Result()
		require.NoError(t, err)
		for _, sr := range slots {
			if int(k.Slot()) >= sr.Start && int(k.Slot()) <= sr.End && sr.Nodes[0].Addr == p.Addr() {
				return p
			}
		}
	}
	t.Fatal("no primary serves the slot")
	return nil
}

func nodeID(t *testing.T, s *redistest.Server) string {
	t.Helper()
	id, err := s.Admin().Do(context.Background(), "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	return id
}

// replicaOf is the replica following primary.
func replicaOf(t *testing.T, cl *redistest.Cluster, primary *redistest.Server) *redistest.Server {
	t.Helper()
	for _, r := range cl.Replicas() {
		info, err := r.Admin().Info(context.Background(), "replication").Result()
		require.NoError(t, err)
		if strings.Contains(info, "master_port:"+strconv.Itoa(primary.Port())+"\r\n") {
			return r
		}
	}
	t.Fatal("the primary has no replica")
	return nil
}

// shardSubscribers is PUBSUB SHARDNUMSUB of k on s.
func shardSubscribers(t *testing.T, s *redistest.Server, k keys.Key) int {
	t.Helper()
	res, err := s.Admin().Do(context.Background(), "PUBSUB", "SHARDNUMSUB", k.Redis()).Slice()
	require.NoError(t, err)
	require.Len(t, res, 2)
	n, ok := res[1].(int64)
	require.True(t, ok)
	return int(n)
}
