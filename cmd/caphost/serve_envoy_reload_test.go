package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/signal"
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
	"github.com/caphost/caphost/internal/logtest"
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
	var stdout, stderr logtest.Buffer
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

// selectorConfig is a configuration whose Envoy rate-limit service has
// selector-domains [edge] and no descriptor files; the rate-limit
// capability routes /api to its per-key policy.
func selectorConfig(t *testing.T, redisAddr, listen, rlsListen string) string {
	t.Helper()
	cfg := serveConfig(t, redisAddr, listen, "  envoy-rate-limit:\n    listen: "+rlsListen+"\n    selector-domains: [edge]\n")
	body, err := os.ReadFile(cfg)
	require.NoError(t, err)
	withRoutes := strings.Replace(string(body), "        subject: [api-key]\n",
		"        subject: [api-key]\n    routes:\n      - route: /api\n        policies: [{policy: per-key}]\n", 1)
	require.NotEqual(t, string(body), withRoutes)
	require.NoError(t, os.WriteFile(cfg, []byte(withRoutes), 0o600))
	return cfg
}

// TestServeSIGHUPWithNothingToReload: SIGHUP never ends serve. With only
// selector-domains (no descriptor files), and without the Envoy service
// at all, it logs that nothing needed reloading and serving goes on: the
// selector-mapped domain and the HTTP API still answer, and serve exits
// cleanly. The test holds a SIGHUP subscription of its own, so that a
// serve that ignored the signal fails on the missing log line instead of
// killing the test binary.
func TestServeSIGHUPWithNothingToReload(t *testing.T) {
	guard := make(chan os.Signal, 4)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)
	for _, tc := range []struct {
		name     string
		selector bool
	}{{"selector-domains only", true}, {"no envoy service", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartStandalone(t)
			listen, rlsListen := freeListen(t), freeListen(t)
			cfg, ready := serveConfig(t, srv.Addr(), listen, ""), "\"msg\":\"serving\""
			if tc.selector {
				cfg, ready = selectorConfig(t, srv.Addr(), listen, rlsListen), "serving envoy rate-limit service"
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr logtest.Buffer
			exited := make(chan int, 1)
			go func() {
				exited <- runWith(ctx, []string{"serve", "--config", cfg, "--drain-timeout", "5s"}, &stdout, &stderr, config.WithEnv(serveEnv))
			}()
			require.Eventually(t, func() bool { return strings.Contains(stderr.String(), ready) },
				15*time.Second, 20*time.Millisecond, stderr.String())

			const line = "SIGHUP: nothing to reload"
			for n := 1; n <= 2; n++ {
				require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
				require.Eventually(t, func() bool { return strings.Count(stderr.String(), line) == n },
					15*time.Second, 20*time.Millisecond, stderr.String())
			}
			select {
			case code := <-exited:
				t.Fatalf("serve exited with %d after SIGHUP: %s", code, stderr.String())
			default:
			}

			resp, err := http.Get("http://" + listen + "/readyz")
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			if tc.selector {
				conn, err := grpc.NewClient(rlsListen, grpc.WithTransportCredentials(insecure.NewCredentials()))
				require.NoError(t, err)
				defer conn.Close()
				r, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
					Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "route", Value: "/api"}, {Key: "api-key", Value: "k1"}}}}})
				require.NoError(t, err)
				assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode)
			}
			assert.NotContains(t, stderr.String(), "envoy rate-limit configuration", "nothing was reloaded")
			cancel()
			assert.Equal(t, 0, <-exited, stderr.String())
		})
	}
}

// TestServeEnvoySelectorDomains: a selector-mapped domain is answered by
// the rate-limit capability's selector (its configured routes here; a
// rate-policy guest when one is configured) and its policy, over Envoy's
// gRPC API.
func TestServeEnvoySelectorDomains(t *testing.T) {
	srv := redistest.StartStandalone(t)
	listen, rlsListen := freeListen(t), freeListen(t)
	cfg := selectorConfig(t, srv.Addr(), listen, rlsListen)
	client, stderr, stop := rlsServe(t, cfg, rlsListen)
	resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "route", Value: "/api"}, {Key: "api-key", Value: "k1"}}}}})
	require.NoError(t, err)
	require.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
	assert.Equal(t, "per-key", resp.Statuses[0].CurrentLimit.GetName())
	assert.Equal(t, uint32(100), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())
	assert.Equal(t, uint32(99), resp.Statuses[0].LimitRemaining)
	assert.Equal(t, 0, stop(), stderr.String())
	assert.NotContains(t, stderr.String(), "k1", "identities are never logged")
}
