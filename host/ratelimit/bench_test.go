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
// Evaluate against a private redis-server, with 1 and 32 goroutines, for
// the policy as configured by default (dedup off) and with evaluation-id
// dedup (the limiter mints an id per call). Requests are built before the
// timer starts, so allocs/op is the limiter's own (go-redis included).
func BenchmarkEvaluateTokenBucket(b *testing.B) {
	s := redistest.StartStandalone(b)
	params := policy.RateParameters{Capacity: 1_000_000, RefillTokens: 1_000_000, RefillPeriod: time.Second}
	tb := policy.RatePolicyDecl{ID: "tb", Revision: "r1", Algorithm: policy.RateTokenBucket, Parameters: params,
		Dimensions: []policy.RateDimension{policy.DimTenant}}
	tbd := policy.RatePolicyDecl{ID: "tb-dedup", Revision: "r1", Algorithm: policy.RateTokenBucket, Parameters: params,
		Dimensions: []policy.RateDimension{policy.DimTenant}, Dedup: policy.RateDedup{Enabled: true}}
	f := newFixture(b, s.Addr(), s, Config{Provider: ProviderRedis}, nil, tb, tbd)
	for _, pol := range []string{"tb", "tb-dedup"} {
		reqs := make([]Request, 64)
		for i := range reqs {
			reqs[i] = Request{Policy: pol, Subject: tenant("t" + strconv.Itoa(i)), Cost: 1}
		}
		for _, par := range []int{1, 32} {
			b.Run("policy="+pol+"/goroutines="+strconv.Itoa(par), func(b *testing.B) {
				var n atomic.Int64
				// RunParallel starts parallelism × GOMAXPROCS goroutines.
				b.SetParallelism(max(1, par/goruntime.GOMAXPROCS(0)))
				b.ReportAllocs()
				b.ResetTimer()
				if par == 1 {
					for i := 0; i < b.N; i++ {
						if o := f.l.Evaluate(context.Background(), reqs[i%64]); o.Kind() != Evaluated {
							b.Fatal(o.Kind(), o.Category())
						}
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						if o := f.l.Evaluate(context.Background(), reqs[i%64]); o.Kind() != Evaluated {
							b.Error(o.Kind(), o.Category())
							return
						}
					}
				})
			})
		}
	}
}
