package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/internal/logtest"
)

// TestServeLogsDriverLinesAsJSON: with Redis unreachable, the driver's own
// dial-failure lines reach serve's stderr as JSON records like every other
// line, without the address (they used to be plain text from the driver's
// default logger).
func TestServeLogsDriverLinesAsJSON(t *testing.T) {
	listen := freeListen(t)
	gone := freeListen(t) // nothing listens there
	path := serveConfig(t, gone, listen, "")
	withStartup(t, path, "{on-failure: retry, retry-initial: 50ms, retry-max: 200ms}")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr logtest.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- runWith(ctx, []string{"serve", "--config", path}, &stdout, &stderr, config.WithEnv(serveEnv))
	}()
	require.Eventually(t, func() bool {
		return strings.Contains(stderr.String(), `"format":"redis: connection pool: failed to dial`)
	}, 20*time.Second, 20*time.Millisecond, "no driver line in serve's log:\n%s", stderr.String())
	cancel()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit")
	}

	_, port, err := net.SplitHostPort(gone)
	require.NoError(t, err)
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var rec map[string]any
		assert.NoError(t, json.Unmarshal([]byte(l), &rec), "every line is a JSON record: %q", l)
		if strings.Contains(l, `"format":"redis:`) {
			assert.NotContains(t, l, port, "the driver's line carries no address")
		}
	}
}

// withStartup sets redis.startup in a configuration serveConfig wrote.
func withStartup(t *testing.T, path, startup string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	y := strings.Replace(string(b), "programs: {mode: evalsha-managed}", "programs: {mode: evalsha-managed}\n  startup: "+startup, 1)
	require.NotEqual(t, string(b), y)
	require.NoError(t, os.WriteFile(path, []byte(y), 0o600))
}
