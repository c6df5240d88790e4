package idempotency

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// running is an Execute in the background whose action blocks until the
// test lets it finish or its context ends.
type running struct {
	req     Request
	started chan struct{}
	finish  chan struct{}
	done    chan struct{}
	ex      Execution
	err     error
	cause   error // the action context's cause, when it ended first
}

func startRunning(t *testing.T, ctx context.Context, e *Executor, req Request, runs *atomic.Int32) *running {
	t.Helper()
	r := &running{req: req, started: make(chan struct{}), finish: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.ex, r.err = e.Execute(ctx, req, func(actx context.Context) Result {
			runs.Add(1)
			close(r.started)
			select {
			case <-r.finish:
				return Committed([]byte(`{"id":"` + req.Scope.Key + `"}`))
			case <-actx.Done():
				r.cause = context.Cause(actx)
				return EffectUnknown(r.cause)
			}
		})
	}()
	select {
	case <-r.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the action did not start")
	}
	return r
}

func (r *running) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatal("Execute did not return")
	}
}

// TestSentinelFailoverDuringIdempotentActions kills the primary (SIGKILL)
// during idempotent requests and lets the Sentinels promote a replica:
//
//   - kept: claimed and started, replicated (WAIT), its action still
//     running. It keeps running through the failover, its renews reach the
//     promoted replica, and its completion is recorded there: a retry
//     replays the response, the action ran once.
//   - lost-done: claimed, run and completed while the replicas were
//     detached (Executed, Recorded — acknowledged by the dying primary).
//     The promoted replica never had the record: a retry runs the action
//     a second time. Detected, not hidden: this is the documented
//     exactly-once gap of asynchronous replication.
//   - lost-running: claimed and started while detached, still running.
//     The first renew that reaches the promoted replica finds no record
//     and cancels the action's context; the outcome is ABANDONED and not
//     recorded (there is no record to mark), so a retry runs it again.
func TestSentinelFailoverDuringIdempotentActions(t *testing.T) {
	sen := redistest.StartSentinel(t)
	cfg := redistest.ExampleConfig("unused:0", policy.RoleCoordination)
	dep := cfg.Deployments["main"]
	dep.Topology = &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()}
	dep.Timeouts.Command = time.Second
	cfg.Deployments["main"] = dep
	// Renewed every 5 s (sooner after a renew that failed): each running
	// action renews through the outage and against the promoted replica,
	// and the lease's local validity (13.5 s from the last confirmed
	// renew) outlives the failover (~2-3 s here) with room to spare.
	e, err := New(newRuntimeFrom(t, cfg), Config{Lease: 15 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var keptRuns, lostDoneRuns, lostRunningRuns atomic.Int32

	kept := startRunning(t, ctx, e, request(t, "kept", `{"amount":1}`), &keptRuns)
	old := sen.Primary()
	redistest.AwaitReplicated(t, old, 2)

	reattach := redistest.DetachReplicas(t, old, sen.Replicas()...)
	lostDone := func() (Execution, error) {
		return e.Execute(ctx, request(t, "lost-done", `{"amount":2}`), func(context.Context) Result {
			lostDoneRuns.Add(1)
			return Committed([]byte(`{"id":"lost-done"}`))
		})
	}
	first, err := lostDone()
	require.NoError(t, err)
	require.Equal(t, Executed, first.Kind)
	require.True(t, first.Recorded, "the dying primary acknowledged the completion")
	lostRunning := startRunning(t, ctx, e, request(t, "lost-running", `{"amount":3}`), &lostRunningRuns)
	killed := time.Now()
	old.Kill()
	reattach()
	sen.AwaitFailover(t, old)

	// Served by the promoted replica once kept's own record answers.
	var last StepResult
	require.Eventually(t, func() bool {
		got, err := e.Inspect(ctx, kept.req)
		last = got
		return err == nil && got.Status == "EXECUTING_SAME_OPERATION"
	}, 60*time.Second, 20*time.Millisecond, "the promoted replica answers for kept (last %q)", &last.Status)
	served := time.Now()

	lostRunning.wait(t)
	require.NoError(t, lostRunning.err)
	assert.ErrorIs(t, lostRunning.cause, ErrLeaseLost, "a renew found the record gone and cancelled the action")
	assert.NotErrorIs(t, lostRunning.cause, ErrLeaseExpiredLocally, "Redis answered before the local validity ran out")
	assert.Equal(t, Abandoned, lostRunning.ex.Kind)
	assert.False(t, lostRunning.ex.Recorded, "no record to mark on the promoted replica")
	cancelled := time.Now()

	close(kept.finish)
	kept.wait(t)
	require.NoError(t, kept.err)
	assert.Equal(t, Executed, kept.ex.Kind, "the replicated in-flight action completes on the promoted replica")
	assert.True(t, kept.ex.Recorded)
	again, err := e.Execute(ctx, request(t, "kept", `{"amount":1}`), func(context.Context) Result {
		keptRuns.Add(1)
		return Committed(nil)
	})
	require.NoError(t, err)
	assert.Equal(t, Replayed, again.Kind)
	assert.Equal(t, `{"id":"kept"}`, string(again.Response))
	assert.Equal(t, int32(1), keptRuns.Load(), "kept ran once across the failover")

	second, err := lostDone()
	require.NoError(t, err)
	assert.Equal(t, Executed, second.Kind, "the lost completion is not replayed")
	assert.Equal(t, int32(2), lostDoneRuns.Load(), "the action ran twice for one idempotency key")

	retry, err := e.Execute(ctx, request(t, "lost-running", `{"amount":3}`), func(context.Context) Result {
		lostRunningRuns.Add(1)
		return Committed(nil)
	})
	require.NoError(t, err)
	assert.Equal(t, Executed, retry.Kind, "the abandoned mark was never stored: the retry runs again")
	assert.Equal(t, int32(2), lostRunningRuns.Load())
	t.Logf("kill → client served by the promoted replica +%s; lost-running cancelled by +%s",
		served.Sub(killed).Round(time.Millisecond), cancelled.Sub(killed).Round(time.Millisecond))
}

// TestClusterFailoverDuringIdempotentActions is the Cluster counterpart
// (3 primaries, 3 replicas, node timeout 1 s): the primary owning both
// records' slots is killed and its replica promoted by the cluster. The
// replicated in-flight action completes once; the completion the replica
// never received is lost and the retry runs the action again.
func TestClusterFailoverDuringIdempotentActions(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithConfig("cluster-node-timeout", "1000"))
	cfg := redistest.ExampleConfig("unused:0", policy.RoleCoordination)
	dep := cfg.Deployments["main"]
	dep.Topology = &policy.Cluster{Seeds: cl.Seeds()}
	dep.Timeouts.Command = time.Second
	cfg.Deployments["main"] = dep
	e, err := New(newRuntimeFrom(t, cfg), Config{Lease: 15 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const victim = 0
	primary, replica := cl.Primaries()[victim], cl.Replicas()[victim]
	onVictim := func(prefix string) string {
		for i := 0; i < 1000; i++ {
			key := prefix + "-" + strconv.Itoa(i)
			k, err := e.scopeKey(request(t, key, "{}").Scope)
			require.NoError(t, err)
			owner, err := cl.Admin().MasterForKey(ctx, k.Redis())
			require.NoError(t, err)
			if owner.Options().Addr == primary.Addr() {
				return key
			}
		}
		t.Fatal("no idempotency key on the victim shard")
		return ""
	}
	keptKey, lostKey := onVictim("kept"), onVictim("lost")
	var keptRuns, lostRuns atomic.Int32

	kept := startRunning(t, ctx, e, request(t, keptKey, `{"amount":1}`), &keptRuns)
	redistest.AwaitReplicated(t, primary, 1)
	reattach := redistest.DetachReplicas(t, primary, replica)
	lost := func() (Execution, error) {
		return e.Execute(ctx, request(t, lostKey, `{"amount":2}`), func(context.Context) Result {
			lostRuns.Add(1)
			return Committed([]byte(`{"id":"lost"}`))
		})
	}
	first, err := lost()
	require.NoError(t, err)
	require.Equal(t, Executed, first.Kind)
	require.True(t, first.Recorded)
	killed := time.Now()
	primary.Kill()
	reattach()
	redistest.AwaitPromoted(t, replica)
	promoted := time.Now()
	var last StepResult
	require.Eventually(t, func() bool {
		got, err := e.Inspect(ctx, kept.req)
		last = got
		return err == nil && got.Status == "EXECUTING_SAME_OPERATION"
	}, 60*time.Second, 20*time.Millisecond, "the promoted replica answers for kept (last %q)", &last.Status)
	served := time.Now()

	close(kept.finish)
	kept.wait(t)
	require.NoError(t, kept.err)
	assert.Equal(t, Executed, kept.ex.Kind)
	assert.True(t, kept.ex.Recorded, "recorded on the promoted replica")
	again, err := e.Execute(ctx, request(t, keptKey, `{"amount":1}`), func(context.Context) Result {
		keptRuns.Add(1)
		return Committed(nil)
	})
	require.NoError(t, err)
	assert.Equal(t, Replayed, again.Kind)
	assert.Equal(t, int32(1), keptRuns.Load(), "kept ran once across the failover")

	second, err := lost()
	require.NoError(t, err)
	assert.Equal(t, Executed, second.Kind, "the lost completion is not replayed")
	assert.Equal(t, int32(2), lostRuns.Load(), "the action ran twice for one idempotency key")
	t.Logf("kill → replica %s promoted +%s → client served +%s", replica.Addr(),
		promoted.Sub(killed).Round(time.Millisecond), served.Sub(killed).Round(time.Millisecond))
}
