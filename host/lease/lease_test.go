package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/clocktest"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/runtime/certainty"
)

// TestAcquireOutcomes: a free lease is acquired; another attempt is
// contended with the holder's remaining TTL; the same attempt repeated is a
// replay whose validity comes from the server's PTTL, not from the TTL of
// the first send; the same owner under another operation is a conflict.
func TestAcquireOutcomes(t *testing.T) {
	srv := startRedis(t)
	clk := clocktest.New()
	c := newClient(t, srv.Addr(), WithClock(clk.Now))
	ctx := ctxT(t)
	a := attempt(t, "op-1")

	got, err := c.Acquire(ctx, req(a, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, Acquired, got.Kind)
	assert.Equal(t, certainty.Applied, got.Certainty)
	h := got.Handle
	assert.Equal(t, Active, h.State())
	assert.Equal(t, 10*time.Second-DefaultDriftBudget, h.Remaining(), "validity: TTL minus drift, from the send")

	other, err := c.Acquire(ctx, req(attempt(t, "op-2"), 10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, Contended, other.Kind)
	assert.Nil(t, other.Handle)
	assert.InDelta(t, float64(10*time.Second), float64(other.RetryAfter), float64(5*time.Second), "retry after the holder's PTTL")

	// Shorten the server's TTL behind the host's back: a replay must
	// believe the server, not its own first send.
	require.NoError(t, srv.Admin().PExpire(ctx, h.key.Redis(), 3*time.Second).Err())
	rep, err := c.Acquire(ctx, req(a, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, ReplayedSameOperation, rep.Kind)
	assert.LessOrEqual(t, rep.Handle.Remaining(), 3*time.Second-DefaultDriftBudget)
	assert.Greater(t, rep.Handle.Remaining(), time.Second)

	same, err := ResumeAttempt(a.Owner(), "another-op")
	require.NoError(t, err)
	conf, err := c.Acquire(ctx, req(same, 10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, OwnerOperationConflict, conf.Kind)

	insp, err := c.Inspect(ctx, "nightly-cleanup", []byte("tenant-42"), a, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ReplayedSameOperation, insp.Kind, "inspect with the holding attempt recovers the handle")
	insp, err = c.Inspect(ctx, "nightly-cleanup", []byte("another"), a, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, Absent, insp.Kind)
}

// TestValidityIsMonotonicAndLocal: validity runs out on the host's clock
// even while the server still holds the lease, and a handle past it is
// LOST for good: no renew is sent.
func TestValidityIsMonotonicAndLocal(t *testing.T) {
	srv := startRedis(t)
	clk := clocktest.New()
	c := newClient(t, srv.Addr(), WithClock(clk.Now))
	ctx := ctxT(t)
	got, err := c.Acquire(ctx, req(attempt(t, "op"), 10*time.Second))
	require.NoError(t, err)
	h := got.Handle
	assert.True(t, h.UsableFor(9*time.Second))
	assert.False(t, h.UsableFor(10*time.Second), "the drift budget is never usable")
	clk.Advance(10*time.Second - DefaultDriftBudget)
	assert.Equal(t, Lost, h.State())
	assert.ErrorIs(t, h.Cause(), ErrValidityExpired)
	select {
	case <-h.Done():
	default:
		t.Fatal("Done must be closed once the handle left ACTIVE")
	}
	_, err = h.Renew(ctx)
	assert.ErrorIs(t, err, ErrNotActive)
	pttl, err := srv.Admin().PTTL(ctx, h.key.Redis()).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 5*time.Second, "the server still holds it: validity is the host's own estimate")
}

// TestRenewExtendsAndChecksTheOwner: a renew sets the TTL again (the
// original's renew did not extend) and refuses a lease that is no longer
// the attempt's (the original renewed without a state check).
func TestRenewExtendsAndChecksTheOwner(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := ctxT(t)
	got, err := c.Acquire(ctx, req(attempt(t, "op"), 10*time.Second))
	require.NoError(t, err)
	h := got.Handle
	require.NoError(t, srv.Admin().PExpire(ctx, h.key.Redis(), 200*time.Millisecond).Err())
	kind, err := h.Renew(ctx)
	require.NoError(t, err)
	require.Equal(t, Renewed, kind)
	pttl, err := srv.Admin().PTTL(ctx, h.key.Redis()).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 5*time.Second, "renew really extends the server's TTL")

	// Another owner takes the resource over (the old one expired).
	require.NoError(t, srv.Admin().Del(ctx, h.key.Redis()).Err())
	b, err := c.Acquire(ctx, req(attempt(t, "op-b"), 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, Acquired, b.Kind)
	kind, err = h.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, RenewLost, kind)
	assert.Equal(t, Lost, h.State())
	assert.ErrorIs(t, h.Cause(), ErrLost)
	_, err = h.Renew(ctx)
	assert.ErrorIs(t, err, ErrNotActive, "no transition out of LOST")
	assert.Equal(t, Lost, h.State())
	kind, err = b.Handle.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, Renewed, kind, "the new holder is untouched")
}

// TestStaleOwnerReleaseKeepsTheNewHolder: A's lease expires, B acquires, A
// releases: NOT_OWNER, and B still holds (never a blind DEL).
func TestStaleOwnerReleaseKeepsTheNewHolder(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := ctxT(t)
	a, err := c.Acquire(ctx, req(attempt(t, "a"), 10*time.Second))
	require.NoError(t, err)
	require.NoError(t, srv.Admin().Del(ctx, a.Handle.key.Redis()).Err()) // A's TTL ran out
	b, err := c.Acquire(ctx, req(attempt(t, "b"), 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, Acquired, b.Kind)

	rel, err := a.Handle.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReleaseNotOwner, rel)
	assert.Equal(t, Lost, a.Handle.State())
	insp, err := c.Inspect(ctx, "nightly-cleanup", []byte("tenant-42"), b.Handle.Attempt(), 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ReplayedSameOperation, insp.Kind, "B still holds the lease")

	rel, err = b.Handle.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReleaseDone, rel)
	assert.Equal(t, Released, b.Handle.State())
	rel, err = b.Handle.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReleaseAlreadyReleased, rel, "nothing is sent twice")
	_, err = b.Handle.Renew(ctx)
	assert.ErrorIs(t, err, ErrNotActive)
}

