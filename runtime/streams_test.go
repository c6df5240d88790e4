package runtime

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// streamKey is shard i's stream of a notify layout, as host/notify/intent
// builds it.
func streamKey(t *testing.T, r *Runtime, i int) keys.Key {
	t.Helper()
	l, err := r.Keys().PrepareSharded(keys.ShardSpec{Capability: keys.CapNotify, Region: "streams-test", KeyVersion: 1,
		Shards: 4, AnchorKind: "stream", MemberKinds: []string{"intent"}})
	require.NoError(t, err)
	return l.Anchor(i)
}

func runStreamFacade(t *testing.T, r *Runtime, admin redis.UniversalClient) {
	ctx := ctxT(t, 30*time.Second)
	d, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	s := streamKey(t, r, 1)

	// No stream yet: the group is not created (no MKSTREAM), nothing read.
	_, err = d.StreamCreateGroup(ctx, s, "g")
	require.ErrorIs(t, err, ErrStreamAbsent)
	assert.Equal(t, certainty.NotApplied, outcomeOf(t, err))
	_, err = d.StreamReadGroup(ctx, s, "g", "c1", 8, 0)
	require.ErrorIs(t, err, ErrNoGroup)

	id1 := admin.XAdd(ctx, &redis.XAddArgs{Stream: s.Redis(), Values: []any{"i", "a", "p", "x"}}).Val()
	created, err := d.StreamCreateGroup(ctx, s, "g")
	require.NoError(t, err)
	assert.True(t, created)
	created, err = d.StreamCreateGroup(ctx, s, "g")
	require.NoError(t, err)
	assert.False(t, created, "a repeat is BUSYGROUP")
	id2 := admin.XAdd(ctx, &redis.XAddArgs{Stream: s.Redis(), Values: []any{"i", "b", "i", "dup"}}).Val()

	got, err := d.StreamReadGroup(ctx, s, "g", "c1", 8, 10*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, got, 2, "entries appended before the group are delivered (group starts at 0)")
	assert.Equal(t, id1, got[0].ID)
	assert.Equal(t, []StreamField{{[]byte("i"), []byte("a")}, {[]byte("p"), []byte("x")}}, got[0].Fields)
	assert.Equal(t, []StreamField{{[]byte("i"), []byte("b")}, {[]byte("i"), []byte("dup")}}, got[1].Fields,
		"duplicate field names reach the caller's strict decoder")

	// Nothing new: no block returns at once (BLOCK 0 would wait forever,
	// so it is not sent), a bounded block returns nothing.
	got, err = d.StreamReadGroup(ctx, s, "g", "c1", 8, 0)
	require.NoError(t, err)
	assert.Empty(t, got)
	got, err = d.StreamReadGroup(ctx, s, "g", "c1", 8, 5*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, got)

	info, err := d.StreamGroupInfo(ctx, s, "g")
	require.NoError(t, err)
	assert.Equal(t, StreamGroupInfo{Pending: 2, Lag: 0, LagKnown: true}, info)
	_, err = d.StreamGroupInfo(ctx, s, "other")
	require.ErrorIs(t, err, ErrNoGroup)

	pend, err := d.StreamPendingIdle(ctx, s, "g", 0, 8)
	require.NoError(t, err)
	require.Len(t, pend, 2)
	assert.Equal(t, "c1", pend[0].Consumer)
	assert.Equal(t, int64(1), pend[0].Deliveries)
	// A range: from a cursor, up to an id, and idle filtered.
	pend, err = d.StreamPendingRange(ctx, s, "g", 0, id2, "+", 8)
	require.NoError(t, err)
	require.Len(t, pend, 1)
	assert.Equal(t, id2, pend[0].ID)
	pend, err = d.StreamPendingRange(ctx, s, "g", 0, "-", id1, 8)
	require.NoError(t, err)
	require.Len(t, pend, 1)
	assert.Equal(t, id1, pend[0].ID)
	pend, err = d.StreamPendingRange(ctx, s, "g", time.Hour, "0-0", "+", 8)
	require.NoError(t, err)
	assert.Empty(t, pend, "nothing idle for an hour")
	for _, bad := range [][2]string{{"(0-1", "+"}, {"-", "01-1"}, {"", "+"}} {
		_, err = d.StreamPendingRange(ctx, s, "g", 0, bad[0], bad[1], 8)
		assert.Equal(t, certainty.Rejected, outcomeOf(t, err), "range %q", bad)
	}

	// Nothing is idle for an hour: no reclaim. Trim id1 away and reclaim
	// with a 1ms idle: id1 is reported deleted, id2 moves to c2.
	got, next, deleted, err := d.StreamAutoClaim(ctx, s, "g", "c2", time.Hour, "0-0", 8)
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Empty(t, deleted)
	assert.Equal(t, "0-0", next)
	require.NoError(t, admin.XDel(ctx, s.Redis(), id1).Err())
	time.Sleep(2 * time.Millisecond) // idle is measured by the server's clock; 1ms minimum
	got, _, deleted, err = d.StreamAutoClaim(ctx, s, "g", "c2", time.Millisecond, "0-0", 8)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, id2, got[0].ID)
	assert.Equal(t, []string{id1}, deleted)
	pend, err = d.StreamPendingIdle(ctx, s, "g", 0, 8)
	require.NoError(t, err)
	require.Len(t, pend, 1)
	assert.Equal(t, "c2", pend[0].Consumer)
	assert.Equal(t, int64(2), pend[0].Deliveries)

	// Refused before sending.
	_, err = d.StreamReadGroup(ctx, s, "g", "c 1", 8, 0)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
	_, err = d.StreamReadGroup(ctx, s, "g", "c1", MaxStreamCount+1, 0)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
	_, err = d.StreamReadGroup(ctx, s, "g", "c1", 1, time.Hour)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err), "a block beyond half the read timeout")
}

