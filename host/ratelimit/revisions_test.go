package ratelimit

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
)

// TestRevisionReuseAcrossAnIntermediateSet: a policy changed under its
// revision is refused even when the set it replaces no longer has it (an
// intermediate generation dropped it): its revision's state is still in
// Redis, and reading it with new parameters would turn a key spent under
// limit 15 into "remaining 4 of 30". Dropping and restoring the policy
// unchanged, and changing it under a new revision, stay allowed; CheckSwap
// (the pre-swap check) says what Swap will say.
func TestRevisionReuseAcrossAnIntermediateSet(t *testing.T) {
	s := redistest.StartStandalone(t)
	cfg := Config{Provider: ProviderRedis}
	f := newFixture(t, s.Addr(), s, cfg, nil, fixedWindow("p", 15), fixedWindow("other", 5))
	ctx := ctxT(t)
	for range 11 {
		require.True(t, f.l.Evaluate(ctx, req("p", "acme")).Allowed())
	}
	d, _ := f.l.Evaluate(ctx, req("p", "acme")).Decision()
	require.Equal(t, int64(3), d.Remaining, "15 - 12")

	without := compile(t, cfg, fixedWindow("other", 5))
	require.NoError(t, f.l.Swap(without), "a set may drop a policy")
	changed := compile(t, cfg, fixedWindow("p", 30), fixedWindow("other", 5))
	require.ErrorIs(t, f.l.CheckSwap(changed), ErrRevisionReuse)
	err := f.l.Swap(changed)
	require.ErrorIs(t, err, ErrRevisionReuse, "p revision r1 was served with limit 15")
	assert.Contains(t, err.Error(), "policy p revision r1")
	_, ok := f.l.Policies().Policy("p")
	assert.False(t, ok, "the intermediate set keeps serving")

	// Restored unchanged: accepted, and it counts on from its old state.
	require.NoError(t, f.l.Swap(compile(t, cfg, fixedWindow("p", 15), fixedWindow("other", 5))))
	d, _ = f.l.Evaluate(ctx, req("p", "acme")).Decision()
	assert.Equal(t, int64(2), d.Remaining)
	assert.Equal(t, int64(15), d.Limit)

	// Changed under a new revision: accepted, fresh state.
	next := fixedWindow("p", 30)
	next.Revision = "r2"
	require.NoError(t, f.l.Swap(compile(t, cfg, next, fixedWindow("other", 5))))
	d, _ = f.l.Evaluate(ctx, req("p", "acme")).Decision()
	assert.Equal(t, int64(29), d.Remaining)
	assert.Equal(t, "r2", d.Revision)
	// And r1 is still remembered with limit 15 after r2 replaced it.
	require.ErrorIs(t, f.l.Swap(changed), ErrRevisionReuse)
}

// TestRevisionMemoryIsBounded: the memory refuses a set that would grow it
// beyond MaxRememberedRevisions instead of forgetting a pair (forgetting
// would reopen the reuse above); pairs it holds already cost nothing.
func TestRevisionMemoryIsBounded(t *testing.T) {
	cfg := Config{Provider: ProviderRedis}
	set := compile(t, cfg, fixedWindow("p", 15), fixedWindow("q", 15))
	var r revisionMemory
	r.seen = make(map[string]string, MaxRememberedRevisions)
	for i := range MaxRememberedRevisions - 1 {
		r.seen[fmt.Sprintf("filler-%d--r1", i)] = "x"
	}
	require.ErrorIs(t, r.check(set), ErrRevisionMemoryFull, "two new pairs, room for one")
	delete(r.seen, "filler-0--r1")
	require.NoError(t, r.check(set), "two new pairs, room for two")
	r.record(set)
	assert.Len(t, r.seen, MaxRememberedRevisions)
	require.NoError(t, r.check(set), "a full memory still accepts what it holds")
	require.ErrorIs(t, r.check(compile(t, cfg, fixedWindow("p", 15), fixedWindow("z", 1))), ErrRevisionMemoryFull)
}
