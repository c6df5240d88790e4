package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
)

// The hit paths `make bench` compares with go-redis/cache (bench/cmd/compare,
// rows "cache"), split into their parts so a profile can say where the time
// goes: go test -run '^$' -bench . -benchmem ./host/cache/
// (-cpuprofile for one benchmark at a time).

// benchValue is a product of about 1 KiB in the "product" schema's
// interchange form (the value the compare rows cache).
func benchValue(b *testing.B) []byte {
	b.Helper()
	v := struct {
		ID         string   `json:"id"`
		Name       string   `json:"name"`
		PriceCents int      `json:"price_cents"`
		Currency   string   `json:"currency"`
		Tags       []string `json:"tags"`
	}{ID: "sku-000042", Name: "Solar garden lamp, warm white, stainless steel, waterproof, dusk to dawn sensor",
		PriceCents: 12999, Currency: "EUR", Tags: make([]string, 16)}
	for i := range v.Tags {
		v.Tags[i] = fmt.Sprintf("outdoor-lighting-%02d-pathway-patio-lantern-bronze", i)
	}
	for {
		out, err := json.Marshal(&v)
		if err != nil {
			b.Fatal(err)
		}
		if len(out) >= 1024 {
			return out
		}
		v.Name += " lamp"
	}
}

// benchGuests loads the codec guest (wasm: the Go guest this package's
// tests build, or its AssemblyScript twin) as loadGuests does, with a call
// deadline no loaded benchmark machine reaches.
func benchGuests(b *testing.B, wasm []byte) *testGuests {
	b.Helper()
	ctx := context.Background()
	eng, err := plugins.NewEngine(plugins.Config{CacheDir: th.CacheDir})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Close(ctx) })
	g := &testGuests{mgr: plugins.NewManager(eng, plugins.ManagerOptions{Verify: plugins.AcceptAnyModule}),
		mods: map[abi.Kind][]string{abi.KindCodec: {"codec"}}}
	b.Cleanup(func() { _ = g.mgr.Close(ctx) })
	if err := g.mgr.Load(ctx, "codec", wasm, plugins.Limits{CallTimeout: 5 * time.Second}); err != nil {
		b.Fatal(err)
	}
	return g
}

// benchInstance is one host with the bench regions, the value recorded in
// each: "raw" (built-in bytes codec), "products" (the codec guest's
// product schema), both without L1, and "products-l1" (L1, max-age 1 h).
func benchInstance(b *testing.B) (*instance, []byte) {
	b.Helper()
	return benchInstanceWith(b, th.Wasm("codec"))
}

// codecASWasm is the codec guest's AssemblyScript twin as `make guests`
// builds it (the compare rows' "in AssemblyScript" host): this package's
// test run does not build it, as it needs npm and asc.
func codecASWasm(b *testing.B) []byte {
	b.Helper()
	path := filepath.Join("..", "..", "build", "guests", "codec-as.wasm")
	wasm, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("%s: %v (run `make guests` first)", path, err)
	}
	return wasm
}

// benchInstanceWith is benchInstance with the codec guest wasm.
func benchInstanceWith(b *testing.B, wasm []byte) (*instance, []byte) {
	b.Helper()
	srv := redistest.StartStandalone(b)
	g := benchGuests(b, wasm)
	region := func(id, codec string) policy.CacheRegionDecl {
		return policy.CacheRegionDecl{ID: id, Source: "config", KeyVersion: 1, Codec: codec, HardTTL: time.Hour, MaxBytes: 16 << 10}
	}
	ops := policy.DefaultCacheOps()
	ops.L1.MaxAge = time.Hour
	l1 := region("products-l1", "product")
	l1.L1, l1.Ops = true, &ops
	cfg := guestConfig()
	cfg.Regions = []policy.CacheRegionDecl{region("raw", policy.CacheBuiltinCodec), region("products", "product"), l1}
	in := newInstance(b, &policy.Standalone{Endpoint: srv.Addr()}, cfg, newClock(), g)
	value := benchValue(b)
	ctx := context.Background()
	for _, id := range []string{"raw", "products", "products-l1"} {
		o, err := in.region(b, id).Record(ctx, Parts("sku-000042"), value, RecordMeta{})
		if err != nil || o != Recorded {
			b.Fatalf("record %s: %v %v", id, o, err)
		}
	}
	return in, value
}

// benchLookup runs Lookup on region id at 1 and 32 goroutines; every op
// must be a hit, from L1 exactly when fromL1.
func benchLookup(b *testing.B, in *instance, id string, fromL1 bool) {
	benchLookupWith(b, in, id, fromL1, false)
}

