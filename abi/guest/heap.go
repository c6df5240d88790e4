package guest

import "math"

// Keeping a reactor guest's heap bounded.
//
// In a reactor (c-shared) module the Go scheduler runs only while an export
// runs, and an export runs to completion, so the GC's background workers
// never get the CPU: a cycle advances only through the mark assists of the
// allocating goroutine. The host gives every instance a virtual monotonic
// clock that moves 1 ms per reading (abi/ABI.md §2), and nearly all readings
// are the GC's own, so the runtime's GC CPU limiter measures the GC at more
// than half of the CPU, turns on and switches assists off. With no worker
// and no assist the cycle under way never ends, and every later allocation
// grows the heap until the memory cap. Measured (a guest discarding 4 KiB a
// call, 16 MiB cap): 128 pages for 82,000 calls, then out of memory.
//
// The SDK corrects both halves after every call (wasm.go, afterCall):
//   - while the guest allocates, it reads the clock once a call and once
//     more per 64 KiB the calls allocate (about 130 ns a reading), so the
//     limiter sees mutator time in proportion to the mutator's work and
//     stays off: a GC assist, two readings, does at least 64 KiB of scan
//     work. The pacer's time-based estimates then see sane ratios too: the
//     same work runs 10-20% fewer GC cycles. Once the limiter has been on,
//     it reads the clock even while the guest does not allocate, so the
//     limiter turns off when the next cycle starts.
//   - it reads the GC's state (runtime/metrics, about 3.5 µs) and runs a full
//     collection (runtime.GC, which parks the export so the workers finish
//     the cycle) if the limiter is on in an unfinished cycle or the heap has
//     passed its goal by an eighth. It reads at the end of any call that grew
//     linear memory, which a stalled cycle soon does, and otherwise every
//     at most maxCheckInterval calls, fewer when calls allocate much: the
//     calls between two reads allocate at most half of what is left before
//     that bound, at the rate of the calls between the previous two, and the
//     interval at most doubles from one read to the next. This is the bound,
//     whatever stalls the collector; the clock only keeps it from being
//     needed.
//
// heapPacer is that arithmetic, kept free of runtime calls so it is tested
// natively.

// maxCheckInterval is the most calls between two reads of the GC's state.
const maxCheckInterval = 64

// clockBytes is how much allocation one clock reading after a call stands
// for, beyond the call's own reading; maxCallBytes bounds the sum (64 MiB,
// the host's cap on memory).
const clockBytes, maxCallBytes = 64 << 10, 64 << 20

// gcReading is one read of the GC's state (runtime/metrics).
type gcReading struct {
	goal   uint64 // /gc/heap/goal:bytes
	heap   uint64 // /memory/classes/heap/objects:bytes
	allocs uint64 // /gc/heap/allocs:bytes, cumulative
	// limiterCycle is the cycle in which the GC CPU limiter last turned on
	// (/gc/limiter/last-enabled:gc-cycle), cycles the cycles completed
	// (/gc/cycles/total:gc-cycles): the limiter is on in the unfinished
	// cycle when limiterCycle > cycles.
	limiterCycle, cycles uint64
}

// heapPacer decides when to read the GC's state and when to collect.
type heapPacer struct {
	left   uint32 // calls until the next planned read (0 or 1: at this call)
	calls  uint32 // calls since the previous read
	pages  uint32 // linear memory at the end of the previous call
	allocs uint64 // r.allocs at the previous read
	clock  uint32 // clock readings after each call
}

// due counts one call, which ends with linear memory at pages, and reports
// whether it reads the GC's state.
func (p *heapPacer) due(pages uint32) bool {
	p.calls++
	grew := pages > p.pages
	p.pages = pages
	if p.left > 1 && !grew {
		p.left--
		return false
	}
	return true
}

// skip plans the next read without a reading.
func (p *heapPacer) skip() { p.left = maxCheckInterval }

// observe takes the reading of a due call, plans the next read and reports
// whether to collect now.
func (p *heapPacer) observe(r gcReading) bool {
	calls := uint64(max(p.calls, 1))
	perCall := (r.allocs - p.allocs) / calls
	p.allocs, p.calls = r.allocs, 0
	p.clock = 0
	if perCall > 0 || r.limiterCycle > 0 {
		p.clock = uint32(1 + min(perCall, maxCallBytes)/clockBytes)
	}
	limit := r.goal + r.goal/8
	if limit < r.goal { // a goal near MaxUint64: the GC is off (GOGC=off)
		limit = math.MaxUint64
	}
	collect := r.limiterCycle > r.cycles || r.heap > limit
	// At most twice the calls since the previous read: one light call
	// after heavy ones must not buy the heavy ones a long interval.
	next := min(maxCheckInterval, 2*calls)
	switch {
	case collect:
		next = 1 // see at the next call what the collection left
	case perCall > 0:
		next = min(next, max(1, (limit-r.heap)/(2*perCall)))
	}
	p.left = uint32(next)
	return collect
}
