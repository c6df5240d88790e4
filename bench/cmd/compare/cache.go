package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	gocache "github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/cache"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// The cache rows compare caphost's cache capability (host/cache) with
// github.com/go-redis/cache/v9 on the same private redis-server:
//
//   - L2 hit through the envelope and the reference codec guest's
//     "product" schema, and through the built-in bytes codec (no guest), so
//     the guest's share shows;
//   - L1 hit against go-redis/cache's TinyLFU local cache, with Lookup (a
//     new copy per hit, as go-redis/cache's Get makes) and with
//     LookupAppend into a pooled buffer (a copy into the caller's memory,
//     which go-redis/cache has no call for);
//   - a stampede on a hot key expiring under two hosts (a row no peer
//     has): source loads per expiry and p99 latency during the refresh.

// product is the "product" schema's interchange form (guests/codec): the
// value both sides cache. go-redis/cache stores it with its default codec
// (msgpack, s2 above 64 bytes).
type product struct {
	ID         string   `json:"id" msgpack:"id"`
	Name       string   `json:"name" msgpack:"name"`
	PriceCents int64    `json:"price_cents" msgpack:"price_cents"`
	Currency   string   `json:"currency" msgpack:"currency"`
	Tags       []string `json:"tags,omitempty" msgpack:"tags,omitempty"`
}

// benchProduct returns a realistic product of about 1 KiB as JSON: a
// descriptive name and the schema's 16 tags, words drawn from a fixed
// seed (not one repeated byte, so s2 compresses it as it would real text).
func benchProduct() (product, []byte) {
	words := strings.Fields(`solar garden lamp warm white outdoor lighting stainless steel waterproof
		pathway patio lantern dusk dawn sensor rechargeable battery modern classic black bronze copper
		glass frosted motion decorative landscape yard driveway fence deck stake wall mount hanging
		energy saving long lasting weather resistant brushed finish bulb filament vintage`)
	rng := rand.New(rand.NewPCG(42, 1024))
	phrase := func(n int, sep string) string {
		w := make([]string, n)
		for i := range w {
			w[i] = words[rng.IntN(len(words))]
		}
		return strings.Join(w, sep)
	}
	p := product{ID: "sku-000042", Name: phrase(12, " "), PriceCents: 12999, Currency: "EUR"}
	for range 16 {
		p.Tags = append(p.Tags, phrase(6, "-"))
	}
	for {
		b, _ := json.Marshal(&p)
		if len(b) >= 1024 {
			return p, b
		}
		p.Name += " " + phrase(1, "")
	}
}

// hintSecret authenticates the L1 invalidation hints of the bench's hosts.
var hintSecret = policy.NewSecret([]byte("bench-only-cache-hint-secret-0123456789"))

// Cache region ids.
const (
	regionProducts = "products"    // codec guest "product", no L1
	regionRaw      = "raw"         // built-in bytes codec, no L1
	regionL1       = "products-l1" // codec guest "product", L1
	regionHot      = "hot"         // bytes codec, 1 s hard TTL, no stale window: the stampede
)

// Stampede parameters.
const (
	stampedeTTL  = time.Second
	stampedeLoad = 20 * time.Millisecond
)

// cacheConfig declares the bench's regions as configuration would
// (`codec: product`, no L1, ...). With guests false only the stampede
// region is declared (host B has no codec guest).
func cacheConfig(guests bool) cache.Config {
	region := func(id, codec string, hard time.Duration) policy.CacheRegionDecl {
		return policy.CacheRegionDecl{ID: id, Source: "config", KeyVersion: 1, Codec: codec, HardTTL: hard,
			MaxBytes: 16 << 10, Consistency: policy.CacheBoundedStaleness, Stampede: policy.CacheStampedeDistributed}
	}
	// The L1 region keeps an entry as long as go-redis/cache's TinyLFU
	// does (an hour), so every measured op can be an L1 hit.
	l1ops := policy.DefaultCacheOps()
	l1ops.L1.MaxAge = time.Hour
	l1 := region(regionL1, "product", time.Hour)
	l1.L1, l1.Ops = true, &l1ops
	hot := region(regionHot, policy.CacheBuiltinCodec, stampedeTTL)
	regions := []policy.CacheRegionDecl{hot}
	if guests {
		regions = append(regions, region(regionProducts, "product", time.Hour),
			region(regionRaw, policy.CacheBuiltinCodec, time.Hour), l1)
	}
	return cache.Config{Role: policy.RoleCache, Defaults: policy.DefaultCacheOps(), Bounds: policy.DefaultCacheBounds(),
		HintSecret: hintSecret, HintWindow: cache.DefaultHintWindow, Regions: regions}
}

