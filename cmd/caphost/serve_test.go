package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/internal/redistest"
)

const (
	serveAdminToken = "serve-admin-token-0123456789"
	serveHMAC       = "serve-test-hmac-key-0123456789abcdefghijklmnop"
)

func serveConfig(t *testing.T, redisAddr, listen, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "caphost.yaml")
	yaml := fmt.Sprintf(`redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      client-name: caphost-serve-test
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    coordination: {deployment: main, required: true, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/SERVE_HMAC"}
capabilities:
  rate-limit:
    provider: redis
    redis-role: coordination
    policies:
      per-key:
        revision: r1
        algorithm: fixed-window
        limit: 100
        # 30 days: the counts a test compares never straddle two windows
        window: 720h
        failure-mode: fail-closed
        subject: [api-key]
server:
  listen: %q
%s`, redisAddr, listen, extra)
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	return path
}

func serveEnv(k string) (string, bool) {
	switch k {
	case "SERVE_HMAC":
		return serveHMAC, true
	case "SERVE_ADMIN_TOKEN":
		return serveAdminToken, true
	case "SERVE_SHORT_TOKEN":
		return "short", true
	}
	return "", false
}

func freeListen(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestServeGracefulShutdown: serve answers evaluations; on cancellation
// (SIGINT/SIGTERM in main) it stops accepting, lets a request that was in
// flight finish against Redis, then closes Redis and exits 0.
func TestServeGracefulShutdown(t *testing.T) {
	srv := redistest.StartStandalone(t)
	listen := freeListen(t)
	cfg := serveConfig(t, srv.Addr(), listen, `  admin-token: "secret://env/SERVE_ADMIN_TOKEN"`+"\n")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr logtest.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- runWith(ctx, []string{"serve", "--config", cfg, "--drain-timeout", "5s"}, &stdout, &stderr, config.WithEnv(serveEnv))
	}()
	base := "http://" + listen
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 15*time.Second, 50*time.Millisecond, stderr.String())

	body := `{"subject":{"api-key":"client-secret-key"},"policy":"per-key"}`
	resp, err := http.Post(base+"/v1/ratelimit/evaluate", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
	assert.Contains(t, string(out), `"allowed":true`)

	// The admin surface is on (token configured) and guarded.
	resp, err = http.Get(base + "/admin/guests")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// An in-flight request: headers and half the body sent before shutdown.
	// The server's "100 Continue" (sent when the handler first reads the
	// body) proves the handler is running before the shutdown starts.
	conn, err := net.Dial("tcp", listen)
	require.NoError(t, err)
	defer conn.Close()
	br := bufio.NewReader(conn)
	half := len(body) / 2
	_, err = fmt.Fprintf(conn, "POST /v1/ratelimit/evaluate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body))
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 100 Continue\r\n", status)
	blank, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "\r\n", blank)
	_, err = io.WriteString(conn, body[:half])
	require.NoError(t, err)

	cancel()
	// Shutdown closes the listener first: new connections are refused.
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", listen, 100*time.Millisecond)
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	}, 5*time.Second, 20*time.Millisecond)
	select {
	case code := <-exited:
		t.Fatalf("serve exited (%d) with a request in flight", code)
	default:
	}

	// The in-flight request completes, and still reaches Redis.
	_, err = io.WriteString(conn, body[half:])
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(br, nil)
	require.NoError(t, err)
	out, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m))
	assert.Equal(t, "evaluated", m["kind"], string(out))
	assert.Equal(t, true, m["allowed"])
	assert.EqualValues(t, 98, m["remaining"], "the drained request was counted in Redis")

	select {
	case code := <-exited:
		assert.Equal(t, 0, code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit after the drain")
	}

	// Redis was closed: none of caphost's connections remain.
	clients, err := srv.Admin().ClientList(context.Background()).Result()
	require.NoError(t, err)
	assert.NotContains(t, clients, "caphost-serve-test")

	logs := stderr.String()
	for _, want := range []string{`"msg":"serving"`, `"msg":"shutting down"`, `"msg":"stopped cleanly"`} {
		assert.Contains(t, logs, want)
	}
	for _, secret := range []string{serveAdminToken, serveHMAC, "client-secret-key"} {
		assert.NotContains(t, logs+stdout.String(), secret)
	}
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		assert.True(t, json.Valid([]byte(l)), "log lines are JSON: %s", l)
	}
}

func TestServeRefusesBadStart(t *testing.T) {
	listen := freeListen(t)
	// Validation problems are listed, exit 1, nothing started.
	bad := serveConfig(t, "127.0.0.1:1", listen, "  bogus: 1\n")
	var stdout, stderr logtest.Buffer
	code := runWith(context.Background(), []string{"serve", "--config", bad}, &stdout, &stderr, config.WithEnv(serveEnv))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "server.bogus")

	// A guessable admin token is refused.
	short := serveConfig(t, "127.0.0.1:1", listen, `  admin-token: "secret://env/SERVE_SHORT_TOKEN"`+"\n")
	stderr = logtest.Buffer{}
	code = runWith(context.Background(), []string{"serve", "--config", short}, &stdout, &stderr, config.WithEnv(serveEnv))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "shorter than 16 bytes")
	assert.NotContains(t, stderr.String(), "short\n")

	// The listen address is taken: exit 1 and the host is closed again.
	l, err := net.Listen("tcp", listen)
	require.NoError(t, err)
	defer l.Close()
	srv := redistest.StartStandalone(t)
	busy := serveConfig(t, srv.Addr(), listen, "")
	stderr = logtest.Buffer{}
	code = runWith(context.Background(), []string{"serve", "--config", busy}, &stdout, &stderr, config.WithEnv(serveEnv))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "listen "+listen)

	code = runWith(context.Background(), []string{"serve"}, &stdout, &stderr)
	assert.Equal(t, 2, code)
	code = runWith(context.Background(), []string{"serve", "--config", busy, "--drain-timeout", "0s"}, &stdout, &stderr)
	assert.Equal(t, 2, code)
}
