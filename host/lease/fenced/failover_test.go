package fenced

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestSentinelFailoverRepeatsALostTokenAndTheStoreRejectsIt finds out, on
// real processes, what an asynchronous-replication failover does to the
// fence counter, and that the protected store keeps safety anyway:
//
//  1. A acquires (e, 1), writes, releases; all of it replicated (WAIT).
//  2. With the replicas detached, B acquires (e, 2) — acknowledged by a
//     primary that never replicates it — and writes: the store's
//     watermark is now 2.
//  3. The primary is killed; the Sentinels promote a replica. The
//     replicated increment survived (the counter is 1, not 0 or missing),
//     the unreplicated one is lost: the Redis counter regressed.
//  4. C acquires and gets (e, 2) again — the same token B holds: a fence
//     token can repeat after a failover. Nothing in Redis can tell (B's
//     owner record was lost with the increment, so no FENCE_REGRESSION).
//  5. The Strict store (the zero Mode) admits each counter value once:
//     C's write with the repeated token is rejected (ErrStaleToken) and
//     the account keeps B's write; B's renew answers LOST. Availability
//     returns when the counter passes the watermark: the next holder's
//     (e, 3) is admitted.
func TestSentinelFailoverRepeatsALostTokenAndTheStoreRejectsIt(t *testing.T) {
	sen := redistest.StartSentinel(t)
	w := newWorldOn(t, newRuntimeOn(t, &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()}), nil, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	reg := w.activate(t, "acct-7")
	req := func(op string) Request {
		return Request{Purpose: "ledger", Registration: reg, TTL: 30 * time.Second, Attempt: attempt(t, op)}
	}

	a, err := w.c.Acquire(ctx, req("a"))
	require.NoError(t, err)
	require.Equal(t, Acquired, a.Kind)
	require.Equal(t, fence.Token{Epoch: reg.Epoch, Counter: 1}, a.Handle.Token())
	require.NoError(t, w.write(ctx, a.Handle.Token(), "A", 90))
	rel, err := a.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel)
	old := sen.Primary()
	redistest.AwaitReplicated(t, old, 2)

	reattach := redistest.DetachReplicas(t, old, sen.Replicas()...)
	b, err := w.c.Acquire(ctx, req("b"))
	require.NoError(t, err)
	require.Equal(t, Acquired, b.Kind)
	tokB := b.Handle.Token()
	require.Equal(t, int64(2), tokB.Counter)
	require.NoError(t, w.write(ctx, tokB, "B", 80), "B writes with a token only the dying primary knows")
	old.Kill()
	reattach()
	next := sen.AwaitFailover(t, old)

	// Wait until the client is served by the promoted replica: B's
	// attempt is unknown there.
	var seen Acquisition
	require.Eventually(t, func() bool {
		got, err := w.c.Inspect(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 30 * time.Second, Attempt: b.Handle.Attempt()})
		seen = got
		return err == nil && got.Kind == Absent
	}, 60*time.Second, 20*time.Millisecond, "the promoted replica answers (last %s)", &seen.Kind)
	_, counter, err := w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	raw, err := next.Admin().Get(ctx, counter.Redis()).Result()
	require.NoError(t, err, "the counter key survived the failover")
	f := strings.Split(raw, ":") // C1:<epoch>:<counter>:<registration digest>
	require.Len(t, f, 4)
	assert.Equal(t, "1", f[2], "the promoted replica's counter is A's replicated increment, without B's")

	c, err := w.c.Acquire(ctx, req("c"))
	require.NoError(t, err)
	require.Equal(t, Acquired, c.Kind, "nothing in Redis tells the lost increment apart")
	tokC := c.Handle.Token()
	assert.Equal(t, tokB, tokC, "the fence token repeats: the unreplicated increment was lost, the replicated one was not")

	err = w.write(ctx, tokC, "C", 70)
	require.ErrorIs(t, err, fence.ErrStaleToken, "Strict admits a counter value once: the repeated token is refused")
	bal, who := w.account(t)
	assert.Equal(t, 80, bal)
	assert.Equal(t, "B", who)
	got, err := w.store.Lookup(ctx, "acct-7")
	require.NoError(t, err)
	assert.Equal(t, tokB.Counter, got.HighWatermark, "the watermark remembers what Redis forgot")

	kind, err := b.Handle.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, lease.RenewLost, kind, "B's renew finds C's lease")
	assert.Equal(t, Lost, b.Handle.State())

	rel, err = c.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel)
	d, err := w.c.Acquire(ctx, req("d"))
	require.NoError(t, err)
	require.Equal(t, Acquired, d.Kind)
	assert.Equal(t, int64(3), d.Handle.Token().Counter)
	require.NoError(t, w.write(ctx, d.Handle.Token(), "D", 60), "past the watermark, writes are admitted again")
}

// TestClusterFailoverRepeatsALostTokenAndTheStoreRejectsIt is the Cluster
// counterpart (3 primaries, 3 replicas, node timeout 1 s): the primary
// owning the resource's slot (owner record and counter share a hash tag)
// is killed after an unreplicated acquire; on the promoted replica the
// counter is the last replicated value, the next acquire repeats the lost
// token, and the Strict store rejects its write.
func TestClusterFailoverRepeatsALostTokenAndTheStoreRejectsIt(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithConfig("cluster-node-timeout", "1000"))
	w := newWorldOn(t, newRuntimeOn(t, &policy.Cluster{Seeds: cl.Seeds()}), nil, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	reg := w.activate(t, "acct-7")
	req := func(op string) Request {
		return Request{Purpose: "ledger", Registration: reg, TTL: 30 * time.Second, Attempt: attempt(t, op)}
	}
	_, counter, err := w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	primary, replica := cl.ShardOf(t, counter.Redis())

	a, err := w.c.Acquire(ctx, req("a"))
	require.NoError(t, err)
	require.Equal(t, Acquired, a.Kind)
	require.NoError(t, w.write(ctx, a.Handle.Token(), "A", 90))
	rel, err := a.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel)
	redistest.AwaitReplicated(t, primary, 1)

	reattach := redistest.DetachReplicas(t, primary, replica)
	b, err := w.c.Acquire(ctx, req("b"))
	require.NoError(t, err)
	require.Equal(t, Acquired, b.Kind)
	tokB := b.Handle.Token()
	require.Equal(t, int64(2), tokB.Counter)
	require.NoError(t, w.write(ctx, tokB, "B", 80))
	primary.Kill()
	reattach()
	redistest.AwaitPromoted(t, replica)
	var seen Acquisition
	require.Eventually(t, func() bool {
		got, err := w.c.Inspect(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 30 * time.Second, Attempt: b.Handle.Attempt()})
		seen = got
		return err == nil && got.Kind == Absent
	}, 60*time.Second, 20*time.Millisecond, "the promoted replica answers (last %s)", &seen.Kind)

	c, err := w.c.Acquire(ctx, req("c"))
	require.NoError(t, err)
	require.Equal(t, Acquired, c.Kind)
	assert.Equal(t, tokB, c.Handle.Token(), "the fence token repeats on Cluster too")
	require.ErrorIs(t, w.write(ctx, c.Handle.Token(), "C", 70), fence.ErrStaleToken)
	bal, who := w.account(t)
	assert.Equal(t, 80, bal)
	assert.Equal(t, "B", who)
}
