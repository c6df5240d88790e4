package redistest

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlotMigration moves one slot with its keys between two primaries in
// two steps and checks what a client sees in between: the source answers
// -ASK for a moved key, the target serves it only after ASKING, and after
// Finish every node routes the slot to the target.
func TestSlotMigration(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, WithACL())
	ctx := ctxT(t)
	const tag = "{user1}" // slot 8106, on the second primary
	const slot = 8106
	from := c.SlotOwner(t, slot)
	require.Equal(t, c.Primaries()[1], from)
	to := c.Primaries()[2]
	for i := range 10 {
		require.NoError(t, from.Admin().Set(ctx, fmt.Sprintf("%s:%d", tag, i), i, time.Minute).Err())
	}

	m := c.BeginSlotMigration(t, slot, to)
	assert.Same(t, from, m.From())
	assert.Same(t, to, m.To())
	assert.Equal(t, 4, m.MigrateKeys(t, 4))

	// A moved key: ASK from the source; MOVED from the target without
	// ASKING; served by the target after ASKING.
	moved, kept := "", ""
	for i := range 10 {
		k := fmt.Sprintf("%s:%d", tag, i)
		p := to.Admin().Pipeline()
		p.Do(ctx, "ASKING")
		exists := p.Exists(ctx, k)
		_, err := p.Exec(ctx)
		require.NoError(t, err)
		n := exists.Val()
		if n == 1 && moved == "" {
			moved = k
		}
		if n == 0 && kept == "" {
			kept = k
		}
	}
	require.NotEmpty(t, moved)
	require.NotEmpty(t, kept)
	err := from.Admin().Get(ctx, moved).Err()
	addr, ask := redis.IsAskError(err)
	require.True(t, ask, "source answers ASK for a moved key, got %v", err)
	assert.Equal(t, to.Addr(), addr)
	_, isMoved := redis.IsMovedError(to.Admin().Get(ctx, moved).Err())
	assert.True(t, isMoved, "the target redirects a client that did not send ASKING")
	pipe := to.Admin().Pipeline()
	pipe.Do(ctx, "ASKING")
	get := pipe.Get(ctx, moved)
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	assert.NotEmpty(t, get.Val())
	require.NoError(t, from.Admin().Get(ctx, kept).Err(), "a key not moved yet is still served by the source")

	assert.Equal(t, 6, m.Finish(t))
	assert.Same(t, to, c.SlotOwner(t, slot))
	for i := range 10 {
		v, err := c.Admin().Get(ctx, fmt.Sprintf("%s:%d", tag, i)).Int()
		require.NoError(t, err)
		assert.Equal(t, i, v)
	}
	_, isMoved = redis.IsMovedError(from.Admin().Get(ctx, kept).Err())
	assert.True(t, isMoved, "the source redirects for good after Finish")

	// MigrateSlot does it in one step (and back), an empty slot included.
	assert.Equal(t, 10, c.MigrateSlot(t, slot, from))
	assert.Same(t, from, c.SlotOwner(t, slot))
	assert.Equal(t, 0, c.MigrateSlot(t, 8107, to))
	assert.Same(t, to, c.SlotOwner(t, 8107))
}