// codecGuests serves the reference codec guest to a Cache, as the host's
// module registry does.
type codecGuests struct {
	mgr  *plugins.Manager
	mods map[abi.Kind][]string
}

func (g *codecGuests) Manager() *plugins.Manager         { return g.mgr }
func (g *codecGuests) ModulesOfKind(k abi.Kind) []string { return slices.Clone(g.mods[k]) }

// codecWasm is where `make guests` leaves the reference codec guest, with
// its self-test vectors bundled (relative to bench/, where make bench runs),
// and codecASWasm its AssemblyScript twin (guests/codec-as), which answers
// every request byte for byte alike.
const (
	codecWasm   = "../build/guests/codec.wasm"
	codecASWasm = "../build/guests/codec-as.wasm"
)

// loadCodecGuest loads build/guests/codec.wasm as module "codec".
func loadCodecGuest(ctx context.Context, path string) (*codecGuests, func(), error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("the cache rows need the codec guest: %w (run `make guests`, or `make bench`, which builds them)", err)
	}
	mgr, closeGuest, err := loadGuest(ctx, "codec", wasm, serveLimits())
	if err != nil {
		return nil, nil, err
	}
	g := &codecGuests{mgr: mgr, mods: map[abi.Kind][]string{}}
	err = mgr.Use(ctx, "codec", func(m plugins.Guest) error {
		for _, k := range m.Description().Kinds {
			g.mods[k] = append(g.mods[k], "codec")
		}
		return nil
	})
	if err != nil {
		closeGuest()
		return nil, nil, err
	}
	return g, closeGuest, nil
}

// serveLimits are the limits `caphost serve` gives a guest module whose
// configuration names none (host/config.DefaultGuestLimits; not imported,
// to keep its configuration loader out of the bench): a pool of 4
// instances, a 100 ms call deadline, 16 MiB of memory, recycling after
// 100,000 calls.
func serveLimits() plugins.Limits {
	return plugins.Limits{MemoryPages: 256, CallTimeout: 100 * time.Millisecond, MaxInputBytes: 64 << 10,
		MaxOutputBytes: 64 << 10, MaxHostCalls: 64, PoolSize: 4, RecycleAfter: 100_000, MaxStackBytes: 1 << 20}
}

// loadGuest loads one guest module in a native engine.
func loadGuest(ctx context.Context, name string, wasm []byte, lim plugins.Limits) (*plugins.Manager, func(), error) {
	eng, err := plugins.NewEngine(plugins.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, err
	}
	// The bench loads the module it just built: no pin to check against.
	mgr := plugins.NewManager(eng, plugins.ManagerOptions{Verify: plugins.AcceptAnyModule})
	if err := mgr.Load(ctx, name, wasm, lim); err != nil {
		_ = eng.Close(context.Background())
		return nil, nil, err
	}
	return mgr, func() {
		_ = mgr.Close(context.Background())
		_ = eng.Close(context.Background())
	}, nil
}

// newHost builds a runtime on the bench's Redis, bound to the cache role,
// and a Cache on it.
func (s *cacheSides) newHost(ctx context.Context, o runOpts, cfg cache.Config, g cache.Guests) (*cache.Cache, error) {
	discard := slog.New(slog.DiscardHandler)
	rt, err := runtime.New(ctx, benchRedisConfig(o.addr, o.idleCheck, policy.RoleCache), runtime.WithLogger(discard))
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = rt.Close(context.Background()) })
	dep, err := rt.Role(policy.RoleCache)
	if err != nil {
		return nil, err
	}
	co := cache.Options{Log: discard}
	if g != nil {
		co.Guests = g
	}
	c, err := cache.New(ctx, dep, rt.Keys(), cfg, co)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = c.Close(context.Background()) })
	return c, nil
}