// TestLostAcquireReplyIsReconciled: the acquire reaches Redis and its
// reply is lost; the repeat with the same attempt is a replay, never a
// second lease or a contention with itself.
func TestLostAcquireReplyIsReconciled(t *testing.T) {
	srv := startRedis(t)
	p := redistest.NewProxy(t, srv.Addr())
	c := newClient(t, p.Addr())
	ctx := ctxT(t)
	// Load the script first: a NOSCRIPT round trip would make the stalled
	// call one that never ran.
	warm, err := c.Acquire(ctx, Request{Purpose: "warm-up", Resource: []byte("x"), TTL: time.Second, Attempt: attempt(t, "w")})
	require.NoError(t, err)
	require.Equal(t, Acquired, warm.Kind)

	var repeats atomic.Int32
	c.beforeRepeat = func() { repeats.Add(1); p.Passthrough() }
	p.Stall()
	got, err := c.Acquire(ctx, req(attempt(t, "op"), 10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, int32(1), repeats.Load())
	assert.Equal(t, ReplayedSameOperation, got.Kind, "the first send applied; the repeat finds it")
	assert.Equal(t, 2, got.Attempts)
	assert.Equal(t, Active, got.Handle.State())

	// The send is lost and the repeat cannot even be sent (the stalled
	// proxy holds the new connection's handshake too): still
	// Indeterminate — a call that was never sent settles nothing.
	c.beforeRepeat = func() {}
	p.Stall()
	lost, err := c.Acquire(ctx, Request{Purpose: "nightly-cleanup", Resource: []byte("other"), TTL: 10 * time.Second,
		Attempt: attempt(t, "op-2")})
	require.NoError(t, err)
	assert.Equal(t, Indeterminate, lost.Kind)
	assert.Equal(t, certainty.Indeterminate, lost.Certainty)
	assert.Nil(t, lost.Handle, "never reported held on a guess")
	p.Passthrough()
}

// TestRenewLostReplyIsUnknown: a renew whose reply is lost makes the
// handle UNKNOWN (never resent, never ACTIVE again).
func TestRenewLostReplyIsUnknown(t *testing.T) {
	srv := startRedis(t)
	p := redistest.NewProxy(t, srv.Addr())
	c := newClient(t, p.Addr())
	ctx := ctxT(t)
	got, err := c.Acquire(ctx, req(attempt(t, "op"), 10*time.Second))
	require.NoError(t, err)
	h := got.Handle
	_, err = h.Renew(ctx) // loads lease-renew-v1 before the stall
	require.NoError(t, err)
	p.Stall()
	kind, err := h.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, RenewIndeterminate, kind)
	assert.Equal(t, Unknown, h.State())
	p.Passthrough()
	_, err = h.Renew(ctx)
	assert.ErrorIs(t, err, ErrNotActive)
	rel, err := h.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReleaseDone, rel, "an UNKNOWN handle may still clean up its lease")
	assert.Equal(t, Unknown, h.State(), "no transition out of a terminal state")
}

