package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/caphost/caphost/internal/redistest"
)

// TestServeEnvoySelectorDomainsWithGuest: a selector-mapped domain
// answered by the reference rate-policy Wasm guest, end to end over
// Envoy's gRPC API. The guest's selection shows in current_limit (policy,
// limit and, for a window that is one, its Envoy unit), its search cost and hits_addend scale
// what is taken, hits over a policy's max cost and a method the guest
// refuses fail closed, and nothing identifying is logged.
func TestServeEnvoySelectorDomainsWithGuest(t *testing.T) {
	dir, cache := guestFiles(t)
	wasm, err := os.ReadFile(filepath.Join(dir, "rate-policy.wasm"))
	require.NoError(t, err)
	sum := sha256.Sum256(wasm)
	srv := redistest.StartStandalone(t)
	listen, rlsListen := freeListen(t), freeListen(t)
	// serveConfig's own per-key policy stays beside the guest's; the
	// guest's selector chooses among all of them.
	path := serveConfig(t, srv.Addr(), listen, fmt.Sprintf(`  envoy-rate-limit:
    listen: %q
    selector-domains: [edge]
guests:
  compile-cache-dir: %q
  modules:
    rate-policy: {path: %q, sha256: %q}
`, rlsListen, cache, filepath.Join(dir, "rate-policy.wasm"), hex.EncodeToString(sum[:])))

	client, stderr, stop := rlsServe(t, path, rlsListen)
	call := func(hits uint64, kv ...string) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		d := &commonv3.RateLimitDescriptor{}
		for i := 0; i < len(kv); i += 2 {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		if hits > 0 {
			d.HitsAddend = wrapperspb.UInt64(hits)
		}
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*commonv3.RateLimitDescriptor{d}})
		require.NoError(t, err)
		require.Len(t, resp.Statuses, 1)
		return resp.Statuses[0]
	}

	// pro.read is a token bucket of 150 tokens refilled at 600 a minute:
	// its limit is the capacity, and its window (15 s to refill) is no
	// Envoy unit.
	st := call(0, "method", "GET", "route", "/items", "api-key-plan", "pro", "api-key", "key-pro-1")
	require.Equal(t, rlsv3.RateLimitResponse_OK, st.Code)
	require.NotNil(t, st.CurrentLimit)
	assert.Equal(t, "pro-read", st.CurrentLimit.Name)
	assert.Equal(t, uint32(150), st.CurrentLimit.RequestsPerUnit)
	assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_UNKNOWN, st.CurrentLimit.Unit)
	assert.LessOrEqual(t, st.LimitRemaining, uint32(149))

	// Anonymous traffic: the guest selects the per-IP fixed window (30 a
	// minute) and free.read (15 tokens) keyed by the IP; the status shows
	// the level closest to its limit.
	anon := call(0, "method", "GET", "route", "/items", "client-ip", "192.0.2.7")
	require.Equal(t, rlsv3.RateLimitResponse_OK, anon.Code)
	assert.Equal(t, "free-read", anon.CurrentLimit.GetName())
	assert.Equal(t, uint32(15), anon.CurrentLimit.GetRequestsPerUnit())

	// A search costs 5 on the read bucket, 10 with hits_addend 2: over
	// read's max cost of 5, it fails closed and takes nothing.
	search := call(0, "method", "GET", "route", "/search", "api-key-plan", "pro", "api-key", "key-pro-2")
	require.Equal(t, rlsv3.RateLimitResponse_OK, search.Code)
	assert.LessOrEqual(t, search.LimitRemaining, uint32(145), "a search takes 5 tokens")
	over := call(2, "method", "GET", "route", "/search", "api-key-plan", "pro", "api-key", "key-pro-3")
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, over.Code, "5 × 2 is over read's max cost")
	after := call(0, "method", "GET", "route", "/items", "api-key-plan", "pro", "api-key", "key-pro-3")
	require.Equal(t, rlsv3.RateLimitResponse_OK, after.Code)
	assert.GreaterOrEqual(t, after.LimitRemaining, uint32(148), "the refused call took nothing")

	// free.write takes 1 per POST; hits_addend 2 is over its max cost of 1.
	w := call(0, "method", "POST", "route", "/items", "api-key-plan", "free", "api-key", "key-free-1")
	require.Equal(t, rlsv3.RateLimitResponse_OK, w.Code)
	assert.Equal(t, "free-write", w.CurrentLimit.GetName())
	assert.Equal(t, uint32(2), w.CurrentLimit.GetRequestsPerUnit(), "a burst of 10/4 tokens")
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT,
		call(2, "method", "POST", "route", "/items", "api-key-plan", "free", "api-key", "key-free-2").Code)

	// The guest refuses an unknown method: never an allow.
	refused := call(0, "method", "TRACE", "route", "/items", "api-key-plan", "free", "api-key", "key-free-3")
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, refused.Code)
	assert.Nil(t, refused.CurrentLimit)

	assert.Equal(t, 0, stop(), stderr.String())
	for _, secret := range []string{"key-pro-1", "key-pro-2", "key-free-1", "key-free-3", "192.0.2.7"} {
		assert.NotContains(t, stderr.String(), secret, "identities are never logged")
	}
}
