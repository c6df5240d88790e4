//go:build wasip1

package main

import (
	"github.com/extism/go-pdk"

	"github.com/caphost/caphost/abi"
)

// st is the instance's reusable state; a wasm instance is single-threaded.
var st State

func answer(e abi.Export) int32 {
	st.out = Handle(e, pdk.Input(), st.out[:0], &st)
	pdk.Output(st.out)
	// The host functions are exercised where they cost nothing on the hot
	// path: once per describe, and on refused requests.
	switch {
	case e == abi.ExportDescribe:
		Log(abi.LogDebug, "rate-policy-extism described")
	case len(st.out) > 0 && abi.Code(st.out[0]) == abi.CodeInvalidRequest:
		Count("rate-policy.invalid-request")
	}
	return 0
}

// caphost_abi_version answers through Extism's i32 return code.
//
//go:wasmexport caphost_abi_version
func exportVersion() int32 { return int32(abi.PackVersion(abi.Major, abi.Minor)) }

//go:wasmexport caphost_describe
func exportDescribe() int32 { return answer(abi.ExportDescribe) }

//go:wasmexport caphost_rate_select
func exportRateSelect() int32 { return answer(abi.ExportRateSelect) }

//go:wasmimport extism:host/user caphost_log
func hostLog(level uint64, offset uint64)

//go:wasmimport extism:host/user caphost_count
func hostCount(offset uint64)

// Log sends a log line to the host (bounded, sanitised and rate-limited there).
func Log(level abi.LogLevel, msg string) {
	m := pdk.AllocateString(msg)
	hostLog(uint64(level), m.Offset())
	m.Free()
}

// Count increments a host-allowlisted event counter.
func Count(event string) {
	m := pdk.AllocateString(event)
	hostCount(m.Offset())
	m.Free()
}
