package programs

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/commands"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/keys"
)

// TestBatchedExecutor: calls of a Batched Executor (here lease-acquire-v1
// and lease-release-v1, whose replies are not integer-only) queued behind
// a busy call leave as one pipeline, and each is still its own atomic
// call: of two owners racing for one resource in the pipeline exactly one
// acquires, and only that owner's release deletes it. In EVALSHA mode the
// same runs again after SCRIPT FLUSH: every call of the pipeline answers
// NOSCRIPT, is sent again alone (loading the source) and still decides
// right.
func TestBatchedExecutor(t *testing.T) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			cat := mustCatalog(t)
			require.NoError(t, Deploy(context.Background(), cat, s.Admin()))
			e, err := NewExecutor(cat, mode, gatedClient(t, s, g))
			require.NoError(t, err)
			be := e.Batched(1, 64)
			assert.Nil(t, e.calls, "Batched leaves its receiver unbatched")
			ctx := context.Background()
			bld := testBuilder(t)
			const resources = 6
			rounds := []string{"warm"}
			if mode == policy.ProgramsEvalshaManaged {
				rounds = append(rounds, "flushed")
			}
			for _, round := range rounds {
				var ks []keys.Key
				for i := range resources + 1 {
					ks = append(ks, leaseKey(t, bld, "batched-"+round+"-"+string(mode)+"-"+strconv.Itoa(i)))
				}
				attempt := func(owner int) LeaseAttempt {
					return LeaseAttempt{Owner: []byte("owner-" + strconv.Itoa(owner)), OperationID: []byte("op-" + strconv.Itoa(owner))}
				}
				if round == "flushed" {
					// The scripts vanish just before the pipeline is sent (the
					// held lone call loaded them again before it).
					releasePipe, _ := g.holdNextPipeline(func() { require.NoError(t, s.Admin().ScriptFlush(ctx).Err()) })
					releasePipe()
				}
				acquired := raceInOnePipeline(t, g, be, resources, func(i, owner int) (string, error) {
					r, err := be.LeaseAcquire(ctx, ks[i], attempt(owner), time.Minute)
					return r.Status.String(), err
				})
				winner := map[int]int{}
				for i := range resources {
					require.Len(t, acquired[i]["ACQUIRED"], 1, "%s: resource %d: one owner", round, i)
					require.Len(t, acquired[i]["CONTENDED"], 1, "%s: resource %d: the other contended", round, i)
					winner[i] = acquired[i]["ACQUIRED"][0]
				}
				released := raceInOnePipeline(t, g, be, resources, func(i, owner int) (string, error) {
					r, err := be.LeaseRelease(ctx, ks[i], attempt(owner))
					return r.Status.String(), err
				})
				for i := range resources {
					assert.Equal(t, []int{winner[i]}, released[i]["RELEASED"], "%s: resource %d: only the holder releases", round, i)
					n, err := s.Admin().Exists(ctx, ks[i].Redis()).Result()
					require.NoError(t, err)
					assert.Zero(t, n, "%s: resource %d released", round, i)
				}
			}
		})
	}
}

// TestBatchedExecutorCanceledWhileQueued: a queued call whose context ends
// is never sent and reports OVERLOADED_BEFORE_SEND.
func TestBatchedExecutorCanceledWhileQueued(t *testing.T) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	cat := mustCatalog(t)
	require.NoError(t, Deploy(context.Background(), cat, s.Admin()))
	e, err := NewExecutor(cat, policy.ProgramsFunctionsProvisioned, gatedClient(t, s, g))
	require.NoError(t, err)
	be := e.Batched(1, 64)
	ctx := context.Background()
	bld := testBuilder(t)
	held, queued := leaseKey(t, bld, "cancel-held"), leaseKey(t, bld, "cancel-queued")
	a := LeaseAttempt{Owner: []byte("owner-1"), OperationID: []byte("op-1")}
	release, paused := g.holdNextCommand()
	done := make(chan error, 1)
	go func() { _, err := be.LeaseAcquire(ctx, held, a, time.Minute); done <- err }()
	<-paused
	qctx, cancel := context.WithCancel(ctx)
	out := make(chan error, 1)
	go func() { _, err := be.LeaseAcquire(qctx, queued, a, time.Minute); out <- err }()
	waitQueued(t, be, 1)
	cancel()
	err = <-out
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, certainty.OverloadedBeforeSend, certainty.Classify(err, true))
	release()
	require.NoError(t, <-done)
	n, err := s.Admin().Exists(ctx, queued.Redis()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the canceled call never ran")
}

