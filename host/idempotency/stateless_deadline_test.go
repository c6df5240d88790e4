package idempotency

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/internal/redistest"
)

// TestStatelessStepsCarryTheDeadline: a caller driving the steps itself
// gets the deadline Execute's watchdog would keep: on STARTED and RENEWED
// the lease from just before the send less a tenth; on a repeated start
// (ALREADY_STARTED_SAME_OPERATION) the remaining lease the server
// reported, never more; on any other answer none. The clock is frozen and
// moved by hand, so the first two are exact.
func TestStatelessStepsCarryTheDeadline(t *testing.T) {
	srv := redistest.StartStandalone(t)
	const lease = 10 * time.Second
	e := newExecutor(t, srv.Addr(), Config{Lease: lease})
	clk := newFakeClock()
	clk.install(e)
	ctx := ctxT(t)
	a, err := owner.NewAttempt("deadline")
	require.NoError(t, err)
	s := Scope{Route: "create-payment", Principal: []byte("tenant-7"), Key: "deadline-1"}
	c, err := e.Claim(ctx, Request{Scope: s, Fingerprint: FingerprintOf("POST", "/", "", nil), Attempt: a})
	require.NoError(t, err)
	require.True(t, c.Owned)
	assert.True(t, c.ValidUntil.IsZero(), "a claim allows no action yet")

	st, err := e.Start(ctx, s, a, c.Attempt)
	require.NoError(t, err)
	require.Equal(t, "STARTED", st.Status)
	assert.Equal(t, clk.Now().Add(lease-lease/10), st.ValidUntil)

	// Six seconds of the lease pass on the server (its TTL cut by six),
	// four on the local clock: a repeat is bounded by what the server says
	// remains, about 4 s, not by a fresh lease.
	clk.Advance(4 * time.Second)
	k, err := e.scopeKey(s)
	require.NoError(t, err)
	pttl, err := srv.Admin().PTTL(ctx, k.Redis()).Result()
	require.NoError(t, err)
	require.True(t, srv.Admin().PExpire(ctx, k.Redis(), pttl-6*time.Second).Val())
	again, err := e.Start(ctx, s, a, c.Attempt)
	require.NoError(t, err)
	require.Equal(t, "ALREADY_STARTED_SAME_OPERATION", again.Status)
	left := again.ValidUntil.Sub(clk.Now())
	assert.LessOrEqual(t, left, 4*time.Second-lease/10, "the remaining lease bounds a repeat")
	assert.Positive(t, left, "some of it is left")

	clk.Advance(time.Second)
	rn, err := e.Renew(ctx, s, a, c.Attempt)
	require.NoError(t, err)
	require.Equal(t, "RENEWED", rn.Status)
	assert.Equal(t, clk.Now().Add(lease-lease/10), rn.ValidUntil)

	other, err := owner.NewAttempt("other")
	require.NoError(t, err)
	notMine, err := e.Start(ctx, s, other, c.Attempt)
	require.NoError(t, err)
	assert.Equal(t, "NOT_OWNER", notMine.Status)
	assert.True(t, notMine.ValidUntil.IsZero())
}