// goCache is one go-redis/cache instance on a client of its own, as a
// process of its own would have.
type goCache struct {
	c  *redis.Client
	cd *gocache.Cache
}

func newGoCache(plain *redis.Client, local gocache.LocalCache) *goCache {
	c := redis.NewClient(plain.Options())
	return &goCache{c: c, cd: gocache.New(&gocache.Options{Redis: c, LocalCache: local, StatsEnabled: true})}
}

// redisHits counts the Gets go-redis/cache answered from Redis (hits and
// misses): an L1 hit counts neither.
func (g *goCache) redisHits() uint64 {
	s := g.cd.Stats()
	return s.Hits + s.Misses
}

// cacheSides is everything the cache rows compare.
type cacheSides struct {
	json        []byte
	hostA       *cache.Cache
	hostB       *cache.Cache
	hostC       *cache.Cache // region products through the codec guest's AssemblyScript twin
	gcTyped     *goCache     // L2, Get into a product (msgpack + s2)
	gcTypedTwin *goCache
	gcBytes     *goCache // L2, Get into *[]byte
	gcL1        *goCache // TinyLFU
	gcL1Twin    *goCache
	closers     []func()
}

func (s *cacheSides) close() {
	for _, f := range slices.Backward(s.closers) {
		f()
	}
}

// Keys of the go-redis/cache side (caphost's are its region keys).
const (
	gcKeyTyped = "bench:gocache:product"
	gcKeyBytes = "bench:gocache:raw"
	gcKeyL1    = "bench:gocache:product-l1"
	cacheKey   = "sku-000042"
)

// newCacheSides builds both sides and stores the value on each.
func newCacheSides(ctx context.Context, plain *redis.Client, o runOpts) (_ *cacheSides, err error) {
	s := &cacheSides{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	p, value := benchProduct()
	s.json = value
	guests, closeGuest, err := loadCodecGuest(ctx, o.codecWasm)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, closeGuest)
	// Two hosts, each with its runtime and cache, as two processes on the
	// same Redis; host A has the codec guest and every region.
	if s.hostA, err = s.newHost(ctx, o, cacheConfig(true), guests); err != nil {
		return nil, err
	}
	if s.hostB, err = s.newHost(ctx, o, cacheConfig(false), nil); err != nil {
		return nil, err
	}
	// Host C reads region products through the AssemblyScript twin of the
	// codec guest: the same entries, the same answers, another language.
	twin, closeTwin, err := loadCodecGuest(ctx, o.codecASWasm)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, closeTwin)
	cfgC := cacheConfig(true)
	cfgC.Regions = slices.DeleteFunc(cfgC.Regions, func(d policy.CacheRegionDecl) bool { return d.ID != regionProducts })
	if s.hostC, err = s.newHost(ctx, o, cfgC, twin); err != nil {
		return nil, err
	}

	for _, id := range []string{regionProducts, regionRaw, regionL1} {
		r, err := s.hostA.Region(id)
		if err != nil {
			return nil, err
		}
		o, err := r.Record(ctx, cache.Parts(cacheKey), value, cache.RecordMeta{})
		if err != nil {
			return nil, fmt.Errorf("caphost: record %s: %w", id, err)
		}
		if o != cache.Recorded {
			return nil, fmt.Errorf("caphost: record %s: %v", id, o)
		}
	}
	if err := awaitL1(ctx, s.hostA); err != nil {
		return nil, err
	}

	gc := func(local gocache.LocalCache) *goCache {
		g := newGoCache(plain, local)
		s.closers = append(s.closers, func() { _ = g.c.Close() })
		return g
	}
	s.gcTyped, s.gcTypedTwin, s.gcBytes = gc(nil), gc(nil), gc(nil)
	s.gcL1, s.gcL1Twin = gc(gocache.NewTinyLFU(1000, time.Hour)), gc(gocache.NewTinyLFU(1000, time.Hour))
	if err := s.gcTyped.cd.Set(&gocache.Item{Ctx: ctx, Key: gcKeyTyped, Value: &p, TTL: time.Hour}); err != nil {
		return nil, err
	}
	for _, k := range []string{gcKeyBytes, gcKeyL1} {
		if err := s.gcBytes.cd.Set(&gocache.Item{Ctx: ctx, Key: k, Value: value, TTL: time.Hour, SkipLocalCache: true}); err != nil {
			return nil, err
		}
	}
	// Both sides hand back the value they were given.
	var got product
	if err := s.gcTyped.cd.Get(ctx, gcKeyTyped, &got); err != nil || !jsonEqual(&got, value) {
		return nil, fmt.Errorf("go-redis/cache: the product did not round-trip (%v)", err)
	}
	for _, h := range []struct {
		host *cache.Cache
		id   string
	}{{s.hostA, regionProducts}, {s.hostA, regionRaw}, {s.hostC, regionProducts}} {
		r, _ := h.host.Region(h.id)
		lk, err := r.Lookup(ctx, cache.Parts(cacheKey))
		if err != nil || lk.Kind != cache.Hit || !bytes.Equal(lk.Value, value) {
			return nil, fmt.Errorf("caphost: %s did not round-trip (%v, %v)", h.id, lk.Kind, err)
		}
	}
	return s, nil
}

