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
func TestBatcherLeaseAcquireRelease(t *testing.T) {
	eachBatcherMode(t, func(t *testing.T, mode policy.ProgramMode, s *redistest.Server, g *gate, b *Batcher) {
		ctx := context.Background()
		bld := testBuilder(t)
		const resources = 8
		var ks []keys.Key
		for i := range resources + 1 {
			ks = append(ks, leaseKey(t, bld, "batch-"+string(mode)+"-"+strconv.Itoa(i)))
		}
		attempt := func(owner int) LeaseAttempt {
			return LeaseAttempt{Owner: []byte("owner-" + strconv.Itoa(owner)), OperationID: []byte("op-" + strconv.Itoa(owner))}
		}
		type res struct {
			i, owner int
			status   string
			err      error
		}
		// Warm (loads both scripts), then run each phase behind a held
		// flight: a call on the spare resource holds it while the others
		// queue.
		_, err := b.LeaseAcquire(ctx, ks[resources], attempt(0), time.Minute)
		require.NoError(t, err)
		_, err = b.LeaseRelease(ctx, ks[resources], attempt(0))
		require.NoError(t, err)
		phase := func(call func(i, owner int) (string, error)) map[int]map[string][]int {
			g.take()
			release, paused := g.holdNextCommand()
			out := make(chan res, 2*resources+1)
			run := func(i, owner int) {
				go func() {
					st, err := call(i, owner)
					out <- res{i, owner, st, err}
				}()
			}
			run(resources, 0)
			<-paused
			for i := range resources {
				run(i, 1)
				run(i, 2)
			}
			waitQueued(t, b, 2*resources)
			release()
			got := map[int]map[string][]int{}
			for range 2*resources + 1 {
				x := <-out
				require.NoError(t, x.err)
				if got[x.i] == nil {
					got[x.i] = map[string][]int{}
				}
				got[x.i][x.status] = append(got[x.i][x.status], x.owner)
			}
			_, pipes := g.take()
			assert.Equal(t, []int{2 * resources}, pipes, "the queued calls went out as one pipeline")
			return got
		}
		acquired := phase(func(i, owner int) (string, error) {
			r, err := b.LeaseAcquire(ctx, ks[i], attempt(owner), time.Minute)
			return r.Status.String(), err
		})
		winner := map[int]int{}
		for i := range resources {
			require.Len(t, acquired[i]["ACQUIRED"], 1, "resource %d: one owner", i)
			require.Len(t, acquired[i]["CONTENDED"], 1, "resource %d: the other contended", i)
			winner[i] = acquired[i]["ACQUIRED"][0]
		}
		released := phase(func(i, owner int) (string, error) {
			r, err := b.LeaseRelease(ctx, ks[i], attempt(owner))
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
