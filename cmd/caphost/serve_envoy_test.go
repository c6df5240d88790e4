package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/internal/redistest"
)

// envoyConfig writes a serve configuration with server.envoy-rate-limit on
// rlsListen, reading envoyproxy/ratelimit's README Example 2.
func envoyConfig(t *testing.T, redisAddr, listen, rlsListen string) string {
	t.Helper()
	ex, err := os.ReadFile("../../host/ratelimit/envoyrls/testdata/example2.yaml")
	require.NoError(t, err)
	path := serveConfig(t, redisAddr, listen, "  envoy-rate-limit:\n    listen: "+rlsListen+
		"\n    config-files: [messaging.yaml]\n    response-headers: true\n")
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(path), "messaging.yaml"), ex, 0o600))
	return path
}

// TestServeEnvoyRateLimit: caphost serve answers Envoy's ShouldRateLimit
// on its own gRPC listener, counting in Redis next to the HTTP API, and
// stops it cleanly with the rest.
// rlsServe runs caphost serve on cfg until the test ends and returns a
// go-control-plane client of its Envoy rate-limit listener, once that
// serves; stop cancels serve and returns its exit code, and stderr holds
// its log.
func rlsServe(t *testing.T, cfg, rlsListen string) (client rlsv3.RateLimitServiceClient, stderr *logtest.Buffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stderr = new(logtest.Buffer)
	var stdout logtest.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- runWith(ctx, []string{"serve", "--config", cfg, "--drain-timeout", "5s"}, &stdout, stderr, config.WithEnv(serveEnv))
	}()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "serving envoy rate-limit service") },
		60*time.Second, 50*time.Millisecond, stderr.String())
	conn, err := grpc.NewClient(rlsListen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), stderr, func() int {
		cancel()
		code := <-exited
		if out := stdout.String(); out != "" {
			_, _ = stderr.Write([]byte(out))
		}
		return code
	}
}

func TestServeEnvoyRateLimit(t *testing.T) {
	srv := redistest.StartStandalone(t)
	listen, rlsListen := freeListen(t), freeListen(t)
	cfg := envoyConfig(t, srv.Addr(), listen, rlsListen)

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
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	req := &rlsv3.RateLimitRequest{Domain: "messaging", HitsAddend: 4, Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}},
	}}}
	resp, err := client.ShouldRateLimit(cctx, req)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
	require.Len(t, resp.Statuses, 1)
	assert.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining)
	assert.Len(t, resp.ResponseHeadersToAdd, 3)
	resp, err = client.ShouldRateLimit(cctx, req)
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, resp.OverallCode, "a day's 5 are spent (4 + 4 > 5)")

	_, err = client.ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "messaging"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))

	// The service's metrics are on the host's /metrics.
	mresp, err := http.Get("http://" + listen + "/metrics")
	require.NoError(t, err)
	body := new(strings.Builder)
	_, _ = io.Copy(body, mresp.Body)
	_ = mresp.Body.Close()
	assert.Contains(t, body.String(), `caphost_envoy_rls_requests_total{code="over_limit"} 1`)
	assert.Contains(t, body.String(), "envoy_rls_caphost_rate_")

	cancel()
	select {
	case code := <-exited:
		assert.Equal(t, 0, code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit")
	}
	_, err = client.ShouldRateLimit(context.Background(), req)
	assert.Error(t, err, "the gRPC listener is closed with the rest")
	assert.NotContains(t, stderr.String()+stdout.String(), "2061111111", "descriptor values are never logged")
}

// TestServeEnvoyRateLimitRefusesBadStart: a taken gRPC listen address
// fails serve with exit 1 and closes the host again.
func TestServeEnvoyRateLimitRefusesBadStart(t *testing.T) {
	srv := redistest.StartStandalone(t)
	listen, rlsListen := freeListen(t), freeListen(t)
	l, err := net.Listen("tcp", rlsListen)
	require.NoError(t, err)
	defer l.Close()
	cfg := envoyConfig(t, srv.Addr(), listen, rlsListen)
	var stdout, stderr logtest.Buffer
	code := runWith(context.Background(), []string{"serve", "--config", cfg}, &stdout, &stderr, config.WithEnv(serveEnv))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "listen "+rlsListen)
}
