package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/clocktest"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/runtime/certainty"
)

// lostReplies is a client whose Redis sits behind a fault-injecting proxy,
// on a clock that moves only by hand (so a validity is exactly the TTL it
// was computed from, minus the drift budget), with every lease program
// already loaded: a NOSCRIPT round trip under a stall would make the
// stalled call one that never ran.
type lostReplies struct {
	srv *redistest.Server
	p   *redistest.Proxy
	c   *Client
}

// warmUp is the resource the fixture loads the programs with.
var warmUp = []byte("warm-up")

func newLostReplies(t *testing.T) *lostReplies {
	t.Helper()
	srv := startRedis(t)
	p := redistest.NewProxy(t, srv.Addr())
	c := newClient(t, p.Addr(), WithClock(clocktest.New().Now))
	ctx := ctxT(t)
	a := attempt(t, "warm-up")
	got, err := c.Acquire(ctx, Request{Purpose: "nightly-cleanup", Resource: warmUp, TTL: 10 * time.Second, Attempt: a})
	require.NoError(t, err)
	require.Equal(t, Acquired, got.Kind)
	f := &lostReplies{srv: srv, p: p, c: c}
	f.openConnection(t)
	kind, err := got.Handle.Renew(ctx)
	require.NoError(t, err)
	require.Equal(t, Renewed, kind)
	rel, err := got.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, ReleaseDone, rel)
	return f
}

// openConnection leaves a live connection in the client's pool by
// inspecting the warm-up resource with the proxy passing (a call stalled
// before took its connection down with it). A call sent next on it under
// Stall reaches Redis and loses only its reply, where a call that had to
// dial would lose its handshake and never be sent.
func (f *lostReplies) openConnection(t *testing.T) {
	t.Helper()
	f.p.Passthrough()
	_, err := f.c.Inspect(ctxT(t), "nightly-cleanup", warmUp, attempt(t, "warm-up"), time.Second)
	require.NoError(t, err)
}

// loseReplies leaves a live connection in the pool and stalls the proxy:
// the next call reaches Redis and only its reply is lost (as is every
// reply until Passthrough).
func (f *lostReplies) loseReplies(t *testing.T) {
	t.Helper()
	f.openConnection(t)
	f.p.Stall()
}

// hold acquires tenant-42's lease for a, for 10 s.
func (f *lostReplies) hold(t *testing.T, a Attempt) *Handle {
	t.Helper()
	got, err := f.c.Acquire(ctxT(t), req(a, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, Acquired, got.Kind)
	return got.Handle
}

// stored is a lease key as Redis holds it: its value and remaining TTL.
type stored struct {
	value string
	pttl  time.Duration
}

func (f *lostReplies) stored(t *testing.T, key string) stored {
	t.Helper()
	ctx := ctxT(t)
	v, err := f.srv.Admin().Get(ctx, key).Result()
	require.NoError(t, err)
	pttl, err := f.srv.Admin().PTTL(ctx, key).Result()
	require.NoError(t, err)
	return stored{value: v, pttl: pttl}
}

// assertServerValidity checks that a handle made on a frozen clock is valid
// for the server's remaining TTL minus the drift budget: at most what
// Redis had before the call (bound) and at least what it had after it.
func (f *lostReplies) assertServerValidity(t *testing.T, h *Handle, bound time.Duration) {
	t.Helper()
	after, err := f.srv.Admin().PTTL(ctxT(t), h.key.Redis()).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, h.Remaining(), bound-DefaultDriftBudget, "validity from the server's remaining TTL, not the request's")
	assert.GreaterOrEqual(t, h.Remaining(), after-DefaultDriftBudget)
}

