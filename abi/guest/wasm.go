//go:build wasip1

package guest

import (
	"runtime"
	"runtime/metrics"
	"time"
	"unsafe"

	"github.com/caphost/caphost/abi"
)

// The wasm glue must be package-level: //go:wasmexport functions have no
// receiver, and a reactor instance is single-threaded (the host never calls an
// instance concurrently), so this state needs no locking.
var glue struct {
	d   *Dispatcher
	err string
	in  []byte // handed to the host by caphost_alloc
	out []byte // last response frame; valid until the next call
}

// Register installs the module's handlers. Call it exactly once, from an
// init function of the guest's main package. An invalid module makes every
// export (including describe) answer CodeInternal with the reason, so the
// host refuses the module at load with a precise message.
func Register(m *Module) {
	d, err := NewDispatcher(m)
	if err != nil {
		glue.err = "guest registration: " + err.Error()
		return
	}
	glue.d = d
}

//go:wasmexport caphost_abi_version
func exportVersion() uint32 { return abi.PackVersion(abi.Major, abi.Minor) }

//go:wasmexport caphost_alloc
func exportAlloc(size uint32) uint32 {
	if size > abi.MaxMessageBytes {
		return 0
	}
	if size == 0 {
		size = 1
	}
	if uint32(cap(glue.in)) < size {
		glue.in = make([]byte, size)
	}
	glue.in = glue.in[:cap(glue.in)]
	return uint32(uintptr(unsafe.Pointer(&glue.in[0])))
}

func call(e abi.Export, ptr, n uint32) uint64 {
	var in []byte
	if n > 0 {
		// The request must sit in the region caphost_alloc handed out; the
		// guest never dereferences any other host-supplied address.
		if len(glue.in) == 0 || ptr != uint32(uintptr(unsafe.Pointer(&glue.in[0]))) || n > uint32(len(glue.in)) {
			glue.out = abi.AppendErrorFrame(glue.out[:0], abi.CodeInvalidRequest, "request outside the caphost_alloc region")
			return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(glue.out))))<<32 | uint64(len(glue.out))
		}
		in = glue.in[:n]
	}
	if glue.d == nil {
		reason := glue.err
		if reason == "" {
			reason = "guest.Register was not called from init"
		}
		glue.out = abi.AppendErrorFrame(glue.out[:0], abi.CodeInternal, reason)
	} else {
		glue.out = glue.d.Handle(e, in, glue.out[:0])
	}
	out := glue.out
	packed := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(out))))<<32 | uint64(len(out))
	// Before the drop below: a collection here must still see the frame.
	afterCall()
	// Drop a buffer that grew for one huge response so the instance does not
	// pin it forever. The frame stays valid for the host to read: no Go code,
	// so no collection, runs in the instance until its next call. (A defer
	// here would tax every call.)
	if cap(out) > 1<<20 {
		glue.out = nil
	}
	return packed
}

// pacer is the state of heap.go's pacing; gcSamples are its reading, in
// gcReading's order.
var (
	pacer     heapPacer
	gcSamples = [...]metrics.Sample{
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/limiter/last-enabled:gc-cycle"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	epoch = time.Now()
)

// memoryPages is the size of linear memory in 64 KiB pages (memory.size;
// memory_wasip1_wasm.s).
func memoryPages() uint32

// afterCall keeps the heap bounded (heap.go says why and how).
func afterCall() {
	for range pacer.clock {
		_ = time.Since(epoch)
	}
	if !pacer.due(memoryPages()) {
		return
	}
	metrics.Read(gcSamples[:])
	var v [len(gcSamples)]uint64
	for i := range gcSamples {
		if gcSamples[i].Value.Kind() != metrics.KindUint64 {
			pacer.skip() // a toolchain without one of them: TestHeapStaysBounded fails
			return
		}
		v[i] = gcSamples[i].Value.Uint64()
	}
	if pacer.observe(gcReading{goal: v[0], heap: v[1], allocs: v[2], limiterCycle: v[3], cycles: v[4]}) {
		runtime.GC()
	}
}

//go:wasmexport caphost_describe
func exportDescribe(ptr, n uint32) uint64 { return call(abi.ExportDescribe, ptr, n) }

//go:wasmexport caphost_codec_encode
func exportCodecEncode(ptr, n uint32) uint64 { return call(abi.ExportCodecEncode, ptr, n) }

//go:wasmexport caphost_codec_decode
func exportCodecDecode(ptr, n uint32) uint64 { return call(abi.ExportCodecDecode, ptr, n) }

//go:wasmexport caphost_cache_canonicalize
func exportCanonicalize(ptr, n uint32) uint64 { return call(abi.ExportCacheCanonicalize, ptr, n) }

//go:wasmexport caphost_cache_admit
func exportAdmit(ptr, n uint32) uint64 { return call(abi.ExportCacheAdmit, ptr, n) }

//go:wasmexport caphost_rate_select
func exportRateSelect(ptr, n uint32) uint64 { return call(abi.ExportRateSelect, ptr, n) }

//go:wasmexport caphost_render
func exportRender(ptr, n uint32) uint64 { return call(abi.ExportRender, ptr, n) }

//go:wasmimport caphost_v1 log
func hostLog(level uint32, ptr unsafe.Pointer, n uint32)

//go:wasmimport caphost_v1 count
func hostCount(ptr unsafe.Pointer, n uint32)

// Log sends a log line to the host, which bounds its length, strips control
// characters and rate-limits it. Each call counts against the module's
// host-call budget for the current invocation.
func Log(level abi.LogLevel, msg string) {
	if len(msg) == 0 {
		return
	}
	hostLog(uint32(level), unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

// Count increments a host-allowlisted event counter; events the operator did
// not allowlist are dropped by the host. Each call counts against the
// module's host-call budget for the current invocation.
func Count(event string) {
	if len(event) == 0 {
		return
	}
	hostCount(unsafe.Pointer(unsafe.StringData(event)), uint32(len(event)))
}
