package l1_test

import (
	"testing"
	"time"

	"github.com/maypok86/otter/v2"
)

// BenchmarkFloor is the control for BenchmarkGetHit in the same run: the
// library's own GetIfPresent on uint64 keys (what L1 maps), weighted,
// without and with write expiry, and one read of the clock.
func BenchmarkFloor(b *testing.B) {
	keys := make([]uint64, benchKeys)
	for i := range keys {
		keys[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	for _, expiry := range []string{"none", "precise", "coarse"} {
		b.Run("otter/expiry="+expiry, func(b *testing.B) {
			o := &otter.Options[uint64, []byte]{
				MaximumWeight: 64 << 20,
				Weigher:       func(_ uint64, v []byte) uint32 { return uint32(8 + len(v)) },
				Executor:      func(fn func()) { fn() },
			}
			if expiry != "none" {
				o.ExpiryCalculator = otter.ExpiryWriting[uint64, []byte](time.Hour)
			}
			if expiry == "coarse" {
				cc := otter.NewCoarseClock(time.Second)
				b.Cleanup(cc.Stop)
				o.Clock = cc
			}
			c := otter.Must(o)
			b.Cleanup(func() { c.StopAllGoroutines() })
			for _, k := range keys {
				c.Set(k, make([]byte, 256))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := c.GetIfPresent(keys[i&(benchKeys-1)]); !ok {
					b.Fatal("miss")
				}
				i++
			}
		})
	}
	b.Run("time.Now", func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += time.Now().UnixNano()
		}
		_ = s
	})
}
