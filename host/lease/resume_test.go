package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatelessRenewAndRelease: a holder that kept only its attempt renews
// and releases without a Handle, with the same owner checks: another
// attempt neither extends nor deletes the lease.
func TestStatelessRenewAndRelease(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := ctxT(t)
	a := attempt(t, "op")
	got, err := c.Acquire(ctx, req(a, 10*time.Second))
	require.NoError(t, err)
	key := got.Handle.key.Redis()
	require.NoError(t, srv.Admin().PExpire(ctx, key, time.Second).Err())

	resumed, err := ResumeAttempt(a.Owner(), a.OperationID())
	require.NoError(t, err)
	rn, err := c.Renew(ctx, req(resumed, 20*time.Second))
	require.NoError(t, err)
	require.Equal(t, Renewed, rn.Kind)
	assert.Greater(t, rn.Validity, 19*time.Second)
	assert.LessOrEqual(t, rn.Validity, 20*time.Second-DefaultDriftBudget)
	pttl, err := srv.Admin().PTTL(ctx, key).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 15*time.Second, "the renew really extended the server's TTL")

	other := attempt(t, "op")
	rn, err = c.Renew(ctx, req(other, 20*time.Second))
	require.NoError(t, err)
	assert.Equal(t, RenewLost, rn.Kind)
	assert.Zero(t, rn.Validity)
	rl, err := c.Release(ctx, "nightly-cleanup", []byte("tenant-42"), other)
	require.NoError(t, err)
	assert.Equal(t, ReleaseNotOwner, rl.Kind)
	insp, err := c.Inspect(ctx, "nightly-cleanup", []byte("tenant-42"), resumed, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ReplayedSameOperation, insp.Kind, "another attempt changed nothing")

	rl, err = c.Release(ctx, "nightly-cleanup", []byte("tenant-42"), resumed)
	require.NoError(t, err)
	assert.Equal(t, ReleaseDone, rl.Kind)
	rl, err = c.Release(ctx, "nightly-cleanup", []byte("tenant-42"), resumed)
	require.NoError(t, err)
	assert.Equal(t, ReleaseAlreadyAbsent, rl.Kind)
	rn, err = c.Renew(ctx, req(resumed, 20*time.Second))
	require.NoError(t, err)
	assert.Equal(t, RenewLost, rn.Kind, "never re-created by a renew")
	assert.Equal(t, 2.0, value(t, c.m.lost.WithLabelValues("nightly-cleanup", "lost")))

	_, err = c.Release(ctx, "nightly-cleanup", []byte("tenant-42"), Attempt{})
	assert.ErrorIs(t, err, ErrInvalidRequest)
	_, err = c.Release(ctx, "nightly-cleanup", nil, resumed)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	_, err = c.Renew(ctx, req(resumed, MaxTTL+time.Millisecond))
	assert.ErrorIs(t, err, ErrInvalidRequest)
}