// TestWaitAcquiresWhenTheHolderReleases: a waiting acquire retries while
// contended and wins once the holder releases (deterministic: the holder
// releases only after the waiter was contended).
func TestWaitAcquiresWhenTheHolderReleases(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := ctxT(t)
	a, err := c.Acquire(ctx, req(attempt(t, "a"), 10*time.Second))
	require.NoError(t, err)
	contended := make(chan struct{})
	var once sync.Once
	c.afterContended = func() { once.Do(func() { close(contended) }) }
	done := make(chan Acquisition, 1)
	go func() {
		r := req(attempt(t, "b"), 10*time.Second)
		r.Wait = 15 * time.Second
		got, err := c.Acquire(ctx, r)
		assert.NoError(t, err)
		done <- got
	}()
	<-contended
	_, err = a.Handle.Release(ctx)
	require.NoError(t, err)
	got := <-done
	assert.Equal(t, Acquired, got.Kind)
	assert.GreaterOrEqual(t, got.Attempts, 2)

	// Without a wait a contended acquire answers at once.
	one, err := c.Acquire(ctx, req(attempt(t, "c"), 10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, Contended, one.Kind)
	assert.Equal(t, 1, one.Attempts)
}

// TestHoldRenewsAndCancelsOnLoss: Hold renews during long work; when the
// lease is taken away the function's context is cancelled with ErrLost and
// the lease is released afterwards (here: already gone).
func TestHoldRenewsAndCancelsOnLoss(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := ctxT(t)
	renewed := make(chan RenewKind, 64)
	c.afterRenew = func(k RenewKind) { renewed <- k }
	var key string
	_, err := c.Hold(ctx, req(attempt(t, "long"), 600*time.Millisecond), func(ctx context.Context, h *Handle) error {
		key = h.key.Redis()
		for range 3 {
			require.Equal(t, Renewed, <-renewed, "the watchdog renews during the work")
			require.Equal(t, Active, h.State())
		}
		require.NoError(t, srv.Admin().Del(context.Background(), key).Err()) // taken away
		<-ctx.Done()
		assert.ErrorIs(t, context.Cause(ctx), ErrLost)
		assert.Equal(t, Lost, h.State())
		return nil
	})
	require.NoError(t, err)
	n, err := srv.Admin().Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestHoldReleasesAndCloseCancels: a Hold's lease is released when the
// function returns; Close cancels running holds with ErrClosed.
func TestHoldReleasesAndCloseCancels(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := ctxT(t)
	var key string
	a, err := c.Hold(ctx, req(attempt(t, "short"), 10*time.Second), func(_ context.Context, h *Handle) error {
		key = h.key.Redis()
		return errors.New("work failed")
	})
	assert.EqualError(t, err, "work failed")
	assert.Equal(t, Released, a.Handle.State())
	n, err := srv.Admin().Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "released after the work")

	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Hold(ctx, req(attempt(t, "running"), 10*time.Second), func(ctx context.Context, _ *Handle) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		})
		done <- err
	}()
	<-started
	require.NoError(t, c.Close(ctx))
	assert.ErrorIs(t, <-done, ErrClosed)
	_, err = c.Acquire(ctx, req(attempt(t, "after"), 10*time.Second))
	assert.ErrorIs(t, err, ErrClosed)
}

// TestInvalidRequests: bad input fails before anything is sent.
func TestInvalidRequests(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := ctxT(t)
	a := attempt(t, "op")
	for name, r := range map[string]Request{
		"no attempt":      {Purpose: "p", Resource: []byte("r"), TTL: time.Second},
		"no resource":     {Purpose: "p", TTL: time.Second, Attempt: a},
		"long resource":   {Purpose: "p", Resource: make([]byte, MaxResourceBytes+1), TTL: time.Second, Attempt: a},
		"bad purpose":     {Purpose: "Not A Slug", Resource: []byte("r"), TTL: time.Second, Attempt: a},
		"ttl under drift": {Purpose: "p", Resource: []byte("r"), TTL: DefaultDriftBudget, Attempt: a},
		"ttl not ms":      {Purpose: "p", Resource: []byte("r"), TTL: time.Second + time.Microsecond, Attempt: a},
		"ttl too long":    {Purpose: "p", Resource: []byte("r"), TTL: MaxTTL + time.Millisecond, Attempt: a},
		"negative wait":   {Purpose: "p", Resource: []byte("r"), TTL: time.Second, Wait: -1, Attempt: a},
	} {
		_, err := c.Acquire(ctx, r)
		assert.ErrorIs(t, err, ErrInvalidRequest, name)
	}
	for _, op := range []string{"", string(make([]byte, MaxOperationIDBytes+1)), "\xff"} {
		_, err := NewAttempt(op)
		assert.ErrorIs(t, err, ErrInvalidRequest, "%q", op)
	}
}
