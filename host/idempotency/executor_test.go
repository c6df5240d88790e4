package idempotency

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/internal/clocktest"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/programs"
)

func newRuntime(t testing.TB, addr string) *runtime.Runtime {
	t.Helper()
	cfg := redistest.ExampleConfig(addr, policy.RoleCoordination)
	dep := cfg.Deployments["main"]
	dep.Timeouts.Command = time.Second
	cfg.Deployments["main"] = dep
	return newRuntimeFrom(t, cfg)
}

func newRuntimeFrom(t testing.TB, cfg policy.RedisConfig) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

func newExecutor(t testing.TB, addr string, cfg Config) *Executor {
	t.Helper()
	e, err := New(newRuntime(t, addr), cfg)
	require.NoError(t, err)
	return e
}

func request(t testing.TB, key, body string) Request {
	t.Helper()
	a, err := owner.NewAttempt("req-" + key)
	require.NoError(t, err)
	return Request{Scope: Scope{Route: "create-payment", Principal: []byte("tenant-7"), Key: key},
		Fingerprint: FingerprintOf("POST", "/v1/payments", "", []byte(body)), Attempt: a}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRunsOnceThenReplays: the first request runs the action and stores
// its response; a retry with a new attempt (a client retry after a lost
// HTTP response) replays it without running anything; the same key with
// another body is a fingerprint mismatch.
func TestRunsOnceThenReplays(t *testing.T) {
	srv := redistest.StartStandalone(t)
	e := newExecutor(t, srv.Addr(), Config{})
	ctx := ctxT(t)
	var runs atomic.Int32
	action := func(context.Context) Result { runs.Add(1); return Committed([]byte(`{"id":42}`)) }

	first, err := e.Execute(ctx, request(t, "k1", `{"amount":5}`), action)
	require.NoError(t, err)
	require.Equal(t, Executed, first.Kind)
	assert.True(t, first.Recorded)
	assert.Equal(t, int64(1), first.Attempt)

	again, err := e.Execute(ctx, request(t, "k1", `{"amount":5}`), action)
	require.NoError(t, err)
	assert.Equal(t, Replayed, again.Kind)
	assert.Equal(t, `{"id":42}`, string(again.Response))
	assert.Equal(t, int32(1), runs.Load(), "the action ran once")

	other, err := e.Execute(ctx, request(t, "k1", `{"amount":6}`), action)
	require.NoError(t, err)
	assert.Equal(t, FingerprintMismatch, other.Kind)
	assert.Equal(t, int32(1), runs.Load())
}

// race runs n concurrent Executes, each with the request next returns;
// the action blocks until every other call has returned, so the outcome
// does not depend on timing. It returns how often each kind was answered
// and how often the action ran.
func race(t *testing.T, e *Executor, n int, next func() Request) (map[Kind]int, int32) {
	t.Helper()
	ctx := ctxT(t)
	var (
		runs    atomic.Int32
		others  sync.WaitGroup
		release = make(chan struct{})
	)
	others.Add(n - 1)
	action := func(context.Context) Result {
		runs.Add(1)
		<-release
		return Committed([]byte("ok"))
	}
	kinds := make(chan Kind, n)
	for range n {
		r := next()
		go func() {
			ex, err := e.Execute(ctx, r, action)
			assert.NoError(t, err)
			kinds <- ex.Kind
			if ex.Kind != Executed {
				others.Done()
			}
		}()
	}
	others.Wait()
	close(release)
	counts := map[Kind]int{}
	for range n {
		counts[<-kinds]++
	}
	return counts, runs.Load()
}

// TestConcurrentDuplicatesRunOnce: N clients send the same request at
// once; exactly one runs the action while the others are told it is in
// progress.
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	srv := redistest.StartStandalone(t)
	e := newExecutor(t, srv.Addr(), Config{})
	counts, runs := race(t, e, 8, func() Request { return request(t, "dup", "{}") })
	assert.Equal(t, int32(1), runs)
	assert.Equal(t, map[Kind]int{Executed: 1, InProgress: 7}, counts)
}

