package programs

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
)

// TestReplicatedFencedProgramsInBothModes runs the replicated facades in
// both program modes against a primary with one replica: the count WAIT
// answers is reported with the program's result (1 with the replica live,
// 0 at the timeout with it paused, the program applied either way), and a
// ReplicaWait out of bounds sends nothing.
func TestReplicatedFencedProgramsInBothModes(t *testing.T) {
	primary := redistest.StartStandalone(t)
	replica := redistest.StartStandalone(t)
	ctx := context.Background()
	require.NoError(t, replica.Admin().Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port())).Err())
	// Wait for an online replica, then for a write of this connection: a
	// write made before the replica attached is not in the replication
	// offset, and after a diskless full sync Redis 7.0 streams to the
	// replica only from its first REPLCONF ACK (up to a second later).
	require.Eventually(t, func() bool {
		info, err := primary.Admin().Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, ",state=online,")
	}, 30*time.Second, 10*time.Millisecond)
	probe := primary.Admin().Conn()
	defer probe.Close()
	require.NoError(t, probe.Set(ctx, "redistest:streaming-probe", "1", time.Minute).Err())
	n, err := probe.Wait(ctx, 1, 10*time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, primary.Admin()))
	reg := FenceRegistration{Epoch: 7, Digest: "00112233445566778899aabbccddeeff"}
	w := ReplicaWait{Acks: 1, Timeout: time.Second} // generous: a loaded machine must not miss the live replica's ack
	leaseModes(t, cat, standaloneClient(t, primary), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		ks := fenceKeys(t, testBuilder(t), "replicated-"+string(mode))
		owner, counter := ks[0], ks[1]
		p, reps, err := e.FenceCounterProvisionReplicated(ctx, counter, reg, 0, w)
		require.NoError(t, err)
		require.Equal(t, FenceProvisioned, p.Status)
		assert.Equal(t, Replicas{Wanted: 1, Reached: 1}, reps)
		assert.True(t, reps.OK())

		req := FencedLeaseAcquireRequest{Registration: reg, TTL: 10 * time.Second, HardFailThreshold: MaxFenceInteger,
			Attempt: LeaseAttempt{Owner: []byte("owner-a"), OperationID: []byte("op-1")}}
		a, reps, err := e.FencedLeaseAcquireReplicated(ctx, owner, counter, req, w)
		require.NoError(t, err)
		require.Equal(t, FencedAcquired, a.Status)
		assert.Equal(t, int64(1), a.Token.Counter)
		assert.True(t, reps.OK())
		val, err := replica.Admin().Get(ctx, counter.Redis()).Result()
		require.NoError(t, err)
		assert.Contains(t, val, ":7:1:", "acknowledged: the replica has the increment")

		replica.Pause()
		req.Attempt = LeaseAttempt{Owner: []byte("owner-b"), OperationID: []byte("op-2")}
		_, err = e.FencedLeaseRelease(ctx, owner, counter, FencedLeaseHold{Registration: reg, Owner: []byte("owner-a"), Counter: 1})
		require.NoError(t, err)
		start := time.Now()
		b, reps, err := e.FencedLeaseAcquireReplicated(ctx, owner, counter, req, w)
		replica.Resume()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(start), w.Timeout)
		require.Equal(t, FencedAcquired, b.Status, "applied on the primary")
		assert.Equal(t, Replicas{Wanted: 1, Reached: 0}, reps)
		assert.False(t, reps.OK())

		c, reps, err := e.FencedLeaseAcquireReplicated(ctx, owner, counter,
			FencedLeaseAcquireRequest{Registration: reg, TTL: time.Second, HardFailThreshold: MaxFenceInteger,
				Attempt: LeaseAttempt{Owner: []byte("owner-c"), OperationID: []byte("op-3")}}, w)
		require.NoError(t, err)
		assert.Equal(t, FencedContended, c.Status)
		assert.Equal(t, Replicas{Wanted: 1}, reps, "a status that wrote nothing reports no count")
		require.NoError(t, probe.Set(ctx, "redistest:streaming-probe", "2", time.Minute).Err())
		n, err := probe.Wait(ctx, 1, 10*time.Second).Result() // the paused replica caught up again
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	})

	e, err := NewExecutor(cat, policy.ProgramsEvalshaManaged, standaloneClient(t, primary))
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second-ReplicaWaitMargin, e.ReplicaWaitLimit(), "the client's 5 s read timeout minus the margin")
	ks := fenceKeys(t, testBuilder(t), "bounds")
	before := primary.CommandCalls(t, "evalsha")
	for _, bad := range []ReplicaWait{{Acks: 0, Timeout: time.Second}, {Acks: MaxReplicaAcks + 1, Timeout: time.Second},
		{Acks: 1}, {Acks: 1, Timeout: 1500 * time.Microsecond}, {Acks: 1, Timeout: 4901 * time.Millisecond}} {
		_, _, err := e.FenceCounterProvisionReplicated(ctx, ks[1], reg, 0, bad)
		require.ErrorIs(t, err, ErrReplicaWait, "%+v", bad)
	}
	assert.Equal(t, before, primary.CommandCalls(t, "evalsha"), "nothing sent")
}
