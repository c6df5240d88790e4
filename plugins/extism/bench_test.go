package extism

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// caller is what both flavours' modules offer the benchmarks.
type caller interface {
	Call(ctx context.Context, e abi.Export, in, out []byte) ([]byte, error)
	RateSelect(ctx context.Context, req *abi.RateSelectRequest) (*abi.RateSelectResponse, error)
}

// BenchmarkCall256 is the 256-byte round trip of DESIGN §9 through each
// flavour side by side (the same benchmark as plugins.BenchmarkCall256):
// native = testdata/guests/echo on plugins.Engine, extism = the go-pdk
// testguest's echo codec on this package's Engine.
func BenchmarkCall256(b *testing.B) {
	in := (&abi.CodecEncodeRequest{Schema: "echo", Value: make([]byte, 256)}).AppendTo(nil)
	ctx := context.Background()
	flavours := func(lim plugins.Limits) map[string]caller {
		return map[string]caller{
			"native": loadNative(b, newNative(b, plugins.Config{}), "echo", lim),
			"extism": loadExt(b, newExtism(b, plugins.Config{}), "testguest", lim),
		}
	}
	for _, name := range []string{"native", "extism"} {
		b.Run(name+"/pool1", func(b *testing.B) {
			m := flavours(plugins.Limits{PoolSize: 1, CallTimeout: 2 * time.Second})[name]
			b.ReportAllocs()
			b.SetBytes(256)
			out := make([]byte, 0, 512)
			for b.Loop() {
				var err error
				if out, err = m.Call(ctx, abi.ExportCodecEncode, in, out[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel32", func(b *testing.B) {
			m := flavours(plugins.Limits{PoolSize: 8, CallTimeout: 2 * time.Second})[name]
			warm(b, m, in)
			b.ReportAllocs()
			b.SetBytes(256)
			b.SetParallelism(16)
			b.ResetTimer() // RunParallel does not: the warm-up stays out
			b.RunParallel(func(pb *testing.PB) {
				out := make([]byte, 0, 512)
				for pb.Next() {
					var err error
					if out, err = m.Call(ctx, abi.ExportCodecEncode, in, out[:0]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// warm grows m's pool to its size before timing: 32 concurrent callers
// make every instance exist (instantiating one costs milliseconds, which
// would otherwise be timed as call cost).
func warm(b *testing.B, m caller, in []byte) {
	b.Helper()
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if _, err := m.Call(context.Background(), abi.ExportCodecEncode, in, nil); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkRateSelect is the typed rate-policy call through each flavour of
// the reference guest: native (Go SDK), extism (Go PDK) and as
// (AssemblyScript PDK, the module `make guests` built).
func BenchmarkRateSelect(b *testing.B) {
	ctx := context.Background()
	req := &abi.RateSelectRequest{Route: "/search/items", Method: "GET", APIKeyPlan: "pro", ClientIPClass: "public",
		Attrs: []abi.Attr{{Name: "region", Value: "eu"}}}
	// A benchmark measures speed, not deadlines: on a loaded machine one
	// Extism call (about 230 KB of garbage each) can stall past the default
	// 100 ms call timeout.
	lim := plugins.Limits{PoolSize: 1, CallTimeout: 2 * time.Second}
	for name, load := range map[string]func() caller{
		"native": func() caller { return loadNative(b, newNative(b, plugins.Config{}), "rate-policy", lim) },
		"extism": func() caller { return loadExt(b, newExtism(b, plugins.Config{}), "rate-policy-extism", lim) },
		"as":     func() caller { return loadAS(b, newExtism(b, plugins.Config{}), lim) },
	} {
		b.Run(name, func(b *testing.B) {
			m := load()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.RateSelect(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
