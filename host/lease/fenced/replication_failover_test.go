package fenced

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestSentinelFailoverKeepsAnAcknowledgedGrant: with the replication
// profile at acks 2 (both replicas of a 1+2 Sentinel deployment), a grant
// handed out is on every replica, so whichever one the Sentinels promote
// has it:
//
//  1. A acquires (e, 1) — acknowledged by 2 — writes and releases; B
//     acquires (e, 2), acknowledged by 2, writes, and keeps holding.
//  2. The primary stops (SIGSTOP); the Sentinels promote a replica.
//  3. On the promoted replica B still holds the lease with (e, 2) and the
//     counter is 2: nothing B was handed regressed. C is CONTENDED.
//  4. With one replica left, acks 2 cannot be met: after B releases, C's
//     acquire is NOT_REPLICATED (released, no token) — acquisition fails
//     closed instead of handing out a token one failover could repeat.
//  5. The old primary rejoins as a replica; C acquires (e, 4): above
//     every token handed out (3 went to the unreplicated grant, never to
//     anyone) and the Strict store admits it.
func TestSentinelFailoverKeepsAnAcknowledgedGrant(t *testing.T) {
	sen := redistest.StartSentinel(t)
	w := newWorldOn(t, newRuntimeOn(t, &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()}), nil,
		Config{Replication: Replication{Acks: 2, Timeout: ackTimeout}})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	awaitStreaming(t, sen.Primary(), 2)
	reg := w.activate(t, "acct-7")

	a, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "a"))
	require.NoError(t, err)
	require.Equal(t, Acquired, a.Kind)
	assert.Equal(t, 2, a.Replicas)
	require.NoError(t, w.write(ctx, a.Handle.Token(), "A", 90))
	rel, err := a.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel)

	b, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "b"))
	require.NoError(t, err)
	require.Equal(t, Acquired, b.Kind)
	assert.Equal(t, 2, b.Replicas, "both replicas hold B's grant before B has its token")
	tokB := b.Handle.Token()
	require.Equal(t, int64(2), tokB.Counter)
	require.NoError(t, w.write(ctx, tokB, "B", 80))

	old := sen.Primary()
	old.Pause()
	t.Cleanup(old.Resume)
	next := sen.AwaitFailover(t, old)

	var seen Acquisition
	require.Eventually(t, func() bool {
		got, err := w.c.Inspect(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 30 * time.Second, Attempt: b.Handle.Attempt()})
		seen = got
		return err == nil && got.Kind == ReplayedSameOperation
	}, 60*time.Second, 20*time.Millisecond, "the promoted replica answers (last %s)", &seen.Kind)
	assert.Equal(t, tokB, seen.Handle.Token(), "B's acknowledged grant survived the failover")
	assert.Equal(t, int64(2), replicaCounter(t, w, next), "the counter did not regress")

	c, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "c"))
	require.NoError(t, err)
	assert.Equal(t, Contended, c.Kind, "B still holds it on the new primary")
	rel, err = b.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel)

	c, err = w.c.Acquire(ctx, ledgerRequest(t, reg, "c"))
	require.NoError(t, err)
	assert.Equal(t, NotReplicated, c.Kind, "one replica left cannot acknowledge acks 2")
	assert.Less(t, c.Replicas, 2)
	assert.Nil(t, c.Handle)
	assert.Equal(t, lease.ReleaseDone, c.Release)
	assert.Equal(t, int64(3), c.Fence.Counter)

	old.Resume()
	sen.AwaitReplicaOf(t, old, next)
	awaitStreaming(t, next, 2) // the rejoined replica's stream starts on its first ACK
	d, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "d"))
	require.NoError(t, err)
	require.Equal(t, Acquired, d.Kind)
	assert.Equal(t, 2, d.Replicas)
	tokD := d.Handle.Token()
	assert.Equal(t, fence.Token{Epoch: reg.Epoch, Counter: 4}, tokD)
	require.NoError(t, w.write(ctx, tokD, "D", 70), "above every token handed out: admitted")
	bal, who := w.account(t)
	assert.Equal(t, 70, bal)
	assert.Equal(t, "D", who)
}

// TestClusterFailoverNeverRepeatsAHandedOutToken is the counterpart of
// TestClusterFailoverRepeatsALostTokenAndTheStoreRejectsIt with the
// replication profile (acks 1, the slot's one replica): the grant the
// detached replica never saw is NOT_REPLICATED — released, its token
// handed to nobody. The failover loses that increment; the promoted node
// has no replica, so acquires stay NOT_REPLICATED (fail closed) until the
// old primary rejoins as its replica; then the next token is admitted by
// the Strict store, because no token anyone wrote with was issued twice.
// Without the profile the same run repeats a token B had written with,
// and the store rejects the repeat (failover_test.go).
func TestClusterFailoverNeverRepeatsAHandedOutToken(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithConfig("cluster-node-timeout", "1000"))
	w := newWorldOn(t, newRuntimeOn(t, &policy.Cluster{Seeds: cl.Seeds()}), nil,
		Config{Replication: Replication{Acks: 1, Timeout: ackTimeout}})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	_, counter, err := w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	primary, replica := cl.ShardOf(t, counter.Redis())
	probe := counter.Redis() + ":probe" // the counter's hash tag: a slot this primary serves
	awaitStreamingVia(t, primary, 1, probe)
	reg := w.activate(t, "acct-7")

	a, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "a"))
	require.NoError(t, err)
	require.Equal(t, Acquired, a.Kind)
	assert.Equal(t, 1, a.Replicas, "the WAIT ran on the slot's primary, which has one replica")
	require.NoError(t, w.write(ctx, a.Handle.Token(), "A", 90))
	rel, err := a.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel)
	awaitStreamingVia(t, primary, 1, probe)

	reattach := redistest.DetachReplicas(t, primary, replica)
	b, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "b"))
	require.NoError(t, err)
	require.Equal(t, NotReplicated, b.Kind)
	assert.Nil(t, b.Handle, "B gets no token to write with")
	assert.Equal(t, int64(2), b.Fence.Counter, "the primary alone counted 2")
	primary.Kill()
	reattach()
	redistest.AwaitPromoted(t, replica)

	// The promoted replica has no replica of its own: acks 1 cannot be
	// met, and acquisition fails closed until the slot is replicated again.
	var d Acquisition
	require.Eventually(t, func() bool {
		d, err = w.c.Acquire(ctx, ledgerRequest(t, reg, "d"))
		return err == nil && d.Kind != Unavailable && d.Kind != Indeterminate
	}, 60*time.Second, 50*time.Millisecond, "the promoted replica answers (last %s)", &d.Kind)
	require.Equal(t, NotReplicated, d.Kind)
	assert.Zero(t, d.Replicas)
	assert.Nil(t, d.Handle)
	assert.Equal(t, int64(2), d.Fence.Counter, "the lost increment's value is counted again, and again handed to nobody")

	primary.Restart(t) // rejoins as the promoted node's replica (nodes.conf), empty
	awaitStreamingVia(t, replica, 1, probe)
	e, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "e"))
	require.NoError(t, err)
	require.Equal(t, Acquired, e.Kind)
	assert.Equal(t, 1, e.Replicas)
	assert.Equal(t, int64(3), e.Handle.Token().Counter)
	require.NoError(t, w.write(ctx, e.Handle.Token(), "E", 60), "no token handed out was repeated: admitted")
	bal, who := w.account(t)
	assert.Equal(t, 60, bal)
	assert.Equal(t, "E", who)
}
