package l1_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/caphost/caphost/host/cache/l1"
)

const benchKeys = 1024

func benchCache(b *testing.B) (*l1.Cache[[]byte], []l1.Key) {
	l, err := l1.New[[]byte](l1.Config{MaxEntries: 100_000, MaxBytes: 64 << 20, MaxAge: time.Hour, Clock: time.Now})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	ks := ekPool(benchKeys)
	val := make([]byte, 256)
	for _, k := range ks {
		if o := l.Set(l.Ticket(), k, val, len(val), time.Now().Add(time.Hour)); o != l1.Stored {
			b.Fatal(o)
		}
	}
	return l, ks
}

// BenchmarkGetHit is the L1 hit path: one goroutine, then 32.
func BenchmarkGetHit(b *testing.B) {
	b.Run("goroutines=1", func(b *testing.B) {
		l, ks := benchCache(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, ok := l.Get(ks[i&(benchKeys-1)]); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})
	b.Run("goroutines=32", func(b *testing.B) {
		l, ks := benchCache(b)
		b.ReportAllocs()
		b.SetParallelism(max(32/runtime.GOMAXPROCS(0), 1))
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, ok := l.Get(ks[i&(benchKeys-1)]); !ok {
					b.Error("miss")
					return
				}
				i++
			}
		})
	})
}

// BenchmarkSet replaces entries of 256-byte values.
func BenchmarkSet(b *testing.B) {
	l, ks := benchCache(b)
	val := make([]byte, 256)
	hard := time.Now().Add(time.Hour)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.Set(l.Ticket(), ks[i&(benchKeys-1)], val, len(val), hard)
		i++
	}
}
