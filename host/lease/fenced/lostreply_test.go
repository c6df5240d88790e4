package fenced

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/runtime/certainty"
)

// lostReplies is a world whose Redis sits behind a fault-injecting proxy,
// on a local clock that moves only by hand, with acct-7 and a warm-up
// resource registered and every fenced-lease program already loaded (a
// NOSCRIPT round trip under a stall would make the stalled call one that
// never ran).
type lostReplies struct {
	w       *world
	p       *redistest.Proxy
	reg     fence.Registration // acct-7's
	warm    fence.Registration
	elapsed atomic.Int64 // nanoseconds the local clock has moved
}

func newLostReplies(t *testing.T) *lostReplies {
	t.Helper()
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	f := &lostReplies{w: newWorld(t, p.Addr(), srv, Config{}), p: p}
	base := time.Now()
	f.w.c.now = func() time.Time { return base.Add(time.Duration(f.elapsed.Load())) }
	f.reg = f.w.activate(t, "acct-7")
	f.warm = f.w.activate(t, "warm-up")
	ctx := ctxT(t)
	got, err := f.w.c.Acquire(ctx, f.warmUp(t))
	require.NoError(t, err)
	require.Equal(t, Acquired, got.Kind)
	f.openConnection(t)
	kind, err := got.Handle.Renew(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.Renewed, kind)
	rel, err := got.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel)
	return f
}

func (f *lostReplies) warmUp(t *testing.T) Request {
	return Request{Purpose: "ledger", Registration: f.warm, TTL: 10 * time.Second, Attempt: attempt(t, "warm-up")}
}

// request is a 10 s lease of acct-7 for a.
func (f *lostReplies) request(a lease.Attempt) Request {
	return Request{Purpose: "ledger", Registration: f.reg, TTL: 10 * time.Second, Attempt: a}
}

// openConnection leaves a live connection in the client's pool by
// inspecting the warm-up resource with the proxy passing (a call stalled
// before took its connection down with it). A call sent next on it under
// Stall reaches Redis and loses only its reply, where a call that had to
// dial would lose its handshake and never be sent.
func (f *lostReplies) openConnection(t *testing.T) {
	t.Helper()
	f.p.Passthrough()
	_, err := f.w.c.Inspect(ctxT(t), f.warmUp(t))
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

// counter reads acct-7's fence counter as Redis stores it
// ('C1:<epoch>:<counter>:<digest>').
func (f *lostReplies) counter(t *testing.T) int64 {
	t.Helper()
	_, key, err := f.w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	raw, err := f.w.srv.Admin().Get(ctxT(t), key.Redis()).Result()
	require.NoError(t, err)
	parts := strings.Split(raw, ":")
	require.Len(t, parts, 4, raw)
	n, err := strconv.ParseInt(parts[2], 10, 64)
	require.NoError(t, err)
	return n
}

// ownerPTTL reads the remaining TTL of acct-7's lease on Redis.
func (f *lostReplies) ownerPTTL(t *testing.T) time.Duration {
	t.Helper()
	owner, _, err := f.w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	pttl, err := f.w.srv.Admin().PTTL(ctxT(t), owner.Redis()).Result()
	require.NoError(t, err)
	return pttl
}

// TestLostRenewReplyNeverExtendsTheValidity: a renew that applied on Redis
// but whose reply is lost makes the handle UNKNOWN and leaves its local
// validity where the acquire put it — an unconfirmed renew never extends
// it — and the handle never resends. The holder's retry of the same renew
// with its attempt and token is idempotent: RENEWED each time, the same
// token, the counter unmoved; the next holder's token is above it.
func TestLostRenewReplyNeverExtendsTheValidity(t *testing.T) {
	f := newLostReplies(t)
	ctx := ctxT(t)
	r := f.request(attempt(t, "op"))
	got, err := f.w.c.Acquire(ctx, r)
	require.NoError(t, err)
	require.Equal(t, Acquired, got.Kind)
	h, tok := got.Handle, got.Handle.Token()
	require.Equal(t, fence.Token{Epoch: f.reg.Epoch, Counter: 1}, tok)
	validUntil := h.h.ValidUntil()

	// Six of the ten seconds pass locally; on Redis two are left, so a
	// renew that applies shows there.
	f.elapsed.Store(int64(6 * time.Second))
	owner, _, err := f.w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	require.NoError(t, f.w.srv.Admin().PExpire(ctx, owner.Redis(), 2*time.Second).Err())
	f.loseReplies(t)
	kind, err := h.Renew(ctx)
	f.p.Passthrough()
	require.NoError(t, err)
	assert.Equal(t, lease.RenewIndeterminate, kind)
	assert.Equal(t, Unknown, h.State())
	assert.Error(t, h.Cause())
	assert.NotErrorIs(t, h.Cause(), lease.ErrLost, "nothing said the lease is gone")
	assert.Equal(t, validUntil, h.h.ValidUntil(), "an unconfirmed renew never extends the local validity")
	assert.Zero(t, h.Remaining())
	assert.False(t, h.UsableFor(time.Millisecond))
	assert.Greater(t, f.ownerPTTL(t), 5*time.Second, "the renew applied on Redis")
	assert.Equal(t, int64(1), f.counter(t))
	_, err = h.Renew(ctx)
	assert.ErrorIs(t, err, lease.ErrNotActive, "the handle never resends")

	for range 2 {
		res, err := f.w.c.Renew(ctx, r, tok)
		require.NoError(t, err)
		assert.Equal(t, lease.Renewed, res.Kind, "the same renew again")
		assert.Equal(t, certainty.Applied, res.Certainty)
		assert.Equal(t, r.TTL-lease.DefaultDriftBudget, res.Validity, "validity from this confirmed send")
		assert.Equal(t, int64(1), f.counter(t), "a renew never moves the counter")
	}
	ins, err := f.w.c.Inspect(ctx, r)
	require.NoError(t, err)
	require.Equal(t, ReplayedSameOperation, ins.Kind)
	assert.Equal(t, tok, ins.Handle.Token(), "the same token")
	assert.Equal(t, tok, ins.Fence)
	require.NoError(t, f.w.write(ctx, tok, "op", 1), "the token still fences the resource")

	rel, err := f.w.c.Release(ctx, r, tok)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel.Kind)
	nextReq := f.request(attempt(t, "next"))
	next, err := f.w.c.Acquire(ctx, nextReq)
	require.NoError(t, err)
	require.Equal(t, Acquired, next.Kind)
	assert.Equal(t, fence.Token{Epoch: f.reg.Epoch, Counter: 2}, next.Handle.Token())
	assert.Equal(t, int64(2), f.counter(t), "the counter moves on, never back")

	// Without a handle, a release whose reply and repeat are both lost is
	// counted as a handle's is.
	unknown := f.w.c.m.lost.WithLabelValues("ledger", causeUnknown)
	before := counterValue(t, unknown)
	f.w.c.beforeReleaseRepeat = func() { f.loseReplies(t) }
	f.loseReplies(t)
	rel, err = f.w.c.Release(ctx, nextReq, next.Handle.Token())
	f.p.Passthrough()
	f.w.c.beforeReleaseRepeat = nil
	require.NoError(t, err)
	assert.Equal(t, lease.ReleaseIndeterminate, rel.Kind)
	assert.Equal(t, before+1, counterValue(t, unknown), "a lost handle-less release")
}

