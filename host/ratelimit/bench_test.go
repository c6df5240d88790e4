package ratelimit

import (
	"context"
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// BenchmarkEvaluateTokenBucket measures one token-bucket decision through
// Evaluate against a private redis-server, with 1 and 32 goroutines.
func BenchmarkEvaluateTokenBucket(b *testing.B) {
	s := redistest.StartStandalone(b)
	tb := policy.RatePolicyDecl{ID: "tb", Revision: "r1", Algorithm: policy.RateTokenBucket,
		Parameters: policy.RateParameters{Capacity: 1_000_000, RefillTokens: 1_000_000, RefillPeriod: time.Second},
		Dimensions: []policy.RateDimension{policy.DimTenant}}
	f := newFixture(b, s.Addr(), s, Config{Provider: ProviderRedis}, nil, tb)
	for _, par := range []int{1, 32} {
		b.Run("goroutines="+strconv.Itoa(par), func(b *testing.B) {
			var n atomic.Int64
			// RunParallel starts parallelism × GOMAXPROCS goroutines.
			b.SetParallelism(max(1, par/goruntime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			if par == 1 {
				for i := 0; i < b.N; i++ {
					if o := f.l.Evaluate(context.Background(), Request{Policy: "tb", Subject: tenant("t" + strconv.Itoa(i%64)), Cost: 1}); o.Kind() != Evaluated {
						b.Fatal(o.Kind(), o.Category())
					}
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if o := f.l.Evaluate(context.Background(), Request{Policy: "tb", Subject: tenant("t" + strconv.Itoa(int(i%64))), Cost: 1}); o.Kind() != Evaluated {
						b.Error(o.Kind(), o.Category())
						return
					}
				}
			})
		})
	}
}
