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

// Region.Lookup answers one of a closed set of outcomes: a hit says how
// fresh it is, a miss says why (absent, expired, invalidated). Redis down
// would be Unavailable, never a miss.
func ExampleRegion_Lookup() {
	ctx := context.Background()
	products, closeAll := exampleProducts(ctx)
	defer closeAll()
	if _, err := products.Record(ctx, cache.Parts("sku-42"), []byte(`{"name":"lamp"}`), cache.RecordMeta{}); err != nil {
		panic(err)
	}

	for _, sku := range []string{"sku-42", "sku-43"} {
		lk, err := products.Lookup(ctx, cache.Parts(sku))
		if err != nil {
			panic(err) // a corrupt entry or a codec failure: never a miss
		}
		switch lk.Kind {
		case cache.Hit:
			fmt.Println(sku, lk.Kind, lk.Freshness, string(lk.Value))
		case cache.Miss:
			fmt.Println(sku, lk.Kind, lk.MissReason)
		default:
			fmt.Println(sku, lk.Kind)
		}
	}
	// Output:
	// sku-42 HIT FRESH {"name":"lamp"}
	// sku-43 MISS ABSENT
}

// Region.Record writes through after the source changed: a blind write of
// the value the source now holds. With OnlyIfSourceRevisionNewer a write
// that arrives late, carrying an older revision, is refused.
func ExampleRegion_Record() {
	ctx := context.Background()
	products, closeAll := exampleProducts(ctx)
	defer closeAll()
	key := cache.Parts("sku-42")

	// The source committed revision 8 of sku-42: write it through.
	o, err := products.Record(ctx, key, []byte(`{"name":"lamp","price_cents":2499}`), cache.RecordMeta{
		Revision: cache.SourceRevision(8), Intent: cache.OnlyIfSourceRevisionNewer})
	if err != nil {
		panic(err)
	}
	fmt.Println("revision 8:", o)
	// A slower writer of revision 7 arrives after it.
	o, err = products.Record(ctx, key, []byte(`{"name":"lamp","price_cents":1999}`), cache.RecordMeta{
		Revision: cache.SourceRevision(7), Intent: cache.OnlyIfSourceRevisionNewer})
	if err != nil {
		panic(err)
	}
	fmt.Println("revision 7:", o)
	lk, _ := products.Lookup(ctx, key)
	rev, _ := lk.SourceRevision.Value()
	fmt.Println(lk.Kind, rev, string(lk.Value))
	// Output:
	// revision 8: RECORDED
	// revision 7: NOT_RECORDED_CONDITION
	// HIT 8 {"name":"lamp","price_cents":2499}
}

// Region.RecordAbsent caches an authoritative absence (after the item was
// deleted at the source) for the region's negative TTL: lookups answer
// NegativeHit until it expires, without asking the source.
func ExampleRegion_RecordAbsent() {
	ctx := context.Background()
	products, closeAll := exampleProducts(ctx)
	defer closeAll()

	o, err := products.RecordAbsent(ctx, cache.Parts("sku-404"), cache.RecordMeta{})
	if err != nil {
		panic(err)
	}
	lk, _ := products.Lookup(ctx, cache.Parts("sku-404"))
	fmt.Println(o, lk.Kind)
	// Output:
	// RECORDED NEGATIVE_HIT
}

// Region.Invalidate drops one key after the source committed a change. It
// leaves a tombstone, so a load that began earlier cannot store its older
// value; invalidating an absent key is harmless.
func ExampleRegion_Invalidate() {
	ctx := context.Background()
	products, closeAll := exampleProducts(ctx)
	defer closeAll()
	key := cache.Parts("sku-42")
	if _, err := products.Record(ctx, key, []byte(`{"name":"lamp"}`), cache.RecordMeta{}); err != nil {
		panic(err)
	}

	for range 2 {
		o, err := products.Invalidate(ctx, key)
		if err != nil {
			panic(err)
		}
		fmt.Println(o)
	}
	lk, _ := products.Lookup(ctx, key)
	fmt.Println(lk.Kind, lk.MissReason)
	// Output:
	// INVALIDATED
	// ALREADY_ABSENT
	// MISS INVALIDATED
}

// Region.InvalidateRegion drops every entry of the region at once: each
// shard gets a new generation, under which nothing is stored yet. Nothing
// is scanned; the old entries expire by their TTL.
func ExampleRegion_InvalidateRegion() {
	ctx := context.Background()
	products, closeAll := exampleProducts(ctx)
	defer closeAll()
	for _, sku := range []string{"sku-42", "sku-43"} {
		if _, err := products.Record(ctx, cache.Parts(sku), []byte(`{}`), cache.RecordMeta{}); err != nil {
			panic(err)
		}
	}

	o, err := products.InvalidateRegion(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(o)
	for _, sku := range []string{"sku-42", "sku-43"} {
		lk, _ := products.Lookup(ctx, cache.Parts(sku))
		fmt.Println(sku, lk.Kind, lk.MissReason)
	}
	// Output:
	// INVALIDATED
	// sku-42 MISS ABSENT
	// sku-43 MISS ABSENT
}

// Region.LookupOrClaim and Region.RecordClaimed are cache-aside for a
// caller that loads from its source itself (the sidecar's
// Caphost-Refresh: claim, then PUT with the token): of the callers that
// miss, one is granted the refresh lease and loads; its write applies only
// if nothing invalidated the key since its lookup.
func ExampleRegion_LookupOrClaim() {
	ctx := context.Background()
	products, closeAll := exampleProducts(ctx)
	defer closeAll()
	key := cache.Parts("sku-42")

	lk, claim, token, err := products.LookupOrClaim(ctx, key, 0)
	if err != nil {
		panic(err)
	}
	fmt.Println(lk.Kind, claim)
	_, other, _, _ := products.LookupOrClaim(ctx, key, 0) // another caller, meanwhile
	fmt.Println(other)

	value := []byte(`{"name":"lamp"}`) // loaded from the source by the granted caller
	o, err := products.RecordClaimed(ctx, key, token, value, false, cache.RecordMeta{})
	if err != nil {
		panic(err)
	}
	fmt.Println(o)
	lk, claim, _, _ = products.LookupOrClaim(ctx, key, 0)
	fmt.Println(lk.Kind, claim, string(lk.Value))
	// Output:
	// MISS GRANTED
	// CONTENDED
	// RECORDED
	// HIT NOT_CLAIMED {"name":"lamp"}
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
