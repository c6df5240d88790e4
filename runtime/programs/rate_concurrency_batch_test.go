package programs

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// Concurrent permit acquires, renews and releases queued behind a busy
// flight leave as one pipeline per phase; every call is still its own
// atomic call: of two owners racing for a set's only permit in the same
// pipeline exactly one gets it, only that owner renews it, and only its
// release frees it.
func TestBatcherConcurrencyPermits(t *testing.T) {
	eachBatcherMode(t, func(t *testing.T, mode policy.ProgramMode, s *redistest.Server, g *gate, b *Batcher) {
		ctx := context.Background()
		bld := testBuilder(t)
		const sets = 8
		var ks []keys.Key
		for i := range sets + 1 {
			k, _ := rateKeys(t, bld, "permits-batch-"+string(mode)+"-"+strconv.Itoa(i), "concurrency")
			ks = append(ks, k)
		}
		owner := func(o int) []byte { return []byte("owner-" + strconv.Itoa(o)) }
		acquire := func(i, o int) (string, error) {
			r, err := b.RateConcurrencyAcquireV3(ctx, ks[i], PermitAcquireRequest{PolicyRevision: "r1", MaxPermits: 1,
				Owner: owner(o), TTL: time.Minute, MaxClockStep: time.Second, CleanupGrace: time.Second})
			return r.Status.String(), err
		}
		renew := func(i, o int) (string, error) {
			r, err := b.RateConcurrencyRenewV3(ctx, ks[i], PermitRenewRequest{PolicyRevision: "r1", Owner: owner(o),
				TTL: 2 * time.Minute, MaxClockStep: time.Second, CleanupGrace: time.Second})
			return r.Status.String(), err
		}
		release := func(i, o int) (string, error) {
			r, err := b.RateConcurrencyReleaseV3(ctx, ks[i], PermitReleaseRequest{PolicyRevision: "r1", Owner: owner(o),
				MaxClockStep: time.Second})
			return r.Status.String(), err
		}
		// Warm (loads the three scripts) on the spare set.
		for _, call := range []func(int, int) (string, error){acquire, renew, release} {
			st, err := call(sets, 0)
			require.NoError(t, err)
			require.NotEqual(t, "INVALID", st)
		}
		// Each phase runs behind a held flight: a call on the spare set
		// holds it while the others queue.
		phase := func(call func(i, owner int) (string, error)) map[int]map[string][]int {
			return raceInOnePipeline(t, g, b, sets, call)
		}
		acquired := phase(acquire)
		holder := map[int]int{}
		for i := range sets {
			require.Len(t, acquired[i]["ACQUIRED"], 1, "set %d: one owner", i)
			require.Len(t, acquired[i]["CONTENDED"], 1, "set %d: the other contended", i)
			holder[i] = acquired[i]["ACQUIRED"][0]
		}
		renewed := phase(renew)
		for i := range sets {
			assert.Equal(t, []int{holder[i]}, renewed[i]["RENEWED"], "set %d: only the holder renews", i)
			assert.Equal(t, []int{3 - holder[i]}, renewed[i]["NOT_HELD"], "set %d", i)
		}
		released := phase(release)
		for i := range sets {
			assert.Equal(t, []int{holder[i]}, released[i]["RELEASED"], "set %d: only the holder releases", i)
			assert.Equal(t, []int{3 - holder[i]}, released[i]["NOT_HELD"], "set %d", i)
			// Only the revision's sentinel is left.
			n, err := s.Admin().ZCard(ctx, ks[i].Redis()).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "set %d: no permit left", i)
		}
	})
}
