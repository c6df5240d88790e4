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

// TestServeEnvoySelectorDomains: a selector-mapped domain is answered by
// the rate-limit capability's selector (its configured routes here; a
// rate-policy guest when one is configured) and its policy, over Envoy's
// gRPC API.
func TestServeEnvoySelectorDomains(t *testing.T) {
	srv := redistest.StartStandalone(t)
	listen, rlsListen := freeListen(t), freeListen(t)
	cfg := serveConfig(t, srv.Addr(), listen, "  envoy-rate-limit:\n    listen: "+rlsListen+"\n    selector-domains: [edge]\n")
	body, err := os.ReadFile(cfg)
	require.NoError(t, err)
	withRoutes := strings.Replace(string(body), "        subject: [api-key]\n",
		"        subject: [api-key]\n    routes:\n      - route: /api\n        policies: [{policy: per-key}]\n", 1)
	require.NotEqual(t, string(body), withRoutes)
	require.NoError(t, os.WriteFile(cfg, []byte(withRoutes), 0o600))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- runWith(ctx, []string{"serve", "--config", cfg, "--drain-timeout", "5s"}, &stdout, &stderr, config.WithEnv(serveEnv))
	}()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "serving envoy rate-limit service") },
		15*time.Second, 50*time.Millisecond, stderr.String())
	conn, err := grpc.NewClient(rlsListen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "route", Value: "/api"}, {Key: "api-key", Value: "k1"}}}}})
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
	assert.Equal(t, "per-key", resp.Statuses[0].CurrentLimit.GetName())
	assert.Equal(t, uint32(100), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())
	assert.Equal(t, uint32(99), resp.Statuses[0].LimitRemaining)
	cancel()
	assert.Equal(t, 0, <-exited, stderr.String())
	assert.NotContains(t, stderr.String(), "k1", "identities are never logged")
}
