package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// testSecrets is what the service reads from its environment.
var testSecrets = map[string]string{
	"HELLO_APP_PASS":   "app-8c1f0e5a2b",
	"HELLO_ADMIN_PASS": "admin-41d7a9c3e6",
	"HELLO_KEY_V1":     "k1-0123456789abcdef0123456789abcdef",
}

const endpointEnv = "CAPHOST_REDIS__DEPLOYMENTS__MAIN__STANDALONE__ENDPOINT"

func lookup(extra map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if v, ok := extra[k]; ok {
			return v, true
		}
		v, ok := testSecrets[k]
		return v, ok
	}
}

// The file and the code path are one configuration: same Redis model, same
// capability block. This also proves the endpoint override the service test
// relies on, before any process could dial the file's 127.0.0.1:6379.
func TestFileAndCodeConfigurationsAgree(t *testing.T) {
	ctx := context.Background()
	const addr = "127.0.0.1:1"
	file, err := config.Load(ctx, "caphost.yaml", config.WithEnv(lookup(map[string]string{endpointEnv: addr})))
	require.NoError(t, err)
	code, err := builtinConfig(ctx, addr, config.WithEnv(lookup(nil)))
	require.NoError(t, err)
	assert.Equal(t, &policy.Standalone{Endpoint: addr}, file.Redis.Deployments["main"].Topology)
	assert.Equal(t, file.Redis, code.Redis)
	assert.Equal(t, file.Capabilities, code.Capabilities)
}

// aclLines returns the ACL SETUSER lines caphost.yaml documents, with the
// password variables filled in.
func aclLines(t *testing.T) [][]any {
	t.Helper()
	f, err := os.Open("caphost.yaml")
	require.NoError(t, err)
	defer f.Close()
	var out [][]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(sc.Text(), "#")), "ACL SETUSER ")
		if !ok {
			continue
		}
		args := []any{"ACL", "SETUSER"}
		for _, w := range strings.Fields(os.Expand(l, func(k string) string { return testSecrets[k] })) {
			args = append(args, w)
		}
		out = append(out, args)
	}
	require.NoError(t, sc.Err())
	require.Len(t, out, 2, "caphost.yaml documents two users")
	return out
}

// TestEmbeddedService builds the example and runs it both ways against a
// private Redis configured with exactly the users caphost.yaml documents:
// requests until a 429, the headers a client sees, and a clean stop.
func TestEmbeddedService(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the test builds the example: install Go 1.26+ and put it on PATH")
	bin := filepath.Join(t.TempDir(), "embedded")
	b, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", b)

	for _, mode := range []string{"file", "code"} {
		t.Run(mode, func(t *testing.T) {
			s := redistest.StartStandalone(t, redistest.WithACL())
			for _, args := range aclLines(t) {
				require.NoError(t, s.Admin().Do(context.Background(), args...).Err())
			}
			args := []string{"-listen", "127.0.0.1:0", "-redis", s.Addr()}
			env := os.Environ()
			for k, v := range testSecrets {
				env = append(env, k+"="+v)
			}
			if mode == "file" {
				args = append(args, "-config", "caphost.yaml")
				env = append(env, endpointEnv+"="+s.Addr())
			}
			svc := start(t, bin, env, args...)
			base := "http://" + svc.addr
			require.Eventually(t, func() bool { return status(t, base+"/readyz") == http.StatusOK }, 20*time.Second, 50*time.Millisecond)

			// The bucket holds 5 and refills one every 12 s: a client asking
			// faster than that is denied within a few requests, however slow
			// the machine.
			var allowed int
			var denied *http.Response
			for i := 0; i < 50 && denied == nil; i++ {
				resp := get(t, base+"/hello")
				assert.Equal(t, "5", resp.Header.Get("RateLimit-Limit"))
				assert.NotEmpty(t, resp.Header.Get("RateLimit-Reset"))
				switch resp.StatusCode {
				case http.StatusOK:
					if allowed == 0 {
						assert.Equal(t, "4", resp.Header.Get("RateLimit-Remaining"), "the first request leaves 4 of 5")
					}
					assert.Empty(t, resp.Header.Get("Retry-After"))
					allowed++
				case http.StatusTooManyRequests:
					denied = resp
				default:
					require.Failf(t, "unexpected status", "%d", resp.StatusCode)
				}
			}
			require.NotNil(t, denied, "no 429 after 50 requests")
			assert.GreaterOrEqual(t, allowed, 5)
			assert.Equal(t, "0", denied.Header.Get("RateLimit-Remaining"))
			retry, err := strconv.Atoi(denied.Header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After is whole seconds")
			assert.True(t, retry >= 1 && retry <= 12, "Retry-After %d: one token refills every 12 s", retry)

			svc.stop(t)
			assert.Contains(t, svc.output(), `"msg":"caphost closed"`)
			assert.ErrorIs(t, syscall.Kill(-svc.cmd.Process.Pid, 0), syscall.ESRCH, "a process of the service is still running")
			assert.Eventually(t, func() bool { return s.ConnectedClients(t) == 0 }, 10*time.Second, 50*time.Millisecond,
				"connections left open")
			denials, err := s.Admin().Do(context.Background(), "ACL", "LOG").Slice()
			require.NoError(t, err)
			assert.Empty(t, denials, "ACL LOG: the documented users lack a permission the service used")
			for _, v := range testSecrets {
				assert.NotContains(t, svc.output(), v, "a secret reached the log")
			}
		})
	}
}

// service is the running example.
type service struct {
	cmd  *exec.Cmd
	addr string
	done chan error

	mu  sync.Mutex
	out strings.Builder
}

func start(t *testing.T, bin string, env []string, args ...string) *service {
	t.Helper()
	svc := &service{cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	svc.cmd.Env = env
	svc.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := svc.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, svc.cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-svc.cmd.Process.Pid, syscall.SIGKILL) })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			svc.mu.Lock()
			svc.out.WriteString(sc.Text() + "\n")
			svc.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				addr <- rec.Addr
			}
		}
		svc.done <- svc.cmd.Wait()
	}()
	select {
	case svc.addr = <-addr:
	case err := <-svc.done:
		t.Fatalf("the service exited during start-up (%v):\n%s", err, svc.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("the service did not listen within 60 s:\n%s", svc.output())
	}
	return svc
}

// stop sends SIGTERM and requires a clean exit.
func (s *service) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-s.done:
		require.NoError(t, err, "exit after SIGTERM:\n%s", s.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30 s of SIGTERM:\n%s", s.output())
	}
}

func (s *service) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