// TestSameAttemptReentersOnce: the same attempt entering Execute from
// several goroutines (a caller retrying its own in-flight call) runs the
// action once; the re-entrant calls never start it.
func TestSameAttemptReentersOnce(t *testing.T) {
	srv := redistest.StartStandalone(t)
	e := newExecutor(t, srv.Addr(), Config{})
	req := request(t, "reenter", "{}")
	counts, runs := race(t, e, 8, func() Request { return req })
	assert.Equal(t, int32(1), runs, "at most once per attempt")
	assert.Equal(t, map[Kind]int{Executed: 1, InProgress: 7}, counts)
	ex, err := e.Execute(ctxT(t), req, func(context.Context) Result { return Committed(nil) })
	require.NoError(t, err)
	assert.Equal(t, Replayed, ex.Kind)
}

// TestFailureDispositions: no effect → FAILED_RETRYABLE and the next
// attempt runs again (attempt 2); an unknown effect or a panic →
// ABANDONED and every retry is RECOVERY_REQUIRED.
func TestFailureDispositions(t *testing.T) {
	srv := redistest.StartStandalone(t)
	e := newExecutor(t, srv.Addr(), Config{})
	ctx := ctxT(t)
	refused := errors.New("card declined before charging")
	ex, err := e.Execute(ctx, request(t, "retry", "{}"), func(context.Context) Result { return RetryableNoEffect(refused) })
	require.NoError(t, err)
	assert.Equal(t, FailedRetryable, ex.Kind)
	assert.ErrorIs(t, ex.ActionErr, refused)
	ex, err = e.Execute(ctx, request(t, "retry", "{}"), func(context.Context) Result { return Committed([]byte("paid")) })
	require.NoError(t, err)
	assert.Equal(t, Executed, ex.Kind)
	assert.Equal(t, int64(2), ex.Attempt, "taken over with attempt + 1")

	ex, err = e.Execute(ctx, request(t, "unknown", "{}"), func(context.Context) Result {
		return EffectUnknown(errors.New("gateway timed out after the charge was sent"))
	})
	require.NoError(t, err)
	assert.Equal(t, Abandoned, ex.Kind)
	ex, err = e.Execute(ctx, request(t, "unknown", "{}"), func(context.Context) Result {
		t.Error("never runs while recovery is required")
		return Committed(nil)
	})
	require.NoError(t, err)
	assert.Equal(t, RecoveryRequired, ex.Kind)

	ex, err = e.Execute(ctx, request(t, "panics", "{}"), func(context.Context) Result { panic("boom") })
	require.NoError(t, err)
	assert.Equal(t, Abandoned, ex.Kind, "an unclassified panic is an unknown effect")
	assert.ErrorContains(t, ex.ActionErr, "panicked")

	big := make([]byte, DefaultMaxResponseBytes+1)
	ex, err = e.Execute(ctx, request(t, "big", "{}"), func(context.Context) Result { return Committed(big) })
	require.NoError(t, err)
	assert.Equal(t, Abandoned, ex.Kind, "a response that cannot be stored fails closed")
	assert.ErrorIs(t, ex.ActionErr, programs.ErrResponseTooLarge)
	ex, err = e.Execute(ctx, request(t, "big", "{}"), func(context.Context) Result { return Committed(nil) })
	require.NoError(t, err)
	assert.Equal(t, RecoveryRequired, ex.Kind)
}

