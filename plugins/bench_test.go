package plugins

import (
	"context"
	"testing"
	"time"

	"github.com/caphost/caphost/abi"
)

// BenchmarkCall256 is a 256-byte round trip (request in, 256-byte payload
// out) through the native flavour: memory handoff, call, frame copy.
func BenchmarkCall256(b *testing.B) {
	in := (&abi.CodecEncodeRequest{Schema: "echo", Value: make([]byte, 256)}).AppendTo(nil)
	ctx := context.Background()
	run := func(b *testing.B, m *Module, parallel bool) {
		b.ReportAllocs()
		b.SetBytes(256)
		if !parallel {
			out := make([]byte, 0, 512)
			for b.Loop() {
				var err error
				if out, err = m.Call(ctx, abi.ExportCodecEncode, in, out[:0]); err != nil {
					b.Fatal(err)
				}
			}
			return
		}
		b.SetParallelism(16) // 16 x GOMAXPROCS(2) = 32 goroutines
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
	}
	e := newEngine(b, Config{})
	b.Run("pool1", func(b *testing.B) { run(b, load(b, e, "echo", Limits{PoolSize: 1}), false) })
	b.Run("parallel32", func(b *testing.B) {
		run(b, load(b, e, "echo", Limits{PoolSize: 8, CallTimeout: 2 * time.Second}), true)
	})
	b.Run("typed-pool1", func(b *testing.B) {
		m := load(b, e, "echo", Limits{PoolSize: 1})
		req := &abi.CodecEncodeRequest{Schema: "echo", Value: make([]byte, 256)}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.CodecEncode(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkInstantiate measures a new instance of a Go guest: instantiation
// from the compiled module plus _initialize.
func BenchmarkInstantiate(b *testing.B) {
	m := load(b, newEngine(b, Config{}), "rate-policy", Limits{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		inst, gerr := m.newInstance(ctx)
		if gerr != nil {
			b.Fatal(gerr)
		}
		m.discard(inst)
	}
}
