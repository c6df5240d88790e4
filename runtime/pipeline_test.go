package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

func TestPipelineCertainty(t *testing.T) {
	srv := redistest.StartStandalone(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	c, rec := regular(t, proxy.Addr(), func(d *policy.Deployment) {
		d.Lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 1, MaxInFlight: 1}
		d.Timeouts.Command = 300 * time.Millisecond
		d.Timeouts.Acquire = 100 * time.Millisecond
	})
	ctx := ctxT(t, 10*time.Second)

	// A pipeline takes one in-flight slot (MaxInFlight 1 must not deadlock
	// on its own handshake) and each command reports its own outcome.
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, testKey("p1"), "v", time.Minute)
		p.Get(ctx, testKey("p-absent"))
		return nil
	})
	require.ErrorIs(t, err, redis.Nil)
	require.NoError(t, cmds[0].Err())
	require.ErrorIs(t, cmds[1].Err(), redis.Nil)
	assert.Equal(t, int32(2), rec.outcomes[certainty.Applied].Load())

	// One rejected command rejects the whole pipeline before send.
	before := srv.CommandCalls(t, "set")
	cmds, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, testKey("p2"), "v", time.Minute)
		p.Do(ctx, "flushall")
		return nil
	})
	require.Error(t, err)
	for _, cmd := range cmds {
		assert.Equal(t, certainty.Rejected, outcomeOf(t, cmd.Err()))
	}
	assert.Equal(t, before, srv.CommandCalls(t, "set"))

	// A stalled pipeline is INDETERMINATE for every command in it.
	proxy.Stall()
	cmds, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, testKey("p3"), "v", time.Minute)
		p.Set(ctx, testKey("p4"), "v", time.Minute)
		return nil
	})
	assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err))
	for _, cmd := range cmds {
		assert.Equal(t, certainty.Indeterminate, outcomeOf(t, cmd.Err()))
	}
	proxy.Passthrough()
	require.Eventually(t, func() bool {
		return srv.Admin().Exists(context.Background(), testKey("p3"), testKey("p4")).Val() == 2
	}, 2*time.Second, 10*time.Millisecond)
}
