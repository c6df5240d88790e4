package cache_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/caphost/caphost/host/cache"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// exampleRuntime is a Redis runtime whose cache role is addr.
func exampleRuntime(ctx context.Context, addr string) (*runtime.Runtime, error) {
	return runtime.New(ctx, redistest.ExampleConfig(addr, policy.RoleCache), runtime.WithLogger(slog.New(slog.DiscardHandler)))
}

// exampleProducts starts a private redis-server, builds a runtime on it and
// a Cache with one region, products (fresh for 30 s, kept for 5 min, an
// absence cached for 10 s, TTLs spread by up to 10 %), and returns the
// region and what closes it all.
func exampleProducts(ctx context.Context) (*cache.Region, func()) {
	addr, stop := redistest.ForExample()
	rt, err := exampleRuntime(ctx, addr)
	if err != nil {
		stop()
		panic(err)
	}
	dep, _ := rt.Role(policy.RoleCache)
	cfg, err := cache.Decode(cache.ProviderRedis, policy.RoleCache, map[string]any{
		"regions": map[string]any{"products": map[string]any{
			"ttl": map[string]any{"soft": "30s", "hard": "5m", "negative": "10s"}, "jitter": 0.1,
		}},
	}, false)
	if err != nil {
		panic(err)
	}
	c, err := cache.New(ctx, dep, rt.Keys(), cfg, cache.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	products, _ := c.Region("products")
	return products, func() {
		c.Close(ctx)
		rt.Close(ctx)
		stop()
	}
}

// Region.GetOrLoad is cache-aside: the first call loads from the source and
// stores the result; the next is a hit; after an invalidation the next
// lookup misses. Redis is a private redis-server the example starts.
func ExampleRegion_GetOrLoad() {
	ctx := context.Background()
	products, closeAll := exampleProducts(ctx)
	defer closeAll()

	loads := 0
	load := func(ctx context.Context) (cache.LoadOutcome, error) {
		loads++ // the source of truth: a database query, say
		return cache.Loaded([]byte(`{"name":"lamp"}`), cache.SourceRevision(7)), nil
	}
	for range 2 {
		res, err := products.GetOrLoad(ctx, cache.Parts("sku-42"), load)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Kind, string(res.Value))
	}
	if _, err := products.Invalidate(ctx, cache.Parts("sku-42")); err != nil {
		panic(err)
	}
	lk, _ := products.Lookup(ctx, cache.Parts("sku-42"))
	fmt.Println(lk.Kind, lk.MissReason, "source loads:", loads)
	// Output:
	// LOADED_FROM_SOURCE {"name":"lamp"}
	// FRESH_HIT {"name":"lamp"}
	// MISS INVALIDATED source loads: 1
}

// Region.LookupAppend reads a hit's value into the caller's buffer: a
// server that answers many lookups reuses one buffer per worker, and an L1
// hit then allocates nothing.
func ExampleRegion_LookupAppend() {
	ctx := context.Background()
	products, closeAll := exampleProducts(ctx)
	defer closeAll()
	if _, err := products.Record(ctx, cache.Parts("sku-42"), []byte(`{"name":"lamp"}`), cache.RecordMeta{}); err != nil {
		panic(err)
	}

	buf := make([]byte, 0, 4096)
	for _, sku := range []string{"sku-42", "sku-43"} {
		lk, err := products.LookupAppend(ctx, cache.Parts(sku), buf[:0])
		if err != nil {
			panic(err)
		}
		fmt.Println(sku, lk.Kind, string(lk.Value)) // lk.Value is valid until buf is reused
	}
	// Output:
	// sku-42 HIT {"name":"lamp"}
	// sku-43 MISS
}

// Decode reads a capabilities.cache block strictly; every problem is
// reported at once.
func ExampleDecode() {
	_, err := cache.Decode(cache.ProviderRedis, policy.RoleCache, map[string]any{
		"regions": map[string]any{"products": map[string]any{
			"ttl": map[string]any{"hard": "5m", "soft": "10m"}, "jiter": 0.1,
		}},
	}, false)
	fmt.Println(err)
	// Output:
	// invalid configuration (2 problems)
	//   capabilities.cache.regions.products.jiter: unknown key (known: codec, key-version, ttl, jitter, max-bytes, stale-if-error, l1, consistency, stampede, shards, min-ttl, incompatible-schema, compression, l1-limits, single-flight, source, refresh-lease, generation-trust) [config.unknown-key]
	//   capabilities.cache.regions.products.ttl.soft: longer than the hard TTL [cache.ttl]
}