func jsonEqual(p *product, want []byte) bool {
	b, err := json.Marshal(p)
	return err == nil && bytes.Equal(b, want)
}

// awaitL1 waits until host's L1 serves: the hint subscription is confirmed
// (only then is L1 filled and used).
func awaitL1(ctx context.Context, host *cache.Cache) error {
	r, err := host.Region(regionL1)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		lk, err := r.Lookup(ctx, cache.Parts(cacheKey))
		if err != nil {
			return err
		}
		if lk.Kind == cache.Hit && lk.FromL1 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("caphost: L1 never served within 10 s: the hint subscription did not come up")
}

// lookupOp is a caphost Lookup of the bench key in region id that must be
// a hit, from L1 exactly when fromL1.
func lookupOp(name string, host *cache.Cache, id string, fromL1 bool) contender {
	r, err := host.Region(id)
	if err != nil {
		panic(err) // the region was declared and recorded above
	}
	key := cache.Parts(cacheKey)
	return contender{name, func(ctx context.Context) error {
		lk, err := r.Lookup(ctx, key)
		switch {
		case err != nil:
			return err
		case lk.Kind != cache.Hit:
			return fmt.Errorf("%s: %v %v, not a hit: the row would measure the wrong thing", name, lk.Kind, lk.MissReason)
		case lk.FromL1 != fromL1:
			return fmt.Errorf("%s: a hit with FromL1=%v: the row would measure the wrong thing", name, lk.FromL1)
		}
		return nil
	}}
}

// appendOp is lookupOp's L1 hit through LookupAppend into a buffer from a
// pool, as a server that answers many lookups would hold one per request.
func appendOp(name string, host *cache.Cache, id string) contender {
	r, err := host.Region(id)
	if err != nil {
		panic(err) // the region was declared and recorded above
	}
	key := cache.Parts(cacheKey)
	bufs := sync.Pool{New: func() any { return new([]byte) }}
	return contender{name, func(ctx context.Context) error {
		buf := bufs.Get().(*[]byte)
		defer bufs.Put(buf)
		lk, err := r.LookupAppend(ctx, key, (*buf)[:0])
		switch {
		case err != nil:
			return err
		case lk.Kind != cache.Hit || !lk.FromL1:
			return fmt.Errorf("%s: %v FromL1=%v, not an L1 hit: the row would measure the wrong thing", name, lk.Kind, lk.FromL1)
		}
		*buf = lk.Value
		return nil
	}}
}

// typedOp is go-redis/cache's Get into a product.
func typedOp(name string, g *goCache) contender {
	return contender{name, func(ctx context.Context) error {
		var p product
		return g.cd.Get(ctx, gcKeyTyped, &p)
	}}
}

// bytesOp is go-redis/cache's Get into a []byte (its copy of the stored
// bytes, from TinyLFU when g has one).
func bytesOp(name string, g *goCache, key string) contender {
	return contender{name, func(ctx context.Context) error {
		var b []byte
		return g.cd.Get(ctx, key, &b)
	}}
}

