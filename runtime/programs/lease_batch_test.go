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

// Concurrent lease acquires and releases queued behind a busy flight leave
// as one pipeline each; every call is still its own atomic call: of two
// owners racing for one resource in the same pipeline exactly one gets it,
// and only that owner's release deletes it.
// Both program versions the Batcher runs (v3: the bare integer reply of a
// fast path decoded beside v3's and other calls' tuples in one pipeline).
func TestBatcherLeaseAcquireRelease(t *testing.T) {
	type acquireFn = func(*Batcher, context.Context, keys.Key, LeaseAttempt, time.Duration) (LeaseAcquireResult, error)
	type releaseFn = func(*Batcher, context.Context, keys.Key, LeaseAttempt) (LeaseReleaseResult, error)
	for _, v := range []struct {
		name    string
		acquire acquireFn
		release releaseFn
	}{
		{"v2", (*Batcher).LeaseAcquire, (*Batcher).LeaseRelease},
		{"v3", (*Batcher).LeaseAcquireV3, (*Batcher).LeaseReleaseV3},
	} {
		t.Run(v.name, func(t *testing.T) { testBatcherLeaseAcquireRelease(t, v.name, v.acquire, v.release) })
	}
}

func testBatcherLeaseAcquireRelease(t *testing.T, version string,
	acquire func(*Batcher, context.Context, keys.Key, LeaseAttempt, time.Duration) (LeaseAcquireResult, error),
	release func(*Batcher, context.Context, keys.Key, LeaseAttempt) (LeaseReleaseResult, error)) {
	eachBatcherMode(t, func(t *testing.T, mode policy.ProgramMode, s *redistest.Server, g *gate, b *Batcher) {
		ctx := context.Background()
		bld := testBuilder(t)
		const resources = 8
		var ks []keys.Key
		for i := range resources + 1 {
			ks = append(ks, leaseKey(t, bld, "batch-"+version+"-"+string(mode)+"-"+strconv.Itoa(i)))
		}
		attempt := func(owner int) LeaseAttempt {
			return LeaseAttempt{Owner: []byte("owner-" + strconv.Itoa(owner)), OperationID: []byte("op-" + strconv.Itoa(owner))}
		}
		// Warm (loads both scripts), then run each phase behind a held
		// flight: a call on the spare resource holds it while the others
		// queue.
		_, err := acquire(b, ctx, ks[resources], attempt(0), time.Minute)
		require.NoError(t, err)
		_, err = release(b, ctx, ks[resources], attempt(0))
		require.NoError(t, err)
		phase := func(call func(i, owner int) (string, error)) map[int]map[string][]int {
			return raceInOnePipeline(t, g, b, resources, call)
		}
		acquired := phase(func(i, owner int) (string, error) {
			r, err := acquire(b, ctx, ks[i], attempt(owner), time.Minute)
			return r.Status.String(), err
		})
		winner := map[int]int{}
		for i := range resources {
			require.Len(t, acquired[i]["ACQUIRED"], 1, "resource %d: one owner", i)
			require.Len(t, acquired[i]["CONTENDED"], 1, "resource %d: the other contended", i)
			winner[i] = acquired[i]["ACQUIRED"][0]
		}
		released := phase(func(i, owner int) (string, error) {
			r, err := release(b, ctx, ks[i], attempt(owner))
			return r.Status.String(), err
		})
		for i := range resources {
			assert.Equal(t, []int{winner[i]}, released[i]["RELEASED"], "resource %d: only the holder releases", i)
			// The other owner's release is NOT_OWNER before the holder's
			// in the pipeline and ABSENT after it; never RELEASED.
			assert.Len(t, append(released[i]["NOT_OWNER"], released[i]["ABSENT"]...), 1, "resource %d", i)
			n, err := s.Admin().Exists(ctx, ks[i].Redis()).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "resource %d released", i)
		}
	})
}
