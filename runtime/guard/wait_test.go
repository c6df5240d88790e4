package guard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/internal/replwait"
)

// TestWaitOnlyUnderAGrant pins the one path WAIT may take: the script
// lane, a context carrying a replica-wait grant, numreplicas and timeout
// within the grant. Everything else is refused before next is called.
func TestWaitOnlyUnderAGrant(t *testing.T) {
	script, rec := newGuard(t, func(c *Config) { c.Lane = policy.LaneScript })
	regular, _ := newGuard(t, nil)
	granted := replwait.With(context.Background(), replwait.Grant{Acks: 2, Timeout: 500 * time.Millisecond})
	send := func(g *Guard, ctx context.Context, args ...any) (bool, error) {
		sent := false
		h := g.ProcessHook(func(context.Context, redis.Cmder) error { sent = true; return nil })
		return sent, h(ctx, redis.NewIntCmd(ctx, args...))
	}

	sent, err := send(script, granted, "WAIT", 2, 500)
	require.NoError(t, err)
	assert.True(t, sent)
	sent, err = send(script, granted, "wait", "1", "1")
	require.NoError(t, err, "lower bounds, string arguments")
	assert.True(t, sent)

	cases := []struct {
		name   string
		g      *Guard
		ctx    context.Context
		args   []any
		reason Reason
	}{
		{"no grant", script, context.Background(), []any{"WAIT", 1, 100}, ReasonBlocked},
		{"regular lane", regular, granted, []any{"WAIT", 1, 100}, ReasonWrongLane},
		{"more replicas than granted", script, granted, []any{"WAIT", 3, 100}, ReasonMalformed},
		{"zero replicas", script, granted, []any{"WAIT", 0, 100}, ReasonMalformed},
		{"timeout 0 blocks forever", script, granted, []any{"WAIT", 1, 0}, ReasonMalformed},
		{"timeout above the grant", script, granted, []any{"WAIT", 1, 501}, ReasonMalformed},
		{"negative timeout", script, granted, []any{"WAIT", 1, -1}, ReasonMalformed},
		{"not an integer", script, granted, []any{"WAIT", "two", 100}, ReasonMalformed},
		{"missing timeout", script, granted, []any{"WAIT", 1}, ReasonMalformed},
		{"extra argument", script, granted, []any{"WAIT", 1, 100, 1}, ReasonMalformed},
		{"invalid grant is no grant", script,
			replwait.With(context.Background(), replwait.Grant{Acks: replwait.MaxAcks + 1, Timeout: time.Second}),
			[]any{"WAIT", 1, 100}, ReasonBlocked},
	}
	for _, c := range cases {
		sent, err := send(c.g, c.ctx, c.args...)
		assert.False(t, sent, c.name)
		assert.Equal(t, c.reason, reasonOf(t, err), c.name)
	}
	// Check (the pub/sub gate) never carries a grant.
	assert.Equal(t, ReasonBlocked, reasonOf(t, script.Check([]any{"WAIT", 1, 100})))
	_, rej := rec.snapshot()
	assert.Contains(t, rej, "WAIT:blocked")
}

// TestWaitPipelineRefusalSendsNothing: a pipeline whose WAIT the guard
// refuses sends none of its commands, the program before it included.
func TestWaitPipelineRefusalSendsNothing(t *testing.T) {
	g, _ := newGuard(t, func(c *Config) { c.Lane = policy.LaneScript })
	var sent bool
	h := g.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { sent = true; return nil })
	ctx := context.Background()
	cmds := []redis.Cmder{redis.NewCmd(ctx, "EVALSHA", testSHA, 1, ns+"k"), redis.NewIntCmd(ctx, "WAIT", 1, 100)}
	err := h(ctx, cmds)
	assert.Equal(t, ReasonBlocked, reasonOf(t, err))
	assert.False(t, sent)
	for _, c := range cmds {
		assert.ErrorIs(t, c.Err(), ErrRejected)
	}

	granted := replwait.With(ctx, replwait.Grant{Acks: 1, Timeout: 100 * time.Millisecond})
	cmds = []redis.Cmder{redis.NewCmd(granted, "EVALSHA", testSHA, 1, ns+"k"), redis.NewIntCmd(granted, "WAIT", 1, 100)}
	require.NoError(t, h(granted, cmds))
	assert.True(t, sent)
}

// TestWaitOnRealServer: on a real standalone server (no replicas) a granted
// WAIT reaches it and answers 0 after its timeout; refused ones never
// reach it (INFO commandstats).
func TestWaitOnRealServer(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := testCtx(t)
	g, _ := newGuard(t, func(c *Config) { c.Lane = policy.LaneScript })
	c := guardedClient(t, srv, g, 0)
	assert.Equal(t, ReasonBlocked, reasonOf(t, c.Wait(ctx, 1, 50*time.Millisecond).Err()))
	granted := replwait.With(ctx, replwait.Grant{Acks: 1, Timeout: 50 * time.Millisecond})
	assert.Equal(t, ReasonMalformed, reasonOf(t, c.Wait(granted, 1, 0).Err()))
	assert.Equal(t, ReasonMalformed, reasonOf(t, c.Wait(granted, 2, 50*time.Millisecond).Err()))
	assert.Zero(t, srv.CommandCalls(t, "wait"))
	start := time.Now()
	n, err := c.Wait(granted, 1, 50*time.Millisecond).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no replica")
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	assert.Equal(t, int64(1), srv.CommandCalls(t, "wait"))
}
