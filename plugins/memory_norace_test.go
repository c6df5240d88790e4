//go:build !race

// Memory bounds are measured on the process (/proc/self), and only without
// the race detector, whose shadow memory and retained allocations would
// dwarf what these tests bound.

package plugins

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

// procMem is what the kernel says the process holds.
type procMem struct {
	rss  int64 // VmRSS
	exec int64 // resident bytes of anonymous executable mappings: compiled guest code
}

func (p procMem) String() string {
	return fmt.Sprintf("RSS %.1f MiB, executable %.1f MiB", mib(p.rss), mib(p.exec))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// readProcMem reads VmRSS from /proc/self/status and sums the Rss of every
// anonymous mapping with execute permission in /proc/self/smaps: wazero
// mmaps compiled code that way, while the test binary's own text is file
// backed.
func readProcMem(tb testing.TB) procMem {
	tb.Helper()
	var p procMem
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(tb, err, "these memory bounds need Linux's /proc")
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			p.rss = parseKB(tb, v)
		}
	}
	f, err := os.Open("/proc/self/smaps")
	require.NoError(tb, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	anonExec := false
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && len(fields[1]) == 4 {
			// A mapping header: range perms offset dev inode [path].
			anonExec = fields[1][2] == 'x' && fields[4] == "0" && len(fields) == 5
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok && anonExec {
			p.exec += parseKB(tb, v)
		}
	}
	require.NoError(tb, sc.Err())
	return p
}

func parseKB(tb testing.TB, v string) int64 {
	tb.Helper()
	n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	require.NoError(tb, err, "parsing %q", v)
	return n << 10
}

// settledMem collects garbage until compiled code whose module was closed is
// unmapped (wazero unmaps it from a finalizer, which needs a collection to
// run and then runs on its own goroutine), returns freed heap to the OS and
// reads the process: it waits up to 10 s for the executable total to stop
// shrinking.
func settledMem(tb testing.TB) procMem {
	tb.Helper()
	prev := readProcMem(tb)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		debug.FreeOSMemory()
		time.Sleep(50 * time.Millisecond)
		cur := readProcMem(tb)
		if cur.exec >= prev.exec {
			// Two quiet rounds in a row: nothing was left to finalize.
			runtime.GC()
			debug.FreeOSMemory()
			time.Sleep(50 * time.Millisecond)
			if again := readProcMem(tb); again.exec >= cur.exec {
				return again
			}
		}
		prev = cur
	}
	return readProcMem(tb)
}

// variants returns n distinct copies of the built guest name: each has a
// custom section of its own appended, which the guest never reads, so its
// digest and wazero's module ID (a hash of the whole binary) differ and each
// copy is compiled on its own, to the same code.
func variants(tb testing.TB, name string, n int) [][]byte {
	tb.Helper()
	out := make([][]byte, n)
	for i := range n {
		out[i] = appendCustomSection(wasmOf(tb, name), "caphost-test-variant", []byte(strconv.Itoa(i)))
	}
	return out
}

// appendCustomSection appends a custom section (id 0: name, then payload) to
// a module; custom sections may come after every other section.
func appendCustomSection(wasm []byte, name string, payload []byte) []byte {
	body := binary.AppendUvarint(nil, uint64(len(name)))
	body = append(append(body, name...), payload...)
	out := append(slices.Clip(wasm), 0)
	out = binary.AppendUvarint(out, uint64(len(body)))
	return append(out, body...)
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
		base := settledMem(t)
		m, err := e.Load(ctx, "rate", wasm, Limits{})
		require.NoError(t, err)
		_, err = m.RateSelect(ctx, proRead)
		require.NoError(t, err)
		one := readProcMem(t).exec - base.exec
		require.NoError(t, m.Close(ctx))
		t.Logf("one Go guest: %.1f MiB of executable memory", mib(one))
		require.Greater(t, one, int64(4<<20), "a Go guest compiles to megabytes; the measure is broken")
		return one
	}

	t.Run("engine", func(t *testing.T) {
		e := newEngine(t, Config{CacheDir: cacheDir})
		one := oneModule(t, e, good[0])
		base := settledMem(t)
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
		after := settledMem(t)
		t.Logf("before %v; after %d distinct modules loaded and closed and 2 refused: %v", base, len(closed), after)
		// Nothing is loaded any more: what may stay is less than one
		// module's worth, where keeping them would be all of them.
		assert.Less(t, after.exec-base.exec, one, "executable memory grew")
		assert.Less(t, after.rss-base.rss, 2*one+32<<20, "resident memory grew")
		runtime.KeepAlive(closed)
	})

	t.Run("manager", func(t *testing.T) {
		e := newEngine(t, Config{CacheDir: cacheDir})
		one := oneModule(t, e, good[0])
		mgr := NewManager(e, ManagerOptions{Verify: func(string, []byte) error { return nil }})
		t.Cleanup(func() { _ = mgr.Close(ctx) })
		base := settledMem(t)
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
		after := settledMem(t)
		t.Logf("before %v; after %d generations and 3 refused candidates: %v", base, len(good), after)
		// The generation serving stays, and a previous one may be kept for
		// rollback; keeping the others would be all of them.
		assert.Less(t, after.exec-base.exec, 3*one, "executable memory grew")
		assert.Less(t, after.rss-base.rss, 4*one+64<<20, "resident memory grew")
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

	base := settledMem(t)
	resetPeakRSS(t)
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
	peak := peakRSS(t)
	for _, err := range errs {
		ge := requireClass(t, err, ClassTrap)
		assert.Contains(t, ge.Detail, "stack overflow")
	}
	after := settledMem(t)
	t.Logf("before %v; %d concurrent overflows at %d KiB: peak RSS %.1f MiB, then %v",
		base, pool, stack>>10, mib(peak), after)
	// The stacks (at most 1.5 × the limit each, at once), plus a generous
	// allowance for the Go heap and the discarded instances' replacements.
	const slack = 64 << 20
	assert.Less(t, peak-base.rss, pool*3*stack/2+slack, "peak resident memory")
	assert.Less(t, after.rss-base.rss, int64(slack), "resident memory after the overflows")
	require.NoError(t, recurse(100), "the module serves again")
}

// resetPeakRSS resets the kernel's peak resident set (VmHWM) of the process
// to its current size (Linux: "5" to /proc/self/clear_refs).
func resetPeakRSS(tb testing.TB) {
	tb.Helper()
	require.NoError(tb, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0), "resetting the peak RSS needs Linux 4.0+")
}

// peakRSS reads VmHWM, the peak resident set since the last resetPeakRSS.
func peakRSS(tb testing.TB) int64 {
	tb.Helper()
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(tb, err)
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return parseKB(tb, v)
		}
	}
	tb.Fatal("no VmHWM in /proc/self/status")
	return 0
}
