package idempotency

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/runtime/certainty"
)

// TestLostInspectReplyChangesNothing: an inspect whose reply is lost is
// INDETERMINATE, owns nothing, carries no response and changes nothing on
// Redis (the record as DUMP serialises it, its TTL); it counts as a lost
// inspect. The retry reads the true state: the claim this attempt holds,
// and once completed, the stored response.
func TestLostInspectReplyChangesNothing(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	e := newExecutor(t, p.Addr(), Config{})
	ctx := ctxT(t)
	// Load every program first: a NOSCRIPT round trip under the stall
	// would make the stalled call one that never ran. The calls before
	// each stall leave a live pooled connection for the inspect.
	warm := request(t, "warm", "{}")
	_, err := e.Execute(ctx, warm, func(context.Context) Result { return Committed(nil) })
	require.NoError(t, err)
	_, err = e.Inspect(ctx, warm)
	require.NoError(t, err)

	r := request(t, "pay-1", "{}")
	c, err := e.Claim(ctx, r)
	require.NoError(t, err)
	require.True(t, c.Owned)
	key, err := e.scopeKey(r.Scope)
	require.NoError(t, err)
	type stored struct {
		dump string
		pttl time.Duration
	}
	record := func() stored {
		t.Helper()
		dump, err := srv.Admin().Dump(ctx, key.Redis()).Result()
		require.NoError(t, err)
		pttl, err := srv.Admin().PTTL(ctx, key.Redis()).Result()
		require.NoError(t, err)
		return stored{dump, pttl}
	}
	lost := func() StepResult {
		t.Helper()
		p.Stall()
		defer p.Passthrough()
		ins, err := e.Inspect(ctx, r)
		require.NoError(t, err)
		return ins
	}

	before := record()
	ins := lost()
	assert.Equal(t, StatusIndeterminate, ins.Status)
	assert.Equal(t, certainty.Indeterminate, ins.Certainty)
	assert.False(t, ins.Owned, "never owned on a guess")
	assert.Zero(t, ins.Attempt)
	assert.Error(t, ins.Cause)
	assert.Equal(t, 1.0, value(t, e.m.indeterminate.WithLabelValues(r.Scope.Route, "inspect")))
	after := record()
	assert.Equal(t, before.dump, after.dump, "the lost inspect wrote nothing")
	assert.LessOrEqual(t, after.pttl, before.pttl, "nor extended the record")

	ins, err = e.Inspect(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, "CLAIMED_SAME_OPERATION", ins.Status, "the retry reads the true state")
	assert.True(t, ins.Owned)
	assert.Equal(t, c.Attempt, ins.Attempt)

	s, err := e.Start(ctx, r.Scope, r.Attempt, c.Attempt)
	require.NoError(t, err)
	require.Equal(t, "STARTED", s.Status)
	done, err := e.Complete(ctx, r.Scope, r.Attempt, c.Attempt, []byte(`{"id":42}`))
	require.NoError(t, err)
	require.Equal(t, "COMPLETED", done.Status)
	before = record()
	ins = lost()
	assert.Equal(t, StatusIndeterminate, ins.Status)
	assert.Nil(t, ins.Response, "no response on a guess")
	assert.Equal(t, 2.0, value(t, e.m.indeterminate.WithLabelValues(r.Scope.Route, "inspect")))
	assert.Equal(t, before.dump, record().dump)

	ins, err = e.Inspect(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, "COMPLETED_REPLAY", ins.Status)
	assert.Equal(t, `{"id":42}`, string(ins.Response))
}