func TestStreamFacadeStandalone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	r := newRuntime(t, testConfig(testDeployment("main", standalone(srv.Addr()))))
	runStreamFacade(t, r, srv.Admin())
}

func TestStreamFacadeCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	r := newRuntime(t, testConfig(testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})))
	runStreamFacade(t, r, cl.Admin())
}

// TestStreamReadGroupWakesOnAppend: a blocking read that the server holds
// blocked returns the entry appended while it waits.
func TestStreamReadGroupWakesOnAppend(t *testing.T) {
	srv := redistest.StartStandalone(t)
	r := newRuntime(t, testConfig(testDeployment("main", standalone(srv.Addr()))))
	ctx := ctxT(t, 30*time.Second)
	d, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	s := streamKey(t, r, 2)
	srv.Admin().XAdd(ctx, &redis.XAddArgs{Stream: s.Redis(), Values: []any{"i", "a"}})
	_, err = d.StreamCreateGroup(ctx, s, "g")
	require.NoError(t, err)
	_, err = d.StreamReadGroup(ctx, s, "g", "c", 1, 0)
	require.NoError(t, err)

	done := make(chan []StreamEntry, 1)
	go func() {
		got, err := d.StreamReadGroup(context.Background(), s, "g", "c", 1, 900*time.Millisecond)
		assert.NoError(t, err)
		done <- got
	}()
	// Wait until the server has the read blocked, then append.
	require.Eventually(t, func() bool {
		return blockedClients(ctx, srv.Admin()) == 1
	}, 10*time.Second, time.Millisecond)
	id := srv.Admin().XAdd(ctx, &redis.XAddArgs{Stream: s.Redis(), Values: []any{"i", "b"}}).Val()
	got := <-done
	require.Len(t, got, 1)
	assert.Equal(t, id, got[0].ID)
	assert.Positive(t, srv.CommandCalls(t, "xreadgroup"))
}

func blockedClients(ctx context.Context, admin *redis.Client) int {
	var n int
	for _, line := range strings.Split(admin.Info(ctx, "clients").Val(), "\n") {
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "blocked_clients:%d", &n); err == nil {
			return n
		}
	}
	return -1
}