// TestLostInspectReplyChangesNothing: an inspect whose reply is lost is
// INDETERMINATE, gives no handle, and changes nothing — not the lease's
// value, not its TTL, not the holder's handle, and on a free resource
// nothing is created. The retry reads the true state: the attempt holds
// the lease, with the validity of the server's remaining TTL.
func TestLostInspectReplyChangesNothing(t *testing.T) {
	f := newLostReplies(t)
	ctx := ctxT(t)
	a := attempt(t, "op")
	holder := f.hold(t, a)
	key := holder.key.Redis()
	// The server's TTL is well below the request's, so a validity taken
	// from the request would show.
	require.NoError(t, f.srv.Admin().PExpire(ctx, key, 4*time.Second).Err())
	before := f.stored(t, key)

	f.loseReplies(t)
	lost, err := f.c.Inspect(ctx, "nightly-cleanup", []byte("tenant-42"), a, 10*time.Second)
	f.p.Passthrough()
	require.NoError(t, err)
	assert.Equal(t, Indeterminate, lost.Kind)
	assert.Equal(t, certainty.Indeterminate, lost.Certainty)
	assert.Nil(t, lost.Handle, "never held on a guess")
	assert.Error(t, lost.Cause)
	assert.Equal(t, 1.0, value(t, f.c.m.inspects.WithLabelValues("nightly-cleanup", "indeterminate")))
	after := f.stored(t, key)
	assert.Equal(t, before.value, after.value, "the lost inspect wrote nothing")
	assert.LessOrEqual(t, after.pttl, before.pttl, "nor extended the lease")
	assert.Equal(t, Active, holder.State(), "nor touched the holder's handle")

	again, err := f.c.Inspect(ctx, "nightly-cleanup", []byte("tenant-42"), a, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, ReplayedSameOperation, again.Kind, "the retry reads the true state")
	assert.Equal(t, certainty.Applied, again.Certainty)
	f.assertServerValidity(t, again.Handle, before.pttl)
	assert.Equal(t, before.value, f.stored(t, key).value)

	// On a free resource the lost inspect creates nothing, and the retry
	// reads it free.
	free := []byte("tenant-43")
	f.loseReplies(t)
	lost, err = f.c.Inspect(ctx, "nightly-cleanup", free, a, 10*time.Second)
	f.p.Passthrough()
	require.NoError(t, err)
	assert.Equal(t, Indeterminate, lost.Kind)
	freeKey, err := f.c.resourceKey("nightly-cleanup", free)
	require.NoError(t, err)
	n, err := f.srv.Admin().Exists(ctx, freeKey.Redis()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "an inspect never takes a lease")
	again, err = f.c.Inspect(ctx, "nightly-cleanup", free, a, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, Absent, again.Kind)
}

// TestLostReleaseReplyIsNeverReportedReleased: a release that applied but
// whose reply is lost is never reported RELEASED on a guess. When its
// reconciling repeat is lost too the outcome is INDETERMINATE and the
// handle UNKNOWN for good; the caller's retry with the same owner token
// and operation id — on the handle or without it — answers ALREADY_ABSENT
// (the first send applied), and the lease is free for the next attempt.
// When the repeat gets through, ALREADY_ABSENT settles it and the handle
// is RELEASED.
func TestLostReleaseReplyIsNeverReportedReleased(t *testing.T) {
	f := newLostReplies(t)
	ctx := ctxT(t)
	a := attempt(t, "op")
	h := f.hold(t, a)
	key := h.key.Redis()

	// The first send and its repeat both go out on live connections and
	// both replies are lost.
	var repeats int
	f.c.beforeReleaseRepeat = func() { repeats++; f.loseReplies(t) }
	f.loseReplies(t)
	rel, err := h.Release(ctx)
	f.p.Passthrough()
	f.c.beforeReleaseRepeat = nil
	require.NoError(t, err)
	assert.Equal(t, 1, repeats)
	assert.Equal(t, ReleaseIndeterminate, rel)
	assert.Equal(t, Unknown, h.State(), "a lost release is not a release")
	assert.Error(t, h.Cause())
	assert.Equal(t, 1.0, value(t, f.c.m.lost.WithLabelValues("nightly-cleanup", causeUnknown)))
	n, err := f.srv.Admin().Exists(ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the first send applied")

	rel, err = h.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReleaseAlreadyAbsent, rel, "the retry finds its release applied")
	assert.Equal(t, Unknown, h.State(), "no transition out of a terminal state")
	resumed, err := ResumeAttempt(a.Owner(), a.OperationID())
	require.NoError(t, err)
	res, err := f.c.Release(ctx, "nightly-cleanup", []byte("tenant-42"), resumed)
	require.NoError(t, err)
	assert.Equal(t, ReleaseAlreadyAbsent, res.Kind)
	assert.Equal(t, certainty.NotApplied, res.Certainty, "the server answered: nothing left to delete")
	next := f.hold(t, attempt(t, "next")) // the lease is free

	// The first reply is lost, the repeat gets through: settled.
	f.c.beforeReleaseRepeat = func() { repeats++; f.p.Passthrough() }
	f.loseReplies(t)
	rel, err = next.Release(ctx)
	f.p.Passthrough()
	f.c.beforeReleaseRepeat = nil
	require.NoError(t, err)
	assert.Equal(t, 2, repeats)
	assert.Equal(t, ReleaseAlreadyAbsent, rel, "the repeat finds the first send applied")
	assert.Equal(t, Released, next.State())
	assert.NoError(t, next.Cause())
	assert.Equal(t, 1.0, value(t, f.c.m.lost.WithLabelValues("nightly-cleanup", causeUnknown)), "a settled release is no loss")

	// Without a handle, a release whose reply and repeat are both lost is
	// counted as the handle's is.
	third := attempt(t, "third")
	f.hold(t, third)
	f.c.beforeReleaseRepeat = func() { repeats++; f.loseReplies(t) }
	f.loseReplies(t)
	res, err = f.c.Release(ctx, "nightly-cleanup", []byte("tenant-42"), third)
	f.p.Passthrough()
	f.c.beforeReleaseRepeat = nil
	require.NoError(t, err)
	assert.Equal(t, 3, repeats)
	assert.Equal(t, ReleaseIndeterminate, res.Kind)
	assert.Equal(t, 2.0, value(t, f.c.m.lost.WithLabelValues("nightly-cleanup", causeUnknown)), "a lost handle-less release")
}

