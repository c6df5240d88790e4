package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/internal/redistest"
)

// TestServeEnvoyReloadOnSIGHUP: SIGHUP re-reads the descriptor files; a
// bad file is logged with its location and the old rules keep serving;
// a good one is served from then on. The test waits for each reload's
// log line (an event, not a duration).
func TestServeEnvoyReloadOnSIGHUP(t *testing.T) {
	srv := redistest.StartStandalone(t)
	listen, rlsListen := freeListen(t), freeListen(t)
	cfg := envoyConfig(t, srv.Addr(), listen, rlsListen)
	rules := filepath.Join(filepath.Dir(cfg), "messaging.yaml")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- runWith(ctx, []string{"serve", "--config", cfg, "--drain-timeout", "5s"}, &stdout, &stderr, config.WithEnv(serveEnv))
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.Contains(stderr.String(), "serving envoy rate-limit service")
	}, 15*time.Second, 50*time.Millisecond, stderr.String())

	conn, err := grpc.NewClient(rlsListen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	limitOf := func() uint32 {
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "messaging",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "1"}}}}})
		require.NoError(t, err)
		require.NotNil(t, resp.Statuses[0].CurrentLimit)
		return resp.Statuses[0].CurrentLimit.RequestsPerUnit
	}
	require.Equal(t, uint32(100), limitOf())
	hupAndWait := func(line string, n int) {
		t.Helper()
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
		require.Eventually(t, func() bool { return strings.Count(stderr.String(), line) == n },
			15*time.Second, 20*time.Millisecond, stderr.String())
	}

	require.NoError(t, os.WriteFile(rules, []byte("domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: ten}\n"), 0o600))
	hupAndWait("envoy rate-limit configuration refused", 1)
	assert.Contains(t, stderr.String(), "messaging.yaml:4: descriptors[0].rate_limit.requests_per_unit")
	assert.Equal(t, uint32(100), limitOf(), "the old rules keep serving")

	require.NoError(t, os.WriteFile(rules, []byte("domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 7}\n"), 0o600))
	hupAndWait("envoy rate-limit configuration reloaded", 1)
	assert.Equal(t, uint32(7), limitOf())

	resp, err := http.Get("http://" + listen + "/metrics")
	require.NoError(t, err)
	body := new(strings.Builder)
	_, _ = io.Copy(body, resp.Body)
	_ = resp.Body.Close()
	assert.Contains(t, body.String(), `caphost_envoy_rls_reloads_total{result="failed"} 1`)
	assert.Contains(t, body.String(), `caphost_envoy_rls_reloads_total{result="ok"} 1`)

	cancel()
	assert.Equal(t, 0, <-exited, stderr.String())
}
