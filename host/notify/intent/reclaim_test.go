package intent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
)

// The reclaim tests never wait for an entry to become idle: an entry of a
// "dead" consumer has its idle time set to an hour (XCLAIM IDLE), one of a
// live consumer was just read, and Reclaim asks for reclaimIdle — far
// longer than any test runs, and far shorter than an hour.
const reclaimIdle = 10 * time.Minute

// pelRun is a stretch of shard 0's PEL: n entries read by consumer. With
// dead set they have been idle for an hour and delivered deliveries
// times; otherwise they were just read (delivered once).
type pelRun struct {
	consumer   string
	n          int
	dead       bool
	deliveries int64
}

func live(n int) pelRun { return pelRun{consumer: "live", n: n} }
func dead(n int, deliveries int64) pelRun {
	return pelRun{consumer: "dead", n: n, dead: true, deliveries: deliveries}
}

// reclaimStore is a 1-shard store on a fresh server and its admin client.
func reclaimStore(t *testing.T) (*Store, *redis.Client) {
	t.Helper()
	srv := redistest.StartStandalone(t)
	return standaloneStore(t, srv.Addr(), Config{Shards: 1}), srv.Admin()
}

// buildPEL submits the entries of runs and has each run's consumer read
// its entries in turn, so the PEL holds them in the order of runs. It
// returns each run's entry ids.
func buildPEL(ctx context.Context, t *testing.T, s *Store, admin *redis.Client, runs ...pelRun) [][]string {
	t.Helper()
	total := 0
	for _, r := range runs {
		total += r.n
	}
	for i := range total {
		_, err := s.Submit(ctx, []byte(fmt.Sprintf("reclaim-%d", i)), testPlan(t, "x"))
		require.NoError(t, err)
	}
	ready, err := s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	require.True(t, ready)
	stream := s.intents.Anchor(0).Redis()
	ids := make([][]string, len(runs))
	for i, r := range runs {
		res, err := admin.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.Group(), Consumer: r.consumer,
			Streams: []string{stream, ">"}, Count: int64(r.n), Block: -1}).Result()
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.Len(t, res[0].Messages, r.n)
		for _, m := range res[0].Messages {
			ids[i] = append(ids[i], m.ID)
		}
		if r.dead {
			makeIdle(ctx, t, s, admin, r.consumer, r.deliveries, ids[i]...)
		}
	}
	return ids
}

// makeIdle hands ids to consumer with an idle time of an hour and a
// delivery count of deliveries (XCLAIM … IDLE RETRYCOUNT JUSTID).
func makeIdle(ctx context.Context, t *testing.T, s *Store, admin *redis.Client, consumer string, deliveries int64, ids ...string) {
	t.Helper()
	args := []any{"xclaim", s.intents.Anchor(0).Redis(), s.Group(), consumer, 0}
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, "idle", time.Hour.Milliseconds(), "retrycount", deliveries, "justid")
	got, err := admin.Do(ctx, args...).Slice()
	require.NoError(t, err)
	require.Len(t, got, len(ids))
}

// pendingOf reads the server's PEL record of each id: owner and count.
func pendingOf(ctx context.Context, t *testing.T, s *Store, admin *redis.Client, id string) redis.XPendingExt {
	t.Helper()
	p, err := admin.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.intents.Anchor(0).Redis(), Group: s.Group(),
		Start: id, End: id, Count: 1}).Result()
	require.NoError(t, err)
	require.Len(t, p, 1, "still pending")
	return p[0]
}

func entryIDs(ds []Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.EntryID
	}
	return out
}