// TestBatchRefusedWholeResends: the guard refuses a pipeline whole when
// one command is refused (here a call over the request budget). Both
// batching paths — a Batched Executor and a Batcher — then send every
// call again alone, so only the oversized call is refused and the others
// decide as if sent alone.
func TestBatchRefusedWholeResends(t *testing.T) {
	s := redistest.StartStandalone(t)
	cat := mustCatalog(t)
	require.NoError(t, Deploy(context.Background(), cat, s.Admin()))
	cmds, err := commands.Default()
	require.NoError(t, err)
	gd, err := guard.New(guard.Config{Deployment: "main", Lane: policy.LaneScript, Catalog: cmds, Namespace: "ca:caphost:test:",
		Budgets: policy.Budgets{MaxRequestBytes: 320, MaxReplyBytes: 1 << 20}, Scripts: cat})
	require.NoError(t, err)
	g := &gate{}
	c := standaloneClient(t, s)
	c.AddHook(g)
	c.AddHook(gd)
	e, err := NewExecutor(cat, policy.ProgramsFunctionsProvisioned, c)
	require.NoError(t, err)
	type acquireFn = func(context.Context, keys.Key, LeaseAttempt, time.Duration) (LeaseAcquireResult, error)
	be, b := e.Batched(1, 64), e.NewBatcher(1, 64)
	for _, side := range []struct {
		name    string
		q       queuer
		acquire acquireFn
	}{
		{"batched executor", be, be.LeaseAcquire},
		{"batcher", b, b.LeaseAcquireV3},
	} {
		t.Run(side.name, func(t *testing.T) {
			ctx := context.Background()
			bld := testBuilder(t)
			const n = 5
			ks := make([]keys.Key, n+1)
			for i := range ks {
				ks[i] = leaseKey(t, bld, "refused-"+side.name+"-"+strconv.Itoa(i))
			}
			g.take()
			release, paused := g.holdNextCommand()
			type res struct {
				i   int
				r   LeaseAcquireResult
				err error
			}
			out := make(chan res, n+1)
			run := func(i int, a LeaseAttempt) {
				go func() {
					r, err := side.acquire(ctx, ks[i], a, time.Minute)
					out <- res{i, r, err}
				}()
			}
			run(n, LeaseAttempt{Owner: []byte("owner-held"), OperationID: []byte("op")})
			<-paused
			for i := range n {
				a := LeaseAttempt{Owner: []byte("owner-" + strconv.Itoa(i)), OperationID: []byte("op")}
				if i == 2 {
					// Valid ids, but the call is over the 320-byte request budget.
					a = LeaseAttempt{Owner: bytes.Repeat([]byte{'o'}, 128), OperationID: bytes.Repeat([]byte{'p'}, 128)}
				}
				run(i, a)
				waitQueued(t, side.q, i+1)
			}
			release()
			for range n + 1 {
				x := <-out
				if x.i == 2 {
					require.ErrorIs(t, x.err, guard.ErrRejected, "the oversized call is refused")
					assert.Equal(t, certainty.Rejected, certainty.Classify(x.err, true))
					continue
				}
				require.NoError(t, x.err, "call %d is not refused for another call's command", x.i)
				assert.Equal(t, "ACQUIRED", x.r.Status.String(), "call %d", x.i)
			}
			_, pipes := g.take()
			assert.Equal(t, []int{n}, pipes, "the queued calls first went out as one pipeline")
		})
	}
}
