package transport_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPluginExitsWithItsHost: a host killed with SIGKILL cannot stop its
// plugins; each plugin notices it was re-parented and exits by itself,
// and takes the process it serves from (in namespaces of its own) along.
func TestPluginExitsWithItsHost(t *testing.T) {
	path, sum := pluginBin(t, "file")
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), "CAPHOST_TRANSPORT_TEST_HOST=1", "CAPHOST_TRANSPORT_TEST_BIN="+path,
		"CAPHOST_TRANSPORT_TEST_SHA256="+sum, "CAPHOST_TRANSPORT_TEST_DIR="+t.TempDir())
	out, err := host.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, host.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, "host said %q", line)
	require.True(t, alive(pid))
	kids, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(pid), "children"))
	require.NoError(t, err)
	pids := []int{pid}
	for _, f := range strings.Fields(string(kids)) {
		kid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, kid)
	}
	require.Len(t, pids, 2, "the plugin serves from a process of its own, in new namespaces")

	require.NoError(t, host.Process.Kill())
	_ = host.Wait()
	// Waits for the exit; the minute is a bound on a hung test.
	deadline := time.Now().Add(time.Minute)
	for _, pid := range pids {
		for alive(pid) {
			require.True(t, time.Now().Before(deadline), "plugin %d still running a minute after its host died", pid)
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}