// TestReclaimReachesADeadConsumerBehindLiveEntries is issue 13's
// starvation: 250 entries a live consumer holds head the PEL, then 20 of
// a dead consumer, then 30 more live ones. XAUTOCLAIM COUNT 2 looks at 20
// PEL entries per call, so a scan from "0-0" on every call never got past
// the live head (before the fix: 0 of the 20 in 12 calls). Now each call
// hands over the next 2, in PEL order, with their delivery counts, and
// nothing of the live consumer's; then, with the cursor in the live tail,
// entries that became idle at the head are found after a wrap.
func TestReclaimReachesADeadConsumerBehindLiveEntries(t *testing.T) {
	s, admin := reclaimStore(t)
	ctx := ctxT(t)
	ids := buildPEL(ctx, t, s, admin, live(250), dead(20, 3), live(30))
	head, gone := ids[0], ids[1]

	for i := range 10 {
		r, err := s.Reclaim(ctx, 0, "next", reclaimIdle, 2)
		require.NoError(t, err)
		require.Equal(t, gone[2*i:2*i+2], entryIDs(r.Deliveries), "call %d: the next two of the dead consumer", i)
		assert.Equal(t, 1, r.Trips, "call %d", i)
		assert.False(t, r.Wrapped, "call %d", i)
		for _, d := range r.Deliveries {
			require.NoError(t, d.Err)
			assert.Equal(t, int64(4), d.Deliveries, "3 before, and this one")
			assert.Equal(t, int64(4), pendingOf(ctx, t, s, admin, d.EntryID).RetryCount, "the count the server holds")
		}
	}
	for _, id := range gone {
		assert.Equal(t, "next", pendingOf(ctx, t, s, admin, id).Consumer)
	}
	for _, id := range append(append([]string(nil), head...), ids[2]...) {
		p := pendingOf(ctx, t, s, admin, id)
		assert.Equal(t, "live", p.Consumer, "a live consumer's entry stays its own")
		assert.Equal(t, int64(1), p.RetryCount)
	}

	// The cursor is in the live tail; three entries at the head become
	// idle. Nothing idle after the cursor: the scan wraps and finds them.
	makeIdle(ctx, t, s, admin, "dead-2", 1, head[:3]...)
	r, err := s.Reclaim(ctx, 0, "next", reclaimIdle, 3)
	require.NoError(t, err)
	assert.Equal(t, head[:3], entryIDs(r.Deliveries))
	assert.True(t, r.Wrapped)
	assert.Equal(t, 1, r.Trips)
	for _, d := range r.Deliveries {
		assert.Equal(t, int64(2), d.Deliveries)
	}
	// A lap from the start finds nothing more, with no XAUTOCLAIM.
	r, err = s.Reclaim(ctx, 0, "next", reclaimIdle, 3)
	require.NoError(t, err)
	assert.Empty(t, r.Deliveries)
	assert.True(t, r.Wrapped)
	assert.Zero(t, r.Trips)
}

// TestReclaimRoundTripsAreBounded: dead entries 101 PEL entries apart,
// live ones between. With count 8 an XAUTOCLAIM looks at 80 entries, so
// each round trip reaches one dead entry: one Reclaim makes its 4 round
// trips and hands over 4 (a short page, not wrapped), the next goes on
// from the cursor with the other 4 and reaches the end of the PEL, and
// the one after finds nothing in a whole lap.
func TestReclaimRoundTripsAreBounded(t *testing.T) {
	s, admin := reclaimStore(t)
	ctx := ctxT(t)
	runs := []pelRun{dead(1, 1)}
	for range 7 {
		runs = append(runs, live(100), dead(1, 1))
	}
	ids := buildPEL(ctx, t, s, admin, runs...)
	var gone []string
	for i := 0; i < len(ids); i += 2 {
		gone = append(gone, ids[i]...)
	}
	require.Len(t, gone, 8)

	r, err := s.Reclaim(ctx, 0, "next", reclaimIdle, 8)
	require.NoError(t, err)
	assert.Equal(t, gone[:4], entryIDs(r.Deliveries))
	assert.Equal(t, reclaimTrips, r.Trips)
	assert.False(t, r.Wrapped)

	r, err = s.Reclaim(ctx, 0, "next", reclaimIdle, 8)
	require.NoError(t, err)
	assert.Equal(t, gone[4:], entryIDs(r.Deliveries), "from the cursor")
	assert.Equal(t, reclaimTrips, r.Trips)
	assert.True(t, r.Wrapped, "the last dead entry ends the PEL")

	r, err = s.Reclaim(ctx, 0, "next", reclaimIdle, 8)
	require.NoError(t, err)
	assert.Empty(t, r.Deliveries)
	assert.Zero(t, r.Trips)
	assert.True(t, r.Wrapped)
	for _, d := range gone {
		assert.Equal(t, int64(2), pendingOf(ctx, t, s, admin, d).RetryCount)
	}
	for _, bad := range []int{0, 65} {
		_, err = s.Reclaim(ctx, 0, "next", reclaimIdle, bad)
		require.ErrorIs(t, err, ErrInvalidRequest, "count %d", bad)
	}
}

