// Package procmem reads what the kernel says the current process holds, for
// tests that bound memory by measuring the process rather than trusting an
// engine's own accounting. It owns the /proc parsing (Linux only) and the
// settling loop that waits for finalizers to unmap compiled code; what is
// measured may change here, the bounds belong to the tests.
package procmem

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Mem is a reading of the process.
type Mem struct {
	RSS  int64 // VmRSS
	Exec int64 // resident bytes of anonymous executable mappings: compiled guest code
}

func (p Mem) String() string {
	return fmt.Sprintf("RSS %.1f MiB, executable %.1f MiB", MiB(p.RSS), MiB(p.Exec))
}

// MiB converts bytes to MiB for reports.
func MiB(n int64) float64 { return float64(n) / (1 << 20) }

// Read reads VmRSS from /proc/self/status and sums the Rss of every
// anonymous mapping with execute permission in /proc/self/smaps: wazero
// mmaps compiled code that way, while the test binary's own text is file
// backed.
func Read(tb testing.TB) Mem {
	tb.Helper()
	var p Mem
	p.RSS = statusKB(tb, "VmRSS:")
	f, err := os.Open("/proc/self/smaps")
	require.NoError(tb, err, "these memory bounds need Linux's /proc")
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
			p.Exec += parseKB(tb, v)
		}
	}
	require.NoError(tb, sc.Err())
	return p
}

// Settled collects garbage until compiled code whose module was closed is
// unmapped (wazero unmaps it from a finalizer, which needs a collection to
// run and then runs on its own goroutine), returns freed heap to the OS and
// reads the process: it waits up to 10 s for the executable total to stop
// shrinking.
func Settled(tb testing.TB) Mem {
	tb.Helper()
	prev := Read(tb)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		debug.FreeOSMemory()
		time.Sleep(50 * time.Millisecond)
		cur := Read(tb)
		if cur.Exec >= prev.Exec {
			// Two quiet rounds in a row: nothing was left to finalize.
			runtime.GC()
			debug.FreeOSMemory()
			time.Sleep(50 * time.Millisecond)
			if again := Read(tb); again.Exec >= cur.Exec {
				return again
			}
		}
		prev = cur
	}
	return Read(tb)
}

// ResetPeak resets the kernel's peak resident set (VmHWM) of the process to
// its current size (Linux: "5" to /proc/self/clear_refs).
func ResetPeak(tb testing.TB) {
	tb.Helper()
	require.NoError(tb, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0), "resetting the peak RSS needs Linux 4.0+")
}

// Peak reads VmHWM, the peak resident set since the last ResetPeak.
func Peak(tb testing.TB) int64 {
	tb.Helper()
	return statusKB(tb, "VmHWM:")
}

func statusKB(tb testing.TB, key string) int64 {
	tb.Helper()
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(tb, err, "these memory bounds need Linux's /proc")
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			return parseKB(tb, v)
		}
	}
	tb.Fatalf("no %s in /proc/self/status", key)
	return 0
}

func parseKB(tb testing.TB, v string) int64 {
	tb.Helper()
	n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	require.NoError(tb, err, "parsing %q", v)
	return n << 10
}