// TestLongActionIsRenewed: an action that runs for more than three lease
// lengths keeps its request: a competing claimer gets IN_PROGRESS
// throughout, just before each renew (with at most two thirds of the lease
// left) and just after it (with more than that: the renew extended the
// lease on Redis). Time is the test's: the executor runs on a fake clock,
// and each third of a lease passes on Redis by cutting the record's TTL by
// as much (PTTL − lease/3, atomically), so a renew that answered RENEWED
// without extending the lease lets it run out by the third round — the
// claim is then RECOVERY_REQUIRED — however fast the machine is. The real
// lease is long (30 s): real time only ever shortens it by milliseconds.
func TestLongActionIsRenewed(t *testing.T) {
	srv := redistest.StartStandalone(t)
	const lease = DefaultLease
	e := newExecutor(t, srv.Addr(), Config{Lease: lease})
	clk := newFakeClock()
	clk.install(e)
	other := newExecutor(t, srv.Addr(), Config{Lease: lease})
	renewed := make(chan programs.IdemRenewStatus, 1)
	e.afterRenew = func(s programs.IdemRenewStatus, err error) {
		assert.NoError(t, err)
		renewed <- s
	}
	ctx := ctxT(t)
	req := request(t, "long", "{}")
	k, err := e.scopeKey(req.Scope)
	require.NoError(t, err)
	never := func(context.Context) Result { t.Error("the competing claimer must not run"); return Committed(nil) }
	compete := func() Execution {
		t.Helper()
		ex, err := other.Execute(ctx, request(t, "long", "{}"), never)
		require.NoError(t, err)
		require.Equal(t, InProgress, ex.Kind, "the running action keeps its request")
		return ex
	}
	// elapse lets a third of the lease pass on Redis.
	elapse := func() {
		t.Helper()
		ok, err := srv.Admin().Eval(ctx, "return redis.call('PEXPIRE', KEYS[1], redis.call('PTTL', KEYS[1]) - tonumber(ARGV[1]))",
			[]string{k.Redis()}, (lease / 3).Milliseconds()).Int()
		require.NoError(t, err)
		require.Equal(t, 1, ok, "the record exists")
	}

	const rounds = 10 // ten thirds: past three lease lengths
	finish := make(chan struct{})
	done := make(chan Execution, 1)
	started := make(chan struct{})
	go func() {
		ex, err := e.Execute(ctx, req, func(actx context.Context) Result {
			close(started)
			select {
			case <-finish:
				return Committed([]byte("done"))
			case <-actx.Done():
				return EffectUnknown(context.Cause(actx))
			}
		})
		assert.NoError(t, err)
		done <- ex
	}()
	clocktest.Recv(t, started)
	for round := range rounds {
		elapse()
		before := compete()
		assert.LessOrEqual(t, before.RetryAfter, lease-lease/3, "round %d: a third of the lease has passed", round)
		clk.Advance(lease / 3) // the watchdog's renew is due
		require.Equal(t, programs.IdemRenewed, clocktest.Recv(t, renewed), "round %d", round)
		after := compete()
		assert.Greater(t, after.RetryAfter, lease-lease/3, "round %d: the renew extended the lease on Redis", round)
	}
	close(finish)
	ex := clocktest.Recv(t, done)
	assert.Equal(t, Executed, ex.Kind, "renews kept the lease past three lease lengths: %v", ex.ActionErr)
	assert.True(t, ex.Recorded)
	replay, err := other.Execute(ctx, request(t, "long", "{}"), never)
	require.NoError(t, err)
	assert.Equal(t, Replayed, replay.Kind)
}

