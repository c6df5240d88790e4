//go:build !race

// Memory bounds are measured on the process (/proc/self), and only without
// the race detector, whose shadow memory and retained allocations would
// dwarf what these tests bound.

package plugins

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/procmem"
	"github.com/caphost/caphost/testdata/guests/handbuilt"
)

// variants returns n distinct copies of the built guest name: each has a
// custom section of its own appended, which the guest never reads, so its
// digest and wazero's module ID (a hash of the whole binary) differ and each
// copy is compiled on its own, to the same code.
func variants(tb testing.TB, name string, n int) [][]byte {
	tb.Helper()
	out := make([][]byte, n)
	for i := range n {
		out[i] = handbuilt.WithCustomSection(wasmOf(tb, name), "caphost-test-variant", []byte(strconv.Itoa(i)))
	}
	return out
}

// distinctCount is how many distinct modules each leak test cycles through:
// keeping their code (12.5 MiB per Go guest, measured) puts the growth far
// above the bounds, and compiling them takes seconds.
const distinctCount = 4

// TestDistinctModulesAreFreed: every distinct module that is closed, replaced
// or refused releases its machine code and instances, loaded directly
// through the Engine or swapped through the Manager with its full pipeline.
// What stays is what still serves. Measured before the fix (one run): the
// engine case left 8 of 8 Go guests' code mapped; the manager case, after 8
// generations and 8 refused candidates, executable memory 0 → 200.7 MiB and
// RSS 125 → 388 MiB. After: executable 0 → 0 and 12.5 MiB (the generation
// serving), RSS unchanged.
func TestDistinctModulesAreFreed(t *testing.T) {
	ctx := context.Background()
	good := variants(t, "rate-policy", distinctCount)
	atStart := variants(t, "abimajor", 1)   // instantiated, refused at describe
	atImports := variants(t, "fsimport", 1) // compiled, refused before instantiation
	atConformance := variants(t, "trap", 1) // loaded, refused by the Manager's suite
	cacheDir := t.TempDir()                 // compiled once, then loaded from the file cache like a restart

	// oneModule measures what one Go guest's code takes: load, call, close.
	oneModule := func(t *testing.T, e *Engine, wasm []byte) int64 {
		base := procmem.Settled(t)
		m, err := e.Load(ctx, "rate", wasm, Limits{})
		require.NoError(t, err)
		_, err = m.RateSelect(ctx, proRead)
		require.NoError(t, err)
		one := procmem.Read(t).Exec - base.Exec
		require.NoError(t, m.Close(ctx))
		t.Logf("one Go guest: %.1f MiB of executable memory", procmem.MiB(one))
		require.Greater(t, one, int64(4<<20), "a Go guest compiles to megabytes; the measure is broken")
		return one
	}

	t.Run("engine", func(t *testing.T) {
		e := newEngine(t, Config{CacheDir: cacheDir})
		one := oneModule(t, e, good[0])
		base := procmem.Settled(t)
		var closed []*Module // kept: a closed Module must not pin its code
		for i, wasm := range good {
			m, err := e.Load(ctx, "rate", wasm, Limits{})
			require.NoError(t, err)
			_, err = m.RateSelect(ctx, proRead)
			require.NoError(t, err)
			require.NoError(t, m.Close(ctx))
			closed = append(closed, m)
			if i == 0 {
				_, err = e.Load(ctx, "abi", atStart[i], Limits{})
				requireClass(t, err, ClassABIMismatch)
				_, err = e.Load(ctx, "fs", atImports[i], Limits{})
				requireClass(t, err, ClassForbiddenImport)
			}
		}
		after := procmem.Settled(t)
		t.Logf("before %v; after %d distinct modules loaded and closed and 2 refused: %v", base, len(closed), after)
		// Nothing is loaded any more: what may stay is less than one
		// module's worth, where keeping them would be all of them.
		assert.Less(t, after.Exec-base.Exec, one, "executable memory grew")
		assert.Less(t, after.RSS-base.RSS, 2*one+32<<20, "resident memory grew")
		runtime.KeepAlive(closed)
	})

	t.Run("manager", func(t *testing.T) {
		e := newEngine(t, Config{CacheDir: cacheDir})
		one := oneModule(t, e, good[0])
		mgr := NewManager(e, ManagerOptions{Verify: func(string, []byte) error { return nil }})
		t.Cleanup(func() { _ = mgr.Close(ctx) })
		base := procmem.Settled(t)
		require.NoError(t, mgr.Load(ctx, "rate", good[0], Limits{}))
		for i, wasm := range good[1:] {
			_, err := mgr.Swap(ctx, "rate", wasm)
			require.NoError(t, err)
			require.NoError(t, mgr.Use(ctx, "rate", func(m Guest) error {
				_, err := RateSelect(ctx, m, proRead)
				return err
			}))
			if i == 0 {
				_, err = mgr.Swap(ctx, "rate", atConformance[i])
				var se *SwapError
				require.ErrorAs(t, err, &se)
				require.Equal(t, StageConformance, se.Stage, "%v", err)
				_, err = mgr.Swap(ctx, "rate", atStart[i])
				requireClass(t, err, ClassABIMismatch)
				_, err = mgr.Swap(ctx, "rate", atImports[i])
				requireClass(t, err, ClassForbiddenImport)
			}
		}
		after := procmem.Settled(t)
		t.Logf("before %v; after %d generations and 3 refused candidates: %v", base, len(good), after)
		// The generation serving stays, and a previous one may be kept for
		// rollback; keeping the others would be all of them.
		assert.Less(t, after.Exec-base.Exec, 3*one, "executable memory grew")
		assert.Less(t, after.RSS-base.RSS, 4*one+64<<20, "resident memory grew")
	})
}