// benchLookupWith is benchLookup, through LookupAppend into a buffer each
// goroutine reuses when appendTo is set.
func benchLookupWith(b *testing.B, in *instance, id string, fromL1, appendTo bool) {
	r := in.region(b, id)
	lookup := func(ctx context.Context, key Key, buf *[]byte) (Lookup, error) {
		if !appendTo {
			return r.Lookup(ctx, key)
		}
		lk, err := r.LookupAppend(ctx, key, (*buf)[:0])
		*buf = lk.Value
		return lk, err
	}
	key := Parts("sku-000042")
	ctx := context.Background()
	check := func(lk Lookup, err error) error {
		switch {
		case err != nil:
			return err
		case lk.Kind != Hit || lk.FromL1 != fromL1:
			return fmt.Errorf("%v FromL1=%v, want a hit with FromL1=%v", lk.Kind, lk.FromL1, fromL1)
		}
		return nil
	}
	if fromL1 { // the hint subscription must be up before L1 serves
		deadline := time.Now().Add(10 * time.Second)
		for lk, _ := r.Lookup(ctx, key); !lk.FromL1; lk, _ = r.Lookup(ctx, key) {
			if time.Now().After(deadline) {
				b.Fatal("L1 never served: hints did not come up")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	b.Run("goroutines=1", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		var buf []byte
		for b.Loop() {
			if err := check(lookup(ctx, key, &buf)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("goroutines=32", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			var buf []byte
			for pb.Next() {
				if err := check(lookup(ctx, key, &buf)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// reportCPU starts counting this process's CPU time (user + system, every
// thread) and returns the func that reports it per op as cpu-ns/op: on a
// shared machine it moves far less with other processes' load than ns/op,
// which is wall time.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() { b.ReportMetric(float64(cpuTime()-start)/float64(max(b.N, 1)), "cpu-ns/op") }
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLookupL2 is an L2 hit through the envelope, with the built-in
// bytes codec, with the codec guest's product schema and with the same
// schema from the guest's AssemblyScript twin (build/guests/codec-as.wasm,
// the compare rows' "L2 hit through envelope + codec guest").
func BenchmarkLookupL2(b *testing.B) {
	in, _ := benchInstance(b)
	b.Run("codec=bytes", func(b *testing.B) { benchLookup(b, in, "raw", false) })
	b.Run("codec=product-guest", func(b *testing.B) { benchLookup(b, in, "products", false) })
	b.Run("codec=product-as-guest", func(b *testing.B) {
		as, _ := benchInstanceWith(b, codecASWasm(b))
		benchLookup(b, as, "products", false)
	})
}

// BenchmarkLookupL1 is an L1 hit (hints up), through Lookup (a new copy
// per hit) and through LookupAppend into a reused buffer.
func BenchmarkLookupL1(b *testing.B) {
	in, _ := benchInstance(b)
	b.Run("call=Lookup", func(b *testing.B) { benchLookupWith(b, in, "products-l1", true, false) })
	b.Run("call=LookupAppend", func(b *testing.B) { benchLookupWith(b, in, "products-l1", true, true) })
}

// BenchmarkLookupParts times the parts of a hit one at a time: the key's
// location (canonical parts, HMAC digest), the one-round-trip read
// (generation + entry), the envelope decode and the codec guest's decode
// of the stored payload (one Wasm call).
func BenchmarkLookupParts(b *testing.B) {
	in, value := benchInstance(b)
	ctx := context.Background()
	rg := in.c.state.Load().regions["products"]
	key := Parts("sku-000042")
	loc, err := in.c.locate(ctx, rg, key)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("locate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := in.c.locate(ctx, rg, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rd, _, _, err := in.c.read(ctx, rg, loc); err != nil || !rd.Found {
				b.Fatal(err, rd.Found)
			}
		}
	})
	rd, ref, moved, err := in.c.read(ctx, rg, loc)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("interpret-bytes", func(b *testing.B) {
		raw := in.c.state.Load().regions["raw"]
		rloc, err := in.c.locate(ctx, raw, key)
		if err != nil {
			b.Fatal(err)
		}
		rrd, rref, rmoved, err := in.c.read(ctx, raw, rloc)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if lk, _, err := in.c.interpret(ctx, raw, rrd, rref, rmoved, false); err != nil || lk.Kind != Hit {
				b.Fatal(err, lk.Kind)
			}
		}
	})
	b.Run("interpret-product-guest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if lk, _, err := in.c.interpret(ctx, rg, rd, ref, moved, false); err != nil || lk.Kind != Hit {
				b.Fatal(err, lk.Kind)
			}
		}
	})
	b.Run("guest-decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rg.codec.decode(ctx, 2, value); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("guest-decode-small", func(b *testing.B) {
		small := []byte(productV2)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rg.codec.decode(ctx, 2, small); err != nil {
				b.Fatal(err)
			}
		}
	})
}
