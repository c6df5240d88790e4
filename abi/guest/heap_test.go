package guest

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

const mb = 1 << 20

// intervals runs p over n calls that end with linear memory at pages and
// allocate perCall bytes each, the GC's state otherwise r, and returns the
// calls between reads and how many reads collected.
func intervals(p *heapPacer, n int, pages func(call int) uint32, perCall uint64, r gcReading) (between []int, collected int) {
	last := 0
	for call := 1; call <= n; call++ {
		r.allocs += perCall
		if !p.due(pages(call)) {
			continue
		}
		between = append(between, call-last)
		last = call
		if p.observe(r) {
			collected++
		}
	}
	return between, collected
}

func flat(pages uint32) func(int) uint32 { return func(int) uint32 { return pages } }

func TestHeapPacer(t *testing.T) {
	t.Run("a guest that does not allocate is read at doubling intervals up to maxCheckInterval, never collected", func(t *testing.T) {
		var p heapPacer
		between, collected := intervals(&p, 1000, flat(64), 0, gcReading{goal: 4 * mb, heap: mb})
		assert.Equal(t, []int{1, 2, 4, 8, 16, 32, 64, 64}, between[:8])
		assert.Zero(t, collected)
		assert.Zero(t, p.clock)
	})

	t.Run("a call that grew linear memory reads at once", func(t *testing.T) {
		var p heapPacer
		grows := func(call int) uint32 { return 64 + uint32(call/100)*8 }
		between, _ := intervals(&p, 400, grows, 0, gcReading{goal: 4 * mb, heap: mb})
		assert.Equal(t, []int{1, 2, 4, 8, 16, 32, 37, 64, 36, 64, 36, 64, 36}, between, "reads at calls 100, 200 and 300")
	})

	t.Run("the calls between reads allocate at most half the headroom", func(t *testing.T) {
		// 10 KiB a call; the bound is 4.5 MiB, 0.5 MiB above the heap:
		// 512 KiB / 2 / 10 KiB = 25 calls, reached by doubling.
		var p heapPacer
		between, collected := intervals(&p, 200, flat(64), 10<<10, gcReading{goal: 4 * mb, heap: 4 * mb})
		assert.Equal(t, []int{1, 2, 4, 8, 16, 25, 25}, between[:7])
		assert.Zero(t, collected)
		// At the bound, every call.
		p = heapPacer{}
		between, _ = intervals(&p, 10, flat(64), 10<<10, gcReading{goal: 4 * mb, heap: 4*mb + mb/2})
		assert.Equal(t, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, between)
	})

	t.Run("one light call after heavy ones buys at most twice its interval", func(t *testing.T) {
		p := heapPacer{calls: 1, allocs: 0}
		assert.False(t, p.observe(gcReading{goal: 4 * mb, heap: 3 * mb, allocs: mb}))
		assert.Equal(t, uint32(1), p.left)
		p.calls = 1
		assert.False(t, p.observe(gcReading{goal: 4 * mb, heap: 3 * mb, allocs: mb + 16}))
		assert.Equal(t, uint32(2), p.left)
	})

	t.Run("a heap past its goal by more than an eighth is collected and read again at the next call", func(t *testing.T) {
		var p heapPacer
		assert.False(t, p.observe(gcReading{goal: 8 * mb, heap: 9 * mb}))
		assert.True(t, p.observe(gcReading{goal: 8 * mb, heap: 9*mb + 1}))
		assert.Equal(t, uint32(1), p.left)
		assert.True(t, p.due(0))
	})

	t.Run("the limiter on in the unfinished cycle is collected at once", func(t *testing.T) {
		var p heapPacer
		assert.True(t, p.observe(gcReading{goal: 4 * mb, heap: mb, limiterCycle: 107, cycles: 106}))
		// On last in a finished cycle: no longer evidence of a stall.
		assert.False(t, p.observe(gcReading{goal: 4 * mb, heap: mb, limiterCycle: 107, cycles: 108}))
	})

	t.Run("the clock is read while the guest allocates, once a call and once per 64 KiB", func(t *testing.T) {
		p := heapPacer{calls: 4}
		p.observe(gcReading{goal: 4 * mb, allocs: 4 * 130 << 10})
		assert.Equal(t, uint32(3), p.clock)
		p.calls = 1
		p.observe(gcReading{goal: 4 * mb, allocs: 4*130<<10 + 100})
		assert.Equal(t, uint32(1), p.clock)
		p.calls = 1
		p.observe(gcReading{goal: 4 * mb, allocs: 4*130<<10 + 100})
		assert.Zero(t, p.clock, "the guest stopped allocating")
		p.calls = 1
		p.observe(gcReading{goal: 4 * mb, allocs: math.MaxUint64})
		assert.Equal(t, uint32(1+maxCallBytes/clockBytes), p.clock)
	})

	t.Run("once the limiter has been on, the clock is read without allocation too", func(t *testing.T) {
		var p heapPacer
		p.observe(gcReading{goal: 4 * mb, limiterCycle: 3, cycles: 9})
		assert.Equal(t, uint32(1), p.clock)
	})

	t.Run("GOGC=off: a goal near MaxUint64 never collects", func(t *testing.T) {
		var p heapPacer
		assert.False(t, p.observe(gcReading{goal: math.MaxUint64, heap: 1 << 40}))
		assert.False(t, p.observe(gcReading{goal: math.MaxUint64 - 1, heap: math.MaxUint64 - 2}))
	})

	t.Run("without readings the pacer still waits between attempts", func(t *testing.T) {
		var p heapPacer
		reads := 0
		for range 2*maxCheckInterval + 1 {
			if p.due(64) {
				reads++
				p.skip()
			}
		}
		assert.Equal(t, 3, reads)
	})
}
