package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/runtime/programs"
)

// wrongLibrary starts a server holding a Functions library under the
// catalog's name whose info function reports another digest (an older or
// foreign release), and a serve configuration in functions-provisioned
// mode for it.
func wrongLibrary(t *testing.T, listen, startup string) (cfgPath, redisAddr, badDigest, wantDigest string) {
	t.Helper()
	srv := redistest.StartStandalone(t)
	cat, err := programs.Load()
	require.NoError(t, err)
	_, code, want := cat.Library()
	sum := sha256.Sum256([]byte("an older release"))
	bad := hex.EncodeToString(sum[:])
	require.NoError(t, srv.Admin().FunctionLoadReplace(context.Background(), strings.Replace(code, want, bad, 1)).Err())
	path := serveConfig(t, srv.Addr(), listen, "")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	y := strings.Replace(string(b), "programs: {mode: evalsha-managed}", "programs: {mode: functions-provisioned}\n  startup: "+startup, 1)
	require.NoError(t, os.WriteFile(path, []byte(y), 0o600))
	return path, srv.Addr(), bad, want
}

// TestServeWrongDigestStaysNotReady: `caphost serve` against a Redis with
// the wrong program digest serves /livez but stays not ready, and /readyz
// names the digest it found and the one it wants, as a misconfiguration.
func TestServeWrongDigestStaysNotReady(t *testing.T) {
	listen := freeListen(t)
	cfg, redisAddr, bad, want := wrongLibrary(t, listen, "{on-failure: retry, retry-initial: 50ms, retry-max: 200ms}")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr logtest.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- runWith(ctx, []string{"serve", "--config", cfg}, &stdout, &stderr, config.WithEnv(serveEnv))
	}()
	base := "http://" + listen
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, `"handshake":"failed"`)
	}, 20*time.Second, 50*time.Millisecond, "last /readyz: %s\n%s", body, stderr.String())
	assert.Contains(t, body, `"class":"misconfiguration"`)
	assert.Contains(t, body, "digest "+bad+", want ")
	assert.Contains(t, body, "digest "+want)
	assert.Contains(t, body, "caphost programs deploy")
	assert.NotContains(t, body, redisAddr)

	// Still not ready after further retries; liveness never depended on it.
	time.Sleep(300 * time.Millisecond)
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, err = http.Get(base + "/livez")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	cancel()
	select {
	case code := <-exited:
		assert.Equal(t, 0, code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit")
	}
	logs := stderr.String()
	assert.Contains(t, logs, `"msg":"redis handshake failed; retrying"`)
	assert.Contains(t, logs, `"class":"misconfiguration"`)
	assert.Equal(t, 1, strings.Count(logs, `"msg":"redis handshake failed; retrying"`), "a repeated failure is not logged again within a minute")
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "redis-handshake") || strings.Contains(l, `"event":"readiness"`) {
			assert.NotContains(t, l, redisAddr, "no endpoint in handshake and readiness logs")
		}
	}
}

// TestServeFailsOnMisconfiguration: with on-failure:
// fail-on-misconfiguration the daemon does not start against the wrong
// library; it exits 1 naming the digest.
func TestServeFailsOnMisconfiguration(t *testing.T) {
	listen := freeListen(t)
	cfg, _, bad, _ := wrongLibrary(t, listen, "{on-failure: fail-on-misconfiguration}")
	var stdout, stderr logtest.Buffer
	code := runWith(context.Background(), []string{"serve", "--config", cfg}, &stdout, &stderr, config.WithEnv(serveEnv))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "startup handshake failed (misconfiguration)")
	assert.Contains(t, stderr.String(), "digest "+bad)
}