// TestUnreachableRedisEndsTheActionInsideItsLease: a node cut off from
// Redis (a black-holed proxy: nothing reaches Redis, nothing comes back)
// cannot renew. When the lease's local validity runs out the executor ends
// the action's context with ErrLeaseExpiredLocally while Redis still holds
// the lease, so no other claimer can have taken the request over yet; the
// commit the action reports afterwards is not a completion (ABANDONED,
// unrecorded), and the next claims follow the record's state machine:
// IN_PROGRESS while the lease lasts on Redis, RECOVERY_REQUIRED once it
// ran out. The executor's clock is fake and the lease on Redis is moved by
// hand (PEXPIRE): no assertion depends on the machine's speed.
func TestUnreachableRedisEndsTheActionInsideItsLease(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	const lease, retention = 20 * time.Second, 10 * time.Second
	cfg := Config{Lease: lease, Retention: retention}
	cut := newExecutor(t, p.Addr(), cfg)
	clk := newFakeClock()
	clk.install(cut)
	other := newExecutor(t, srv.Addr(), cfg)
	ctx := ctxT(t)
	never := func(context.Context) Result { t.Error("must not run"); return Committed(nil) }
	// Load the scripts first, so the partitioned request's start goes
	// through at once.
	_, err := cut.Execute(ctx, request(t, "warm", "{}"), func(context.Context) Result { return Committed(nil) })
	require.NoError(t, err)

	renews := make(chan error, 8)
	cut.afterRenew = func(_ programs.IdemRenewStatus, err error) { renews <- err }
	req := request(t, "partitioned", "{}")
	started, cause := make(chan struct{}), make(chan error, 1)
	type outcome struct {
		ex  Execution
		err error
	}
	done := make(chan outcome, 1)
	var runs atomic.Int32
	go func() {
		ex, err := cut.Execute(ctx, req, func(actx context.Context) Result {
			runs.Add(1)
			close(started)
			<-actx.Done()
			cause <- context.Cause(actx)
			return Committed([]byte("committed after its context ended"))
		})
		done <- outcome{ex, err}
	}()
	clocktest.Recv(t, started)
	p.Blackhole()
	up, _ := p.Bytes()

	// A third of the lease: the renew goes into the black hole and is not
	// confirmed; the validity has not run out, so the action keeps running.
	clk.Advance(lease / 3)
	assert.Error(t, clocktest.Recv(t, renews), "no renew is confirmed through a black hole")
	select {
	case c := <-cause:
		t.Fatalf("the action was cancelled inside its validity: %v", c)
	default:
	}

	// The validity — nine tenths of the lease from the start's send — runs
	// out with no confirmed renew: the action's context ends.
	clk.Advance(validity(lease) - lease/3)
	got := clocktest.Recv(t, cause)
	assert.ErrorIs(t, got, ErrLeaseExpiredLocally)
	assert.ErrorIs(t, got, ErrLeaseLost)

	// Only now does another node claim the request: Redis still holds the
	// lease, so it waits. The action stopped before the request could be
	// taken from it.
	ex, err := other.Execute(ctx, request(t, "partitioned", "{}"), never)
	require.NoError(t, err)
	assert.Equal(t, InProgress, ex.Kind, "the lease is still held on Redis when the action is told to stop")
	assert.Positive(t, ex.RetryAfter)

	out := clocktest.Recv(t, done)
	require.NoError(t, out.err)
	assert.Equal(t, Abandoned, out.ex.Kind, "a commit reported after the lease ran out is not a completion")
	assert.ErrorIs(t, out.ex.ActionErr, ErrLeaseExpiredLocally)
	assert.False(t, out.ex.Recorded, "the abandon mark cannot reach Redis")
	assert.Nil(t, out.ex.Response)
	upAfter, _ := p.Bytes()
	assert.Equal(t, up, upAfter, "nothing the cut-off node sent reached Redis")

	// The lease runs out on Redis (the record's TTL cut to its retention):
	// the next claim finds an expired execution, which is never taken
	// over.
	k, err := other.scopeKey(req.Scope)
	require.NoError(t, err)
	require.True(t, srv.Admin().PExpire(ctx, k.Redis(), retention).Val())
	ex, err = other.Execute(ctx, request(t, "partitioned", "{}"), never)
	require.NoError(t, err)
	assert.Equal(t, RecoveryRequired, ex.Kind)
	assert.Equal(t, int32(1), runs.Load())
}

// TestValidityIsNineTenthsOfTheLease: a confirmed start or renew keeps
// the lease valid locally for nine tenths of it; the tenth is the hold's
// drift budget. The tests above move the fake clock by validity(lease), so
// this pins the tenth itself.
func TestValidityIsNineTenthsOfTheLease(t *testing.T) {
	assert.Equal(t, 27*time.Second, validity(DefaultLease))
	assert.Equal(t, 13500*time.Millisecond, validity(15*time.Second), "the failover tests' lease")
	assert.Equal(t, 3*time.Second, driftBudget(DefaultLease))
}

