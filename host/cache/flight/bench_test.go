package flight_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/caphost/caphost/host/cache/flight"
)

// BenchmarkDoUncontended is the price of the single-flight on a miss
// nobody shares: one goroutine, a fresh load per call (its goroutine, its
// detached context and its deadline timer).
func BenchmarkDoUncontended(b *testing.B) {
	g, err := flight.New[string, int](flight.Config{MaxKeys: 1024, MaxWaiters: 1024, LoadTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close)
	fn := func(context.Context) (int, error) { return 1, nil }
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := g.Do(ctx, "item:7", fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoShared32: 32 goroutines miss one hot key, against a source
// that takes a while; loads/op shows how many misses one load absorbs.
func BenchmarkDoShared32(b *testing.B) {
	g, err := flight.New[string, int](flight.Config{MaxKeys: 1024, MaxWaiters: 1024, LoadTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close)
	// The load yields a few times so that concurrent misses find it in
	// flight, as they would find a source round trip.
	fn := func(context.Context) (int, error) {
		for range 4 {
			runtime.Gosched()
		}
		return 1, nil
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(max(32/runtime.GOMAXPROCS(0), 1))
	var once sync.Once
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := g.Do(ctx, "hot", fn); err != nil {
				once.Do(func() { b.Error(err) })
				return
			}
		}
	})
	s := g.Stats()
	b.ReportMetric(float64(s.Loads)/float64(b.N), "loads/op")
}

// BenchmarkBulkheadAcquire is a permit taken and given back, uncontended.
func BenchmarkBulkheadAcquire(b *testing.B) {
	bh, err := flight.NewBulkhead(32, 256)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := bh.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		r()
	}
}
