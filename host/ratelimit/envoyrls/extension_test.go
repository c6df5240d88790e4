package envoyrls_test

import (
	"context"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/internal/redistest"
)

func parseOne(t *testing.T, body string) *rlsconfig.Config {
	t.Helper()
	d, err := rlsconfig.Parse("ext.yaml", []byte(body))
	require.NoError(t, err)
	c, err := rlsconfig.New(d)
	require.NoError(t, err)
	return c
}

// TestLocalEmergencyPerRule: with Redis gone, a rule whose caphost block
// says local-emergency is answered by the process-local limiter at its
// per-pod share (10 × 0.5 = 5 admitted, then OVER_LIMIT), while a rule
// without the block keeps the service's fail-closed mode.
func TestLocalEmergencyPerRule(t *testing.T) {
	cfg := parseOne(t, `domain: d
descriptors:
  - key: local
    rate_limit: {unit: month, requests_per_unit: 10}
    caphost: {failure_mode: local-emergency, per_pod_share: 0.5}
  - key: closed
    rate_limit: {unit: month, requests_per_unit: 10}
`)
	o := envoyrls.Options{AttemptTimeout: 500 * time.Millisecond, LocalEmergency: &ratelimit.LocalEmergencyConfig{
		MaxEntries: 100, EntryTTL: time.Hour, MaxInFlight: 16, AssumedMaxPods: 2, PerPodShare: 0.5}}
	f := serve(t, redistest.StartStandalone(t), o, cfg)
	// A local-emergency rule needs the service's local limiter.
	_, err := envoyrls.New(newRuntime(t, f.srv.Addr()), cfg, envoyrls.Options{})
	require.Error(t, err)

	f.srv.Kill()
	for i := range 5 {
		r := f.call(t, "d", 0, desc("local", "x"))
		require.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode, "local call %d", i)
		assert.Equal(t, uint32(10), r.Statuses[0].CurrentLimit.RequestsPerUnit)
	}
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, f.call(t, "d", 0, desc("local", "x")).OverallCode)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, f.call(t, "d", 0, desc("closed", "x")).OverallCode)
	assert.Equal(t, 5.0, f.count(t, "local_emergency"))
	assert.Equal(t, 2.0, f.count(t, "over_limit")+f.count(t, "unavailable"))
}

// TestDedupByRequestID: for a rule with dedup, a call retried with the
// same x-request-id is charged once; another id, or none, is charged.
// Rules without dedup ignore the id.
func TestDedupByRequestID(t *testing.T) {
	cfg := parseOne(t, `domain: d
descriptors:
  - key: once
    rate_limit: {unit: month, requests_per_unit: 3}
    caphost: {dedup: true}
  - key: plain
    rate_limit: {unit: month, requests_per_unit: 3}
`)
	f := serve(t, redistest.StartStandalone(t), envoyrls.Options{}, cfg)
	call := func(id, key string) *rlsv3.RateLimitResponse {
		ctx := context.Background()
		if id != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, envoyrls.RequestIDHeader, id)
		}
		resp, err := f.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*commonv3.RateLimitDescriptor{desc(key, "x")}})
		require.NoError(t, err)
		return resp
	}
	const month = rlsv3.RateLimitResponse_RateLimit_MONTH
	status1(t, call("req-1", "once"), 0, rlsv3.RateLimitResponse_OK, 3, month, 2)
	call("req-1", "once") // Envoy's retry of the same request: replayed
	status1(t, call("req-2", "once"), 0, rlsv3.RateLimitResponse_OK, 3, month, 1)
	status1(t, call("", "once"), 0, rlsv3.RateLimitResponse_OK, 3, month, 0)

	status1(t, call("req-1", "plain"), 0, rlsv3.RateLimitResponse_OK, 3, month, 2)
	status1(t, call("req-1", "plain"), 0, rlsv3.RateLimitResponse_OK, 3, month, 1)
}

// TestRequestIDBounds: an id that is not one printable-ASCII value of at
// most 120 bytes is ignored (charged as a fresh evaluation), never refused.
func TestRequestIDBounds(t *testing.T) {
	cfg := parseOne(t, "domain: d\ndescriptors:\n  - key: once\n    rate_limit: {unit: month, requests_per_unit: 100}\n    caphost: {dedup: true}\n")
	f := serve(t, redistest.StartStandalone(t), envoyrls.Options{}, cfg)
	long := strings.Repeat("a", 121)
	var remaining []uint32
	for _, md := range [][]string{
		{envoyrls.RequestIDHeader, long}, {envoyrls.RequestIDHeader, long},
		{envoyrls.RequestIDHeader, "has space"}, {envoyrls.RequestIDHeader, "has space"},
		{envoyrls.RequestIDHeader, "a", envoyrls.RequestIDHeader, "a"},
	} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
		resp, err := f.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*commonv3.RateLimitDescriptor{desc("once", "x")}})
		require.NoError(t, err)
		remaining = append(remaining, resp.Statuses[0].LimitRemaining)
	}
	assert.Equal(t, []uint32{99, 98, 97, 96, 95}, remaining, "every malformed id is no id: each call charged")
}
