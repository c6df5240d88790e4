package host_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/cache"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/trust"
)

// cacheConfig: the cache role alone, optional, one configured region with
// L1 and the hint secret from the environment.
const cacheConfig = `redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    cache: {deployment: main, required: false, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/HOST_TEST_KEY"}
capabilities:
  cache:
    provider: redis
    redis-role: cache
    hints: {hmac: "secret://env/CACHE_HINT_KEY"}
    regions:
      products:
        ttl: {soft: 30s, hard: 5m, negative: 10s}
        l1: true
`

func cacheHost(t *testing.T, addr string) *host.Host {
	t.Helper()
	path := filepath.Join(t.TempDir(), "caphost.yaml")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, cacheConfig, addr), 0o600))
	cfg, err := config.Load(context.Background(), path, config.WithEnv(cacheEnv))
	require.NoError(t, err)
	return newHost(t, cfg)
}

// productsRegion returns h's cache and its region products.
func productsRegion(t *testing.T, h *host.Host) (*cache.Cache, *cache.Region) {
	t.Helper()
	c, err := h.Cache()
	require.NoError(t, err)
	r, err := c.Region("products")
	require.NoError(t, err)
	return c, r
}

// cacheEnv serves the secrets of the cache hosts' configurations.
func cacheEnv(k string) (string, bool) {
	switch k {
	case "HOST_TEST_KEY":
		return "host-test-hmac-key-0123456789abcdefghijklmnop", true
	case "CACHE_HINT_KEY":
		return "cache-hint-key-0123456789abcdefghijklmnop", true
	}
	return "", false
}

// TestCacheCapability: the cache block becomes a running capability —
// reachable from Go (Host.Cache) and over the daemon's HTTP API, with its
// descriptor in Capabilities — and Redis going away makes it DEGRADED
// while the host stays ready (the cache role is optional and the
// capability falls back to the source).
func TestCacheCapability(t *testing.T) {
	srv := redistest.StartStandalone(t)
	h := cacheHost(t, srv.Addr())
	_, r := productsRegion(t, h)
	ctx := context.Background()
	o, err := r.Record(ctx, cache.Parts("sku-1"), []byte("lamp"), cache.RecordMeta{})
	require.NoError(t, err)
	assert.Equal(t, cache.Recorded, o)

	api := httpapi.New(h, httpapi.Options{})
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/cache/products/sku-1", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "lamp", rec.Body.String())
	rec = httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/v1/cache/products/sku-2", bytes.NewReader([]byte("desk"))))
	body, _ := io.ReadAll(rec.Body)
	assert.Equal(t, http.StatusOK, rec.Code, string(body))
	rec = httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/cache/products/sku-2", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)

	st := statusOf(t, h, cache.CapabilityID)
	assert.Equal(t, capability.StateActive, st.State)
	require.NotNil(t, st.Descriptor)
	assert.Equal(t, capability.FailOpenToSource, st.Descriptor.FailureMode)
	assert.Equal(t, capability.ImpactOptional, st.Descriptor.Impact)
	assert.Contains(t, st.Descriptor.Guarantees, capability.GuaranteeGuardedWrites)
	assert.Equal(t, cache.Readiness, st.Readiness)

	srv.Kill()
	require.Eventually(t, func() bool { return statusOf(t, h, cache.CapabilityID).State == capability.StateDegraded },
		10*time.Second, 50*time.Millisecond)
	rep := h.Readiness(ctx)
	assert.True(t, rep.Ready, "an optional cache role never makes the host unready")
	assert.Equal(t, health.Degraded, rep.Status)
	res, err := r.GetOrLoad(ctx, cache.Parts("sku-3"), func(context.Context) (cache.LoadOutcome, error) {
		return cache.Loaded([]byte("chair"), cache.Revision{}), nil
	})
	require.NoError(t, err)
	assert.Equal(t, cache.DegradedSource, res.Kind)
}