// cacheSolo runs every cache lookup contender whose name contains o.solo
// alone, as rateSolo does for the rate contenders: one side's profile, or
// its system calls per op under strace -c.
func cacheSolo(ctx context.Context, plain *redis.Client, o runOpts) error {
	names := []string{"go-redis/cache Get→product", "go-redis/cache Get→[]byte", "go-redis/cache TinyLFU Get→[]byte",
		"caphost Lookup, product guest", "caphost Lookup, bytes codec", "caphost Lookup, L1", "caphost LookupAppend, L1",
		"caphost Lookup, product guest in AssemblyScript"}
	if !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, o.solo) }) {
		return nil
	}
	s, err := newCacheSides(ctx, plain, o)
	if err != nil {
		return err
	}
	defer s.close()
	for _, c := range []contender{
		typedOp(names[0], s.gcTyped), bytesOp(names[1], s.gcBytes, gcKeyBytes), bytesOp(names[2], s.gcL1, gcKeyL1),
		lookupOp(names[3], s.hostA, regionProducts, false),
		lookupOp(names[7], s.hostC, regionProducts, false),
		lookupOp(names[4], s.hostA, regionRaw, false),
		lookupOp(names[5], s.hostA, regionL1, true), appendOp(names[6], s.hostA, regionL1),
	} {
		if !strings.Contains(c.name, o.solo) {
			continue
		}
		measure(ctx, c, o.soloGoroutines, o.dur/4) // warm
		m := measure(ctx, c, o.soloGoroutines, o.dur)
		fmt.Printf("%-48s %d goroutine(s): %9.0f op/s, client cpu/op %.1fµs\n", c.name, o.soloGoroutines,
			float64(m.ops)/m.elapsed.Seconds(), float64(m.cpu.Nanoseconds())/1000/float64(m.ops))
	}
	return nil
}