// TestLostClaimReplyIsReconciled: the claim reaches Redis and its reply
// is lost; the repeat with the same attempt finds the claim and the action
// runs once.
func TestLostClaimReplyIsReconciled(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	e := newExecutor(t, p.Addr(), Config{})
	ctx := ctxT(t)
	// Load the scripts first, so the stalled call is the claim itself.
	_, err := e.Execute(ctx, request(t, "warm", "{}"), func(context.Context) Result { return Committed(nil) })
	require.NoError(t, err)
	var repeats atomic.Int32
	e.beforeRepeat = func(string) { repeats.Add(1); p.Passthrough() }
	var runs atomic.Int32
	p.Stall()
	ex, err := e.Execute(ctx, request(t, "lost", "{}"), func(context.Context) Result { runs.Add(1); return Committed([]byte("x")) })
	require.NoError(t, err)
	assert.Equal(t, int32(1), repeats.Load())
	assert.Equal(t, Executed, ex.Kind)
	assert.Equal(t, int32(1), runs.Load())
}

func TestInvalidRequests(t *testing.T) {
	srv := redistest.StartStandalone(t)
	e := newExecutor(t, srv.Addr(), Config{})
	ctx := ctxT(t)
	good := request(t, "k", "{}")
	never := func(context.Context) Result { t.Error("must not run"); return Committed(nil) }
	for name, mut := range map[string]func(*Request){
		"no attempt":     func(r *Request) { r.Attempt = owner.Attempt{} },
		"no principal":   func(r *Request) { r.Scope.Principal = nil },
		"no key":         func(r *Request) { r.Scope.Key = "" },
		"bad route":      func(r *Request) { r.Scope.Route = "Create Payment" },
		"no fingerprint": func(r *Request) { r.Fingerprint = Fingerprint{} },
	} {
		r := good
		mut(&r)
		_, err := e.Execute(ctx, r, never)
		assert.ErrorIs(t, err, ErrInvalidRequest, name)
	}
	_, err := New(newRuntime(t, srv.Addr()), Config{Role: policy.RoleCache})
	assert.ErrorIs(t, err, ErrInvalidRequest)
}

// TestRedisDownNeverRuns: with Redis gone the action never runs: the
// outcome is Unavailable (nothing sent) or Indeterminate (a pooled
// connection broke under the send), never an execution.
func TestRedisDownNeverRuns(t *testing.T) {
	srv := redistest.StartStandalone(t)
	e := newExecutor(t, srv.Addr(), Config{})
	ctx := ctxT(t)
	_, err := e.Execute(ctx, request(t, "warm", "{}"), func(context.Context) Result { return Committed(nil) })
	require.NoError(t, err)
	srv.Kill()
	for range 3 {
		ex, err := e.Execute(ctx, request(t, "down", "{}"), func(context.Context) Result {
			t.Error("the action ran without a confirmed claim")
			return Committed(nil)
		})
		require.NoError(t, err)
		assert.Contains(t, []Kind{Unavailable, Indeterminate}, ex.Kind)
		assert.Error(t, ex.Cause)
	}
}

// TestRefusedRepeatStaysIndeterminate: the claim's reply is lost and its
// repeat cannot even be sent: the first send may have applied, so the
// outcome is INDETERMINATE (the middleware's 409, the sidecar's 200),
// never UNAVAILABLE ("nothing changed"); the action does not run, and a
// retry with the same attempt finds the claim.
func TestRefusedRepeatStaysIndeterminate(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	e := newExecutor(t, p.Addr(), Config{})
	ctx := ctxT(t)
	_, err := e.Execute(ctx, request(t, "warm", "{}"), func(context.Context) Result { return Committed(nil) })
	require.NoError(t, err)
	e.beforeRepeat = func(string) { p.Refuse() }
	p.Stall()
	r := request(t, "refused", "{}")
	var runs atomic.Int32
	action := func(context.Context) Result { runs.Add(1); return Committed([]byte("x")) }
	ex, err := e.Execute(ctx, r, action)
	require.NoError(t, err)
	assert.Equal(t, Indeterminate, ex.Kind, "the stalled claim may have applied")
	assert.Zero(t, runs.Load())

	e.beforeRepeat = nil
	p.Passthrough()
	ex, err = e.Execute(ctx, r, action)
	require.NoError(t, err)
	assert.Equal(t, Executed, ex.Kind, "the same attempt finds its claim and runs once")
	assert.Equal(t, int32(1), runs.Load())
}