// TestCacheAbsentIsInert: without a cache block there is no cache, no
// client and no route but the 503 of a disabled capability.
func TestCacheAbsentIsInert(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg, err := capConfig(t, srv.Addr(), true, block("rate-limit", `provider: redis
redis-role: coordination
policies:
  login: {revision: r1, algorithm: fixed-window, limit: 10, window: 1m, failure-mode: fail-closed, subject: [client-ip]}`))
	require.NoError(t, err)
	h := newHost(t, cfg)
	_, err = h.Cache()
	assert.ErrorIs(t, err, host.ErrCapabilityDisabled)
	rec := httptest.NewRecorder()
	httpapi.New(h, httpapi.Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/cache/products/k", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), "capability-disabled")
}

// cacheGuestsHost is a host whose cache regions are the reference
// cache-region guest's, their payloads passing through the reference codec
// guest; both may be swapped unsigned.
func cacheGuestsHost(t *testing.T, addr string) *host.Host {
	t.Helper()
	dir := t.TempDir()
	var mods strings.Builder
	for _, n := range []string{"codec", "cache-region"} {
		path := filepath.Join(dir, n+".wasm")
		require.NoError(t, os.WriteFile(path, th.wasm[n], 0o600))
		fmt.Fprintf(&mods, "    %s: {path: %q, sha256: %q, limits: {call-timeout: 2s}}\n", n, path, trust.Digest(th.wasm[n]).String())
	}
	body := fmt.Sprintf(`redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    cache: {deployment: main, required: false, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/HOST_TEST_KEY"}
capabilities:
  cache:
    provider: redis
    redis-role: cache
    hints: {hmac: "secret://env/CACHE_HINT_KEY"}
guests:
  compile-cache-dir: %q
  modules:
%ssecurity:
  allow-unsigned-swaps: true
`, addr, th.cacheDir, mods.String())
	path := filepath.Join(dir, "caphost.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	cfg, err := config.Load(context.Background(), path, config.WithEnv(cacheEnv))
	require.NoError(t, err)
	return newHost(t, cfg)
}

// TestCacheGuestsSwapUnderTraffic: the cache's codec and cache-region
// guests hot-swap while clients read and write through them: every swap
// passes the cache's pre-check, the regions are rebuilt afterwards, and no
// request fails.
func TestCacheGuestsSwapUnderTraffic(t *testing.T) {
	srv := redistest.StartStandalone(t)
	h := cacheGuestsHost(t, srv.Addr())
	c, products := productsRegion(t, h)

	ctx, cancel := context.WithCancel(context.Background())
	var ops, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				key := cache.Attrs(cache.Attr{Name: "key", Value: fmt.Sprintf("sku-%d-%d", i, n%8)})
				_, err := products.GetOrLoad(context.Background(), key, func(context.Context) (cache.LoadOutcome, error) {
					return cache.Loaded([]byte(`{"id":"x","name":"Lamp","price_cents":1,"currency":"EUR"}`), cache.Revision{}), nil
				})
				ops.Add(1)
				if err != nil {
					failed.Add(1)
					t.Errorf("during the swaps: %v", err)
				}
			}
		}()
	}
	require.Eventually(t, func() bool { return ops.Load() > 50 }, 30*time.Second, time.Millisecond)
	for _, n := range []string{"codec", "cache-region", "codec"} {
		st, err := h.SwapGuest(context.Background(), n, th.wasm[n], nil)
		require.NoError(t, err, n)
		assert.True(t, st.LastSwapOK, n)
	}
	before := ops.Load()
	require.Eventually(t, func() bool { return ops.Load() > before+50 }, 30*time.Second, time.Millisecond)
	cancel()
	wg.Wait()
	assert.Zero(t, failed.Load(), "of %d operations", ops.Load())
	for _, g := range h.Guests() {
		assert.Greater(t, g.Generation, uint64(1), g.Name)
	}
	assert.Len(t, c.Regions(), 2)
	mfs, err := h.Registry().Gather()
	require.NoError(t, err)
	reloads := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "caphost_cache_policy_reloads_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "ok" {
					reloads = m.GetCounter().GetValue()
				}
			}
		}
	}
	assert.Equal(t, 3.0, reloads, "the regions were rebuilt after each swap")
}

