//go:build !race

// Memory bounds are measured on the process (/proc/self), and only without
// the race detector, whose shadow memory would dwarf what they bound.

package extism

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/procmem"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/testdata/guests/handbuilt"
)

// TestDistinctExtismModulesAreFreed: the Extism flavour releases the
// machine code of every distinct module it closed, replaced or refused, as
// the native one does. The Extism SDK compiled the kernel and the user
// module into the shared compilation cache and its CompiledPlugin.Close
// closed only the runtime, so each distinct module's code stayed mapped
// (third_party/extism-patches/0002-close-compiled-modules.patch).
func TestDistinctExtismModulesAreFreed(t *testing.T) {
	ctx := context.Background()
	const n = 4
	variant := func(name string, i int) []byte {
		return handbuilt.WithCustomSection(th.wasm[name], "caphost-test-variant", []byte(strconv.Itoa(i)))
	}
	lim := plugins.Limits{Grants: plugins.AllGrants, CallTimeout: 5 * time.Second}
	req := &abi.RateSelectRequest{Route: "/orders", Method: "GET", APIKeyPlan: "pro"}

	e := newExtism(t, plugins.Config{})
	// What one Go-Extism guest's code takes: load, call, close.
	base := procmem.Settled(t)
	m, err := e.Load(ctx, "rate", variant("rate-policy-extism", -1), lim)
	require.NoError(t, err)
	_, err = m.RateSelect(ctx, req)
	require.NoError(t, err)
	one := procmem.Read(t).Exec - base.Exec
	require.NoError(t, m.Close(ctx))
	t.Logf("one Go-Extism guest: %.1f MiB of executable memory", procmem.MiB(one))
	require.Greater(t, one, int64(4<<20), "a Go guest compiles to megabytes; the measure is broken")

	t.Run("engine", func(t *testing.T) {
		base := procmem.Settled(t)
		var closed []*Module // kept: a closed Module must not pin its code
		for i := range n {
			m, err := e.Load(ctx, "rate", variant("rate-policy-extism", i), lim)
			require.NoError(t, err)
			_, err = m.RateSelect(ctx, req)
			require.NoError(t, err)
			require.NoError(t, m.Close(ctx))
			closed = append(closed, m)
		}
		after := procmem.Settled(t)
		t.Logf("before %v; after %d distinct modules loaded and closed: %v", base, n, after)
		assert.Less(t, after.Exec-base.Exec, one, "executable memory grew")
		assert.Less(t, after.RSS-base.RSS, 2*one+32<<20, "resident memory grew")
		runtime.KeepAlive(closed)
	})

	t.Run("manager", func(t *testing.T) {
		mgr := plugins.NewManager(newNative(t, plugins.Config{}), plugins.ManagerOptions{
			Verify: plugins.AcceptAnyModule, Extism: e})
		t.Cleanup(func() { _ = mgr.Close(ctx) })
		base := procmem.Settled(t)
		require.NoError(t, mgr.Load(ctx, "rate", variant("rate-policy-extism", 100), lim))
		for i := 1; i < n; i++ {
			_, err := mgr.Swap(ctx, "rate", variant("rate-policy-extism", 100+i))
			require.NoError(t, err)
			// A candidate refused at conformance after it was compiled.
			_, err = mgr.Swap(ctx, "rate", variant("wrongans-extism", i))
			var se *plugins.SwapError
			require.ErrorAs(t, err, &se)
			require.Equal(t, plugins.StageConformance, se.Stage, "%v", err)
		}
		after := procmem.Settled(t)
		t.Logf("before %v; after %d generations and %d refused candidates: %v", base, n, n-1, after)
		// The generation serving and the one kept for rollback stay.
		assert.Less(t, after.Exec-base.Exec, 3*one, "executable memory grew")
		assert.Less(t, after.RSS-base.RSS, 4*one+64<<20, "resident memory grew")
	})
}
