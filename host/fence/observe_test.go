package fence

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tally is an Observer that counts outcomes.
type tally struct {
	mu sync.Mutex
	n  map[Outcome]int
}

func (c *tally) observe(o Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[Outcome]int{}
	}
	c.n[o]++
}

func (c *tally) counts() map[Outcome]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[Outcome]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// TestGuardObserverSeesEveryDecision: Admit and Do report each decision,
// rejections by their reason, exactly once each.
func TestGuardObserverSeesEveryDecision(t *testing.T) {
	var c tally
	g, err := NewGuard(7, 0, Strict, WithObserver(c.observe))
	require.NoError(t, err)
	assert.Equal(t, Admitted, g.Admit(Token{7, 5}))
	assert.Equal(t, Stale, g.Admit(Token{7, 5}), "Strict: an equal token is stale")
	assert.Equal(t, Stale, g.Admit(Token{7, 4}))
	assert.Equal(t, EpochRetired, g.Admit(Token{6, 9}))
	assert.Equal(t, EpochUnregistered, g.Admit(Token{8, 1}))
	assert.Equal(t, Invalid, g.Admit(Token{7, 0}))
	require.NoError(t, g.Do(Token{7, 6}, func() error { return nil }))
	require.ErrorIs(t, g.Do(Token{7, 6}, func() error { t.Error("a stale token's write ran"); return nil }), ErrStaleToken)
	require.NoError(t, g.Retire(7))
	assert.Equal(t, NotActive, g.Admit(Token{7, 9}))
	assert.Equal(t, map[Outcome]int{Admitted: 2, Stale: 3, EpochRetired: 1, EpochUnregistered: 1, Invalid: 1, NotActive: 1}, c.counts())

	// Without an observer nothing changes.
	plain, err := NewGuard(7, 0, Strict, nil)
	require.NoError(t, err)
	assert.Equal(t, Admitted, plain.Admit(Token{7, 1}))
}

// TestStoreObserverSeesEveryDecision: AdmitTx reports admissions and
// rejections (read back in the transaction) on every database; a call that
// reached no decision (a bad resource id) reports nothing.
func TestStoreObserverSeesEveryDecision(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		ctx := context.Background()
		var c tally
		s, err := NewStore(tdb.db, tdb.dialect, Strict, WithObserver(c.observe))
		require.NoError(t, err)
		require.NoError(t, s.CreateTable(ctx))
		createAccounts(t, tdb)
		reg := activeResource(t, s, "acct")
		b := Token{reg.Epoch, 6}
		require.NoError(t, s.Write(ctx, "acct", b, setValue("B", b)))
		require.ErrorIs(t, s.Write(ctx, "acct", Token{reg.Epoch, 5}, setValue("A", Token{reg.Epoch, 5})), ErrStaleToken)
		require.ErrorIs(t, s.Write(ctx, "acct", Token{reg.Epoch + 1, 9}, setValue("C", Token{reg.Epoch + 1, 9})), ErrEpochUnregistered)
		require.ErrorIs(t, s.Write(ctx, "nope", b, setValue("D", b)), ErrUnknownResource)
		require.ErrorIs(t, s.Write(ctx, "acct", Token{}, setValue("E", Token{})), ErrRange)
		require.Error(t, s.Write(ctx, "", b, setValue("F", b)))
		assert.Equal(t, map[Outcome]int{Admitted: 1, Stale: 1, EpochUnregistered: 1, UnknownResource: 1, Invalid: 1}, c.counts())
	})
}