// TestCacheCountersSurviveARegionGuestSwap: a cache-region guest swapped in
// through the host's swap path that changes a region's policy gives the
// region a new runtime, L1 and single-flight included, whose counters start
// at zero. The L1 and single-flight counters the host reports still never
// go down across the swap, and they count the traffic after it on top.
func TestCacheCountersSurviveARegionGuestSwap(t *testing.T) {
	srv := redistest.StartStandalone(t)
	h := cacheGuestsHost(t, srv.Addr())
	c, products := productsRegion(t, h)
	ctx, reg := context.Background(), h.Registry()
	// traffic loads key once, then reads it until L1 serves it.
	traffic := func(key string) {
		t.Helper()
		k := cache.Attrs(cache.Attr{Name: "key", Value: key})
		res, err := products.GetOrLoad(ctx, k, func(context.Context) (cache.LoadOutcome, error) {
			return cache.Loaded([]byte(`{"id":"x","name":"Lamp","price_cents":1,"currency":"EUR"}`), cache.Revision{}), nil
		})
		require.NoError(t, err)
		require.Equal(t, cache.LoadedFromSource, res.Kind)
		require.Eventually(t, func() bool {
			lk, err := products.Lookup(ctx, k)
			return err == nil && lk.FromL1
		}, 10*time.Second, time.Millisecond, "L1 never served %s", key)
	}
	events := map[string][]string{
		"caphost_cache_l1_events_total":            {"hit", "miss", "stored", "raced", "refused", "evicted_size", "evicted_expiry", "flush"},
		"caphost_cache_single_flight_events_total": {"load", "join", "abandoned", "timed_out", "refused_keys", "refused_waiters", "panic"},
	}
	counters := func() map[string]float64 {
		t.Helper()
		out := map[string]float64{}
		for name, evs := range events {
			for _, ev := range evs {
				out[name+"/"+ev] = gaugeValue(t, reg, name, map[string]string{"region": "products", "event": ev})
			}
		}
		return out
	}
	notDown := func(before, after map[string]float64) {
		t.Helper()
		for k, v := range before {
			assert.GreaterOrEqual(t, after[k], v, "%s went down", k)
		}
	}
	softTTL := func() time.Duration {
		for _, p := range c.Regions() {
			if p.ID == "products" {
				return p.SoftTTL
			}
		}
		t.Fatal("no region products")
		return 0
	}

	traffic("sku-1")
	before := counters()
	require.Equal(t, 1.0, before["caphost_cache_single_flight_events_total/load"])
	require.Positive(t, before["caphost_cache_l1_events_total/hit"])
	require.Positive(t, before["caphost_cache_l1_events_total/stored"])
	require.Equal(t, 30*time.Second, softTTL())

	st, err := h.SwapGuest(ctx, "cache-region", th.wasm["cache-region-v2"], nil)
	require.NoError(t, err)
	require.True(t, st.LastSwapOK)
	require.Equal(t, 60*time.Second, softTTL(), "the swap changed the region's policy, so its runtime")
	swapped := counters() // every series is still there, or gaugeValue fails
	notDown(before, swapped)

	traffic("sku-2")
	after := counters()
	notDown(swapped, after)
	assert.Equal(t, before["caphost_cache_single_flight_events_total/load"]+1, after["caphost_cache_single_flight_events_total/load"],
		"the new runtime's load counts on top")
	assert.Greater(t, after["caphost_cache_l1_events_total/hit"], swapped["caphost_cache_l1_events_total/hit"])
	assert.Greater(t, after["caphost_cache_l1_events_total/stored"], swapped["caphost_cache_l1_events_total/stored"])
}
