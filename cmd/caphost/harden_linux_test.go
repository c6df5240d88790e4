package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const hardenChildEnv = "CAPHOST_TEST_HARDEN_CHILD"

// TestHardenProcessHidesTheEnvironment: a process of the same user (as a
// transport plugin is) can read a dumpable process's /proc/<pid>/environ,
// and cannot once hardenProcess ran. Both sides run under one unprivileged
// user: nobody (65534) when the test runs as root, which could read
// anything, else the test's own user.
func TestHardenProcessHidesTheEnvironment(t *testing.T) {
	if mode := os.Getenv(hardenChildEnv); mode != "" {
		hardenChild(mode)
		return
	}
	const secret = "CAPHOST_TEST_SECRET=s3cr3t-in-the-environment"
	bin, cred := sameUserSetup(t)
	for _, c := range []struct {
		mode     string
		readable bool
	}{{"dumpable", true}, {"hardened", false}} {
		t.Run(c.mode, func(t *testing.T) {
			child := exec.Command(bin, "-test.run=^TestHardenProcessHidesTheEnvironment$")
			child.Env = []string{hardenChildEnv + "=" + c.mode, secret}
			child.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			stdin, err := child.StdinPipe()
			require.NoError(t, err)
			stdout, err := child.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, child.Start())
			t.Cleanup(func() { _ = stdin.Close(); _ = child.Wait() })
			line, err := bufio.NewReader(stdout).ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "ready "+c.mode+"\n", line)

			reader := exec.Command("/bin/cat", fmt.Sprintf("/proc/%d/environ", child.Process.Pid))
			reader.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			out, err := reader.CombinedOutput()
			if c.readable {
				require.NoError(t, err, "%s", out)
				assert.Contains(t, string(out), secret, "the control: a same-user process reads a dumpable one")
				return
			}
			require.Error(t, err)
			assert.Contains(t, string(out), "Permission denied")
			assert.NotContains(t, string(out), "s3cr3t")
		})
	}
}

// hardenChild is the target process: optionally hardened, then waiting
// for its stdin to close.
func hardenChild(mode string) {
	if mode == "hardened" {
		if err := hardenProcess(); err != nil {
			fmt.Println("harden:", err)
			os.Exit(1)
		}
	}
	fmt.Println("ready " + mode)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// sameUserSetup returns a copy of the test binary that the unprivileged
// user can run, and that user's credential (nil: the test's own).
func sameUserSetup(t *testing.T) (string, *syscall.Credential) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	if os.Getuid() != 0 {
		return self, nil
	}
	dir, err := os.MkdirTemp("", "caphost-harden-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "caphost.test")
	b, err := os.ReadFile(self)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	for d := dir; d != "/"; d = filepath.Dir(d) {
		info, err := os.Stat(d)
		require.NoError(t, err)
		require.NotZero(t, info.Mode().Perm()&0o001, "%s must be searchable by user nobody (set TMPDIR to one that is)", d)
	}
	return bin, &syscall.Credential{Uid: 65534, Gid: 65534}
}
