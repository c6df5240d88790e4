package guard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

// The guard runs on every command: admitting a typed single-key command
// and measuring its reply must not allocate (the entry stays on the stack,
// the reply is measured by concrete type, not by reflection).
func TestAdmitAndMeasureDoNotAllocate(t *testing.T) {
	g, _ := newGuard(t, func(c *Config) { c.Observer = nil })
	value := strings.Repeat("v", 256)
	h := g.ProcessHook(func(_ context.Context, cmd redis.Cmder) error {
		switch c := cmd.(type) {
		case *redis.StringCmd:
			c.SetVal(value)
		case *redis.StatusCmd:
			c.SetVal("OK")
		case *redis.IntCmd:
			c.SetVal(1)
		}
		return nil
	})
	ctx := context.Background()
	for _, cmd := range []redis.Cmder{
		redis.NewStringCmd(ctx, "get", ns+"k"),
		redis.NewStatusCmd(ctx, "set", ns+"k", value, "px", int64(time.Minute/time.Millisecond)),
		redis.NewIntCmd(ctx, "unlink", ns+"k"),
	} {
		var err error
		allocs := testing.AllocsPerRun(200, func() { err = h(ctx, cmd) })
		require.NoError(t, err, cmd.Name())
		assert.Zero(t, allocs, cmd.Name())
	}
	// The zero-allocation path still measures: an over-budget reply is withheld.
	over := g.ProcessHook(func(_ context.Context, cmd redis.Cmder) error {
		cmd.(*redis.StringCmd).SetVal(strings.Repeat("x", 2048))
		return nil
	})
	cmd := redis.NewStringCmd(ctx, "get", ns+"k")
	require.ErrorIs(t, over(ctx, cmd), ErrRejected)
	assert.Empty(t, cmd.Val())
}

func BenchmarkGuardGet(b *testing.B) {
	g, _ := newGuard(b, func(c *Config) { c.Observer = nil })
	value := strings.Repeat("v", 256)
	h := g.ProcessHook(func(_ context.Context, cmd redis.Cmder) error {
		cmd.(*redis.StringCmd).SetVal(value)
		return nil
	})
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", ns+"k")
	b.ReportAllocs()
	for b.Loop() {
		if err := h(ctx, cmd); err != nil {
			b.Fatal(err)
		}
	}
}

// Option tokens fold like Redis' strcasecmp: ASCII letters in any case,
// never a non-ASCII look-alike (which Redis would not accept as an option
// either, so it cannot count as the key's expiry).
func TestTTLOptionsFoldASCIIOnly(t *testing.T) {
	g, _ := newGuard(t, nil)
	ctx := context.Background()
	for _, opt := range []string{"px", "Px", "pX", "PX"} {
		_, err := run(g, redis.NewStatusCmd(ctx, "set", ns+"k", "v", opt, 100))
		require.NoError(t, err, opt)
	}
	_, err := run(g, redis.NewStatusCmd(ctx, "set", ns+"k", "v", "xx", "\u212Aeepttl")) // KELVIN SIGN
	assert.Equal(t, ReasonMissingTTL, rejection(t, err).Reason)
	_, err = run(g, redis.NewStatusCmd(ctx, "set", ns+"k", "v", "xx", "keepttl"))
	require.NoError(t, err)
}

// A program call read as integers (programs reads rate-token-bucket-v2's
// tuple into an IntSliceCmd) is measured by concrete type, without
// allocating, and an over-budget integer reply is still withheld.
func TestIntSliceReplyMeasuredByType(t *testing.T) {
	g, rec := newGuard(t, func(c *Config) { c.Lane = policy.LaneScript })
	ctx := context.Background()
	tuple := []int64{1, 1, 1796030779868, 1, 10000000, 9000000, 0, 1796030779968}
	h := g.ProcessHook(func(_ context.Context, cmd redis.Cmder) error {
		cmd.(*redis.IntSliceCmd).SetVal(tuple)
		return nil
	})
	cmd := redis.NewIntSliceCmd(ctx, "evalsha", testSHA, 1, ns+"k", "r1")
	var err error
	allocs := testing.AllocsPerRun(200, func() { err = h(ctx, cmd) })
	require.NoError(t, err)
	assert.Zero(t, allocs)
	assert.Equal(t, tuple, cmd.Val())
	assert.Equal(t, 8*len(tuple), rec.reply[len(rec.reply)-1], "8 bytes per integer")

	// 200 integers are 1600 bytes, over the 1024-byte test budget.
	over := g.ProcessHook(func(_ context.Context, cmd redis.Cmder) error {
		cmd.(*redis.IntSliceCmd).SetVal(make([]int64, 200))
		return nil
	})
	big := redis.NewIntSliceCmd(ctx, "evalsha", testSHA, 1, ns+"k", "r1")
	require.ErrorIs(t, over(ctx, big), ErrRejected)
	assert.Nil(t, big.Val(), "the over-budget reply is never handed back")
}