// cacheRows runs the cache rows (labels "cache ...").
func cacheRows(ctx context.Context, plain *redis.Client, o runOpts,
	want func(string) bool, row func(string, []result), stats func([]contender, int)) error {
	labels := []string{"cache L2 hit, codec guest, 1 gor.", "cache L2 hit, codec guest, 32 gor.",
		"cache L2 hit, codec guest in AssemblyScript, 1 gor.", "cache L2 hit, codec guest in AssemblyScript, 32 gor.",
		"cache L2 hit, bytes codec, 1 gor.", "cache L2 hit, bytes codec, 32 gor.",
		"  cache L2 A/A control, 1", "  cache L2 A/A control, 32",
		"cache L1 hit, 1 gor.", "cache L1 hit, 32 gor.", "cache L1 hit, caller's buffer, 1 gor.",
		"cache L1 hit, caller's buffer, 32 gor.", "  cache L1 A/A control, 1", "  cache L1 A/A control, 32",
		stampedeLabel, stampedeControlLabel}
	if !slices.ContainsFunc(labels, want) {
		return nil
	}
	s, err := newCacheSides(ctx, plain, o)
	if err != nil {
		return err
	}
	defer s.close()
	dur, slice, rounds := o.dur, o.slice, o.rounds
	fmt.Printf("\ncache rows: left column = github.com/go-redis/cache/v9, right = caphost host/cache; value %d bytes of product JSON\n", len(s.json))

	guestOp := lookupOp("caphost Lookup, product guest", s.hostA, regionProducts, false)
	twinOp := lookupOp("caphost Lookup, product guest in AssemblyScript", s.hostC, regionProducts, false)
	rawOp := lookupOp("caphost Lookup, bytes codec", s.hostA, regionRaw, false)
	l1Op := lookupOp("caphost Lookup, L1", s.hostA, regionL1, true)
	l1AppendOp := appendOp("caphost LookupAppend, L1", s.hostA, regionL1)
	groups := []struct {
		label    string
		peer     contender
		ours     contender
		isL1     bool
		twin     contender
		twinPeer *goCache
	}{
		{label: "cache L2 hit, codec guest", peer: typedOp("go-redis/cache Get→product", s.gcTyped), ours: guestOp},
		{label: "cache L2 hit, codec guest in AssemblyScript", peer: typedOp("go-redis/cache Get→product", s.gcTyped), ours: twinOp},
		{label: "cache L2 hit, bytes codec", peer: bytesOp("go-redis/cache Get→[]byte", s.gcBytes, gcKeyBytes), ours: rawOp},
		{label: "  cache L2 A/A control", peer: typedOp("go-redis/cache Get→product", s.gcTyped),
			twin: typedOp("go-redis/cache Get→product (twin)", s.gcTypedTwin)},
		{label: "cache L1 hit", peer: bytesOp("go-redis/cache TinyLFU Get→[]byte", s.gcL1, gcKeyL1), ours: l1Op, isL1: true},
		{label: "cache L1 hit, caller's buffer", peer: bytesOp("go-redis/cache TinyLFU Get→[]byte", s.gcL1, gcKeyL1), ours: l1AppendOp, isL1: true},
		{label: "  cache L1 A/A control", peer: bytesOp("go-redis/cache TinyLFU Get→[]byte", s.gcL1, gcKeyL1),
			twin: bytesOp("go-redis/cache TinyLFU Get→[]byte (twin)", s.gcL1Twin, gcKeyL1), isL1: true, twinPeer: s.gcL1Twin},
	}
	for _, gr := range groups {
		for _, g := range []int{1, 32} {
			var label string
			if gr.twin.op != nil {
				if !o.control {
					continue
				}
				label = fmt.Sprintf("%s, %d", gr.label, g)
			} else {
				label = fmt.Sprintf("%s, %d gor.", gr.label, g)
			}
			if !want(label) {
				continue
			}
			cs := []contender{gr.peer, gr.ours}
			if gr.twin.op != nil {
				cs[1] = gr.twin
			}
			// go-redis/cache's L1 rows must be L1 hits too: fill TinyLFU
			// first, then no Get may reach Redis.
			var l1s []*goCache
			if gr.isL1 {
				l1s = append(l1s, s.gcL1)
				if gr.twinPeer != nil {
					l1s = append(l1s, gr.twinPeer)
				}
			}
			before := make([]uint64, len(l1s))
			for i, g := range l1s {
				var b []byte
				if err := g.cd.Get(ctx, gcKeyL1, &b); err != nil {
					return err
				}
				before[i] = g.redisHits()
			}
			row(label, compare(ctx, cs, g, dur, slice, rounds))
			for i, g := range l1s {
				if n := g.redisHits() - before[i]; n != 0 {
					return fmt.Errorf("%s: go-redis/cache answered %d Gets from Redis, not TinyLFU: the row measured the wrong thing", label, n)
				}
			}
			if !gr.isL1 && gr.twin.op == nil {
				stats(cs, g)
			}
		}
	}
	if want(stampedeLabel) || (o.control && want(stampedeControlLabel)) {
		if err := stampedeRows(ctx, s, plain, o, want); err != nil {
			return err
		}
	}
	fmt.Println(`cache rows: ratio target ≥ 0.95× (L2, 1 gor.), ≥ 1.0× (L2, 32 gor.; L1). What each side hands the caller:
  L2 codec guest: caphost the product's interchange JSON bytes (envelope checked, payload decoded, validated
    and re-encoded canonically by the codec guest's "product" schema, in Wasm); go-redis/cache a decoded
    product struct (its default codec: s2 + msgpack into a Go struct). Each side's own schema-aware decode.
    "in AssemblyScript": the same schema and answers from the codec guest's AssemblyScript twin (codec-as).
  L2 bytes codec: both a private copy of the same JSON bytes (caphost: envelope checked, built-in codec;
    go-redis/cache: Get into *[]byte, stored raw). The gap between the two caphost rows is the guest's share.
  L1: both a private copy of the same JSON bytes from the in-process cache (caphost L1, max-age 1 h, hints up;
    go-redis/cache TinyLFU, TTL 1 h); every measured op was checked to be an L1 hit on both sides.
  L1 caller's buffer: caphost LookupAppend copies the value into a pooled buffer of the caller's (no
    allocation); go-redis/cache, which has no such call, as in the L1 row (a new []byte per Get).
  caphost L2 is one GETRANGE under the shard generation it trusts while hints are up (generation-trust
    1 s; once a second per shard GET generation + GETRANGE in one pipeline); go-redis/cache one GET.
  The codec guest runs with caphost serve's default limits (pool 4, 100 ms deadline, 16 MiB, recycle-after
  100000).`)
	return nil
}