// TestDoubleLostAcquireKeepsOneToken: an acquire's reply is lost and so is
// its reconciling repeat's (both really reached Redis): INDETERMINATE, no
// handle, and the counter went up once. The caller's third try with the
// same owner token and operation id is REPLAYED_SAME_OPERATION with the
// first send's token and the validity of the server's remaining TTL —
// never a second grant or a new token — and another attempt is contended.
func TestDoubleLostAcquireKeepsOneToken(t *testing.T) {
	f := newLostReplies(t)
	ctx := ctxT(t)
	r := f.request(attempt(t, "op"))
	var repeats int
	f.w.c.beforeRepeat = func() { repeats++; f.loseReplies(t) }
	f.openConnection(t)
	sent := f.w.srv.CommandCalls(t, "evalsha")
	f.p.Stall()
	lost, err := f.w.c.Acquire(ctx, r)
	f.p.Passthrough()
	f.w.c.beforeRepeat = nil
	require.NoError(t, err)
	assert.Equal(t, 1, repeats)
	assert.Equal(t, Indeterminate, lost.Kind)
	assert.Equal(t, certainty.Indeterminate, lost.Certainty)
	assert.Equal(t, 2, lost.Attempts)
	assert.Nil(t, lost.Handle, "never held on a guess")
	// The acquire, the inspect that opened the repeat's connection, and
	// the repeat all reached Redis.
	assert.Equal(t, sent+3, f.w.srv.CommandCalls(t, "evalsha"))
	assert.Equal(t, int64(1), f.counter(t), "one increment: the repeat was a replay")

	owner, _, err := f.w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	require.NoError(t, f.w.srv.Admin().PExpire(ctx, owner.Redis(), 3*time.Second).Err())
	before := f.ownerPTTL(t)
	third, err := f.w.c.Acquire(ctx, r)
	require.NoError(t, err)
	require.Equal(t, ReplayedSameOperation, third.Kind, "the first send applied; the third try finds it")
	assert.Equal(t, 1, third.Attempts)
	tok := fence.Token{Epoch: f.reg.Epoch, Counter: 1}
	assert.Equal(t, tok, third.Handle.Token(), "the first send's token")
	after := f.ownerPTTL(t)
	assert.LessOrEqual(t, after, before, "a replay does not set the TTL again")
	assert.LessOrEqual(t, third.Handle.Remaining(), before-lease.DefaultDriftBudget,
		"validity from the server's remaining TTL, not the request's")
	assert.GreaterOrEqual(t, third.Handle.Remaining(), after-lease.DefaultDriftBudget)
	require.NoError(t, f.w.write(ctx, third.Handle.Token(), "op", 1))

	other, err := f.w.c.Acquire(ctx, f.request(attempt(t, "other")))
	require.NoError(t, err)
	assert.Equal(t, Contended, other.Kind, "no second grant")
	assert.Equal(t, int64(1), f.counter(t))
}

// counterValue reads one counter series.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}
