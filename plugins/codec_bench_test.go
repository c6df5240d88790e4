package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/caphost/caphost/abi"
)

// codecProduct1K is a product of about 1 KiB in the codec guest's "product"
// schema, in canonical form (the value host/cache's benchmarks cache).
func codecProduct1K(tb testing.TB) []byte {
	tb.Helper()
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
			tb.Fatal(err)
		}
		if len(out) >= 1024 {
			return out
		}
		v.Name += " lamp"
	}
}

// BenchmarkCodecGuestProduct1K is one typed call of the reference codec
// guest (guests/codec) on a 1 KiB product, as the cache makes it on every
// L2 hit (decode) and record (encode): request framing, the Wasm call and
// the guest's strict reading and canonical writing. Compare with
// BenchmarkCall256 (an echo) for the cost of the call alone, and with
// guests/codec's native BenchmarkDecodeProduct1K for the codec alone.
// Sub-benchmark codec-as is its AssemblyScript twin (guests/codec-as, the
// same answers byte for byte without a Go runtime in the module), as
// `make guests` builds it.
func BenchmarkCodecGuestProduct1K(b *testing.B) {
	ctx := context.Background()
	value := codecProduct1K(b)
	for _, name := range []string{"codec", "codec-as"} {
		b.Run(name, func(b *testing.B) {
			var m *Module
			if name == "codec-as" {
				m = loadBuilt(b, newEngine(b, Config{}), name, Limits{PoolSize: 1})
			} else {
				m = load(b, newEngine(b, Config{}), name, Limits{PoolSize: 1})
			}
			warmPool(b, m)
			b.Run("decode", func(b *testing.B) {
				req := &abi.CodecDecodeRequest{Schema: "product", StoredVersion: 2, Payload: value}
				b.ReportAllocs()
				b.SetBytes(int64(len(value)))
				for b.Loop() {
					resp, err := CodecDecode(ctx, m, req)
					if err != nil || len(resp.Value) != len(value) {
						b.Fatal(err)
					}
				}
			})
			b.Run("encode", func(b *testing.B) {
				req := &abi.CodecEncodeRequest{Schema: "product", Value: value}
				b.ReportAllocs()
				b.SetBytes(int64(len(value)))
				for b.Loop() {
					resp, err := CodecEncode(ctx, m, req)
					if err != nil || len(resp.Payload) != len(value) {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// loadBuilt loads build/guests/<name>.wasm as `make guests` wrote it: a
// guest this package's test run does not build itself (an AssemblyScript
// one needs npm and asc). A missing module fails.
func loadBuilt(tb testing.TB, e *Engine, name string, lim Limits) *Module {
	tb.Helper()
	path := filepath.Join("..", "build", "guests", name+".wasm")
	wasm, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%s: %v (run `make guests` first)", path, err)
	}
	m, err := e.Load(context.Background(), name, wasm, lim)
	if err != nil {
		tb.Fatalf("load %s: %v", name, err)
	}
	return m
}
