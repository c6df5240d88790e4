package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func shaOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestManagerZeroOptionsAreSafe: a Manager built from zero options refuses
// every module (no verifier), at the verify stage, and leaves no entry; one
// given only a verifier runs the self-test and the conformance suite, so a
// nondeterministic guest is refused there.
func TestManagerZeroOptionsAreSafe(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t, Config{})
	rec := newSwapRec()
	mgr := NewManager(e, ManagerOptions{Observer: rec})
	t.Cleanup(func() { _ = mgr.Close(ctx) })
	err := mgr.Load(ctx, "rate", wasmOf(t, "rate-policy"), Limits{})
	require.ErrorIs(t, err, ErrNoVerifier)
	var se *SwapError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, StageVerify, se.Stage)
	assert.Empty(t, mgr.Status())
	assert.Equal(t, 1, rec.failed["verify"])

	checked := NewManager(e, ManagerOptions{Verify: AcceptAnyModule})
	t.Cleanup(func() { _ = checked.Close(ctx) })
	err = checked.Load(ctx, "rate", wasmOf(t, "ratebad"), Limits{CallTimeout: 5 * time.Second})
	require.ErrorIs(t, err, ErrConformance, "checks run unless skipped")
	require.NoError(t, checked.Load(ctx, "rate", wasmOf(t, "rate-policy"), Limits{}))
}

// TestManagerRollback: Rollback restores the kept generation as a new one
// after the capability stage accepts it again (with a context and the
// kept module as the candidate); a refusal there, or an id another module
// claimed meanwhile, leaves the current generation serving and the kept
// one kept. The kept module holds no idle instance once drained, and
// every module is closed with the manager.
func TestManagerRollback(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var refuse error
	var seen []string // module:first policy of each candidate the capability stage saw
	errPolicy := errors.New("the policy set moved on")
	mgr := NewManager(newEngine(t, Config{}), ManagerOptions{Verify: AcceptAnyModule, SkipSelfTest: true,
		Check: func(ctx context.Context, module string, g Guest) error {
			assert.NotNil(t, ctx)
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, module+":"+g.Description().RatePolicies[0].ID)
			return refuse
		}})
	v1, v2 := wasmOf(t, "rate-policy"), wasmOf(t, "ratev2")
	lim := Limits{CallTimeout: 5 * time.Second}
	require.NoError(t, mgr.Load(ctx, "rate", v1, lim))
	answers := func() string {
		t.Helper()
		var id string
		require.NoError(t, mgr.Use(ctx, "rate", func(g Guest) error {
			resp, err := RateSelect(ctx, g, proRead)
			if err == nil {
				id = resp.Selections[0].PolicyID
			}
			return err
		}))
		return id
	}
	_, err := mgr.Rollback(ctx, "rate")
	require.ErrorIs(t, err, ErrNoPrevious)
	_, err = mgr.Rollback(ctx, "nope")
	require.ErrorIs(t, err, ErrUnknownModule)

	_, err = mgr.Swap(ctx, "rate", v2)
	require.NoError(t, err)
	st := mgr.Status()[0]
	assert.Equal(t, uint64(2), st.Generation)
	assert.Equal(t, uint64(1), st.Previous)
	assert.Equal(t, shaOf(v1), st.PreviousSHA256)
	assert.Equal(t, FlavourNative, st.Flavour)
	kept := mgr.slots["rate"].prev.Load().h.mod.(*Module)
	assert.Zero(t, len(kept.idle), "the kept generation drained and was trimmed")

	mu.Lock()
	refuse = errPolicy
	mu.Unlock()
	_, err = mgr.Rollback(ctx, "rate")
	require.ErrorIs(t, err, errPolicy)
	var se *SwapError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, StageCapability, se.Stage)
	st = mgr.Status()[0]
	assert.Equal(t, uint64(2), st.Generation, "the current generation keeps serving")
	assert.Equal(t, uint64(1), st.Previous, "and the kept one stays kept")
	assert.False(t, st.LastSwap.OK)
	assert.Equal(t, "swap.v2", answers())

	mu.Lock()
	refuse = nil
	mu.Unlock()
	res, err := mgr.Rollback(ctx, "rate")
	require.NoError(t, err)
	assert.Equal(t, SwapResult{Module: "rate", From: 2, To: 3, SHA256: shaOf(v1), Flavour: FlavourNative, Restored: 1}, SwapResult{
		Module: res.Module, From: res.From, To: res.To, SHA256: res.SHA256, Flavour: res.Flavour, Restored: res.Restored})
	assert.Equal(t, "pro.read", answers())
	assert.Same(t, kept, mgr.slots["rate"].cur.Load().h.mod, "the kept module serves again: nothing was loaded")
	st = mgr.Status()[0]
	assert.Equal(t, uint64(2), st.Previous)
	assert.Equal(t, shaOf(v2), st.PreviousSHA256)

	// Another module claims generation 2's ids while 3 serves: rolling
	// back to 2 would duplicate them.
	res, err = mgr.Rollback(ctx, "rate")
	require.NoError(t, err, "undo the rollback: 4 is v2 again")
	assert.Equal(t, uint64(2), res.Restored)
	_, err = mgr.Swap(ctx, "rate", v1) // 5: v1, keeping 4 (v2)
	require.NoError(t, err)
	require.NoError(t, mgr.Load(ctx, "other", v2, lim))
	_, err = mgr.Rollback(ctx, "rate")
	require.ErrorIs(t, err, ErrDuplicateID)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, StageDuplicateID, se.Stage)
	assert.Equal(t, uint64(5), mgr.Status()[1].Generation)
	assert.Equal(t, "pro.read", answers())

	mu.Lock()
	assert.Equal(t, []string{"rate:free.read", "rate:swap.v2", "rate:free.read", "rate:free.read", "rate:swap.v2",
		"rate:free.read", "other:swap.v2"}, seen,
		"loads, swaps and rollbacks pass the capability stage; a duplicate is refused before it")
	mu.Unlock()

	prev := mgr.slots["rate"].prev.Load().h.mod.(*Module)
	cur := mgr.slots["rate"].cur.Load().h.mod.(*Module)
	require.NoError(t, mgr.Close(ctx))
	for _, m := range []*Module{prev, cur, kept} {
		assert.True(t, m.closed(), "every module closes with the manager")
	}
}