// TestConcurrentStackOverflowsStayBounded: a guest that recurses without end
// on some inputs fails closed (a trap) on each, and with its pool's every
// instance overflowing at once the host's resident memory stays within a
// small multiple of the module's limits: each call's stack is at most
// MaxStackBytes, plus half of it while it is copied to its last size.
// Measured before the stack limit (wazero's own ceiling, about 84 MB per
// stack): four concurrent overflows raised the peak RSS by about 500 MiB.
func TestConcurrentStackOverflowsStayBounded(t *testing.T) {
	const pool = 4
	m := load(t, newEngine(t, Config{}), "recursion", Limits{MemoryPages: 256, PoolSize: pool, CallTimeout: 10 * time.Second})
	stack := int64(m.Limits().MaxStackBytes)
	warmPool(t, m)
	recurse := func(n byte) error {
		_, err := m.CodecEncode(context.Background(), &abi.CodecEncodeRequest{Schema: "x", Value: []byte{n}})
		return err
	}
	require.NoError(t, recurse(100))

	base := procmem.Settled(t)
	procmem.ResetPeak(t)
	errs := make([]error, pool)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range pool {
		wg.Go(func() {
			<-start
			errs[i] = recurse(0xff)
		})
	}
	close(start)
	wg.Wait()
	peak := procmem.Peak(t)
	for _, err := range errs {
		ge := requireClass(t, err, ClassTrap)
		assert.Contains(t, ge.Detail, "stack overflow")
	}
	after := procmem.Settled(t)
	t.Logf("before %v; %d concurrent overflows at %d KiB: peak RSS %.1f MiB, then %v",
		base, pool, stack>>10, procmem.MiB(peak), after)
	// The stacks (at most 1.5 × the limit each, at once), plus a generous
	// allowance for the Go heap and the discarded instances' replacements.
	const slack = 64 << 20
	assert.Less(t, peak-base.RSS, pool*3*stack/2+slack, "peak resident memory")
	assert.Less(t, after.RSS-base.RSS, int64(slack), "resident memory after the overflows")
	require.NoError(t, recurse(100), "the module serves again")
}