// TestDoubleLostAcquireIsReplayed: an acquire's reply is lost and so is
// its reconciling repeat's (both really reached Redis): INDETERMINATE, no
// handle. The caller's third try with the same owner token and operation
// id is REPLAYED_SAME_OPERATION with the validity of the server's
// remaining TTL — never a second grant, never a TTL set again — and
// another attempt is contended.
func TestDoubleLostAcquireIsReplayed(t *testing.T) {
	f := newLostReplies(t)
	ctx := ctxT(t)
	a := attempt(t, "op")
	var repeats int
	f.c.beforeRepeat = func() { repeats++; f.loseReplies(t) }
	f.openConnection(t)
	sent := f.srv.CommandCalls(t, "evalsha")
	f.p.Stall()
	lost, err := f.c.Acquire(ctx, req(a, 10*time.Second))
	f.p.Passthrough()
	f.c.beforeRepeat = nil
	require.NoError(t, err)
	assert.Equal(t, 1, repeats)
	assert.Equal(t, Indeterminate, lost.Kind)
	assert.Equal(t, certainty.Indeterminate, lost.Certainty)
	assert.Equal(t, 2, lost.Attempts)
	assert.Nil(t, lost.Handle, "never held on a guess")
	// The acquire, the inspect that opened the repeat's connection, and
	// the repeat all reached Redis.
	assert.Equal(t, sent+3, f.srv.CommandCalls(t, "evalsha"))

	key, err := f.c.resourceKey("nightly-cleanup", []byte("tenant-42"))
	require.NoError(t, err)
	require.NoError(t, f.srv.Admin().PExpire(ctx, key.Redis(), 3*time.Second).Err())
	before := f.stored(t, key.Redis())
	third, err := f.c.Acquire(ctx, req(a, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, ReplayedSameOperation, third.Kind, "the first send applied; the third try finds it")
	assert.Equal(t, 1, third.Attempts)
	assert.Equal(t, Active, third.Handle.State())
	f.assertServerValidity(t, third.Handle, before.pttl)
	after := f.stored(t, key.Redis())
	assert.Equal(t, before.value, after.value, "the same grant")
	assert.LessOrEqual(t, after.pttl, before.pttl, "a replay does not set the TTL again")
	other, err := f.c.Acquire(ctx, req(attempt(t, "other"), 10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, Contended, other.Kind, "no second grant")
}