// TestReclaimCountsAnEntryARaceMadeIdle: between the XPENDING that reads
// the counts and the XAUTOCLAIM, a live entry after the first idle one
// becomes idle (its consumer stalled at that moment). XAUTOCLAIM takes it
// with the first; its count is read after the claim, so the delivery
// counts reported are the server's, never a default of 1.
func TestReclaimCountsAnEntryARaceMadeIdle(t *testing.T) {
	s, admin := reclaimStore(t)
	ctx := ctxT(t)
	ids := buildPEL(ctx, t, s, admin, dead(1, 2), live(5), dead(1, 4))
	raced := ids[1][0]
	s.reclaim.beforeClaim = func() { makeIdle(ctx, t, s, admin, "stalled", 6, raced) }

	r, err := s.Reclaim(ctx, 0, "next", reclaimIdle, 2)
	require.NoError(t, err)
	require.Equal(t, []string{ids[0][0], raced}, entryIDs(r.Deliveries))
	assert.Equal(t, int64(3), r.Deliveries[0].Deliveries)
	assert.Equal(t, int64(7), r.Deliveries[1].Deliveries, "6 before, and this one")

	s.reclaim.beforeClaim = nil
	r, err = s.Reclaim(ctx, 0, "next", reclaimIdle, 2)
	require.NoError(t, err)
	require.Equal(t, ids[2], entryIDs(r.Deliveries))
	assert.Equal(t, int64(5), r.Deliveries[0].Deliveries)
	for _, id := range []string{ids[0][0], raced, ids[2][0]} {
		p := pendingOf(ctx, t, s, admin, id)
		assert.Equal(t, "next", p.Consumer)
	}
}

// TestReclaimConcurrentCallers: four reclaimers share the store's cursor
// of the shard (run under -race). However they interleave, each dead
// entry is handed over exactly once, with its count, and nothing of the
// live consumer's.
func TestReclaimConcurrentCallers(t *testing.T) {
	s, admin := reclaimStore(t)
	ctx := ctxT(t)
	ids := buildPEL(ctx, t, s, admin, live(100), dead(40, 1), live(20))
	var (
		mu  sync.Mutex
		got = map[string]int{}
		wg  sync.WaitGroup
	)
	take := func(consumer string) int {
		r, err := s.Reclaim(ctx, 0, consumer, reclaimIdle, 3)
		assert.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		for _, d := range r.Deliveries {
			got[d.EntryID]++
			assert.Equal(t, int64(2), d.Deliveries, d.EntryID)
		}
		return len(r.Deliveries)
	}
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				if take(fmt.Sprintf("c%d", i)) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	for range 40 { // whatever a racing caller gave up on
		if take("c0") == 0 {
			break
		}
	}
	require.Len(t, got, 40)
	for _, id := range ids[1] {
		assert.Equal(t, 1, got[id], "handed over once: %s", id)
	}
	for _, id := range ids[0] {
		assert.Equal(t, "live", pendingOf(ctx, t, s, admin, id).Consumer)
	}
}
