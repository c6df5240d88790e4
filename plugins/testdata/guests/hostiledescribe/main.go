// Command hostiledescribe is a hostile test guest with hand-written glue (no
// SDK): a rate-policy module whose describe output is whatever a test writes
// into its describe slot. The slot is a fixed-size string constant in the
// module's data: a marker, then the JSON, padded with 0x01 bytes; a test
// derives hostile variants of the built module by overwriting the bytes
// after the marker (same length, so nothing else in the binary moves). The
// padding is 0x01, not NUL: the linker leaves runs of zero bytes out of the
// data segments, so a NUL-padded slot would not be contiguous in the file. Its
// select answers one fixed, declared selection, so the unpatched module
// passes the conformance suite and only describe is on trial.
package main

import (
	"strings"
	"unsafe"

	"github.com/caphost/caphost/abi"
)

// Marker precedes the describe JSON in the slot; tests search for it.
const marker = "@@caphost-describe-slot@@"

const (
	pad16  = "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
	pad256 = pad16 + pad16 + pad16 + pad16 + pad16 + pad16 + pad16 + pad16 +
		pad16 + pad16 + pad16 + pad16 + pad16 + pad16 + pad16 + pad16
)

// slot holds the marker, the valid describe JSON and 1 KiB of padding.
const slot = marker +
	`{"abi":{"major":1,"minor":0},"module":"hostiledescribe","kinds":["rate-policy"],` +
	`"rate_policies":[{"id":"hostile.p","revision":1,"algorithm":"fixed-window","limit":10,` +
	`"window_ms":1000,"maximum_cost":1,"failure_mode":"fail-closed"}]}` +
	pad256 + pad256 + pad256 + pad256

var in, out []byte

func frame(b []byte) uint64 {
	out = b
	return uint64(uintptr(unsafe.Pointer(&out[0])))<<32 | uint64(len(b))
}

//go:wasmexport caphost_abi_version
func version() uint32 { return abi.PackVersion(1, 0) }

//go:wasmexport caphost_alloc
func alloc(n uint32) uint32 {
	in = make([]byte, n+1)
	return uint32(uintptr(unsafe.Pointer(&in[0])))
}

//go:wasmexport caphost_describe
func describe(ptr, n uint32) uint64 {
	js := slot[len(marker):]
	if i := strings.IndexByte(js, 0x01); i >= 0 {
		js = js[:i]
	}
	return frame(append(abi.AppendOKFrame(nil), js...))
}

//go:wasmexport caphost_rate_select
func rateSelect(ptr, n uint32) uint64 {
	resp := abi.RateSelectResponse{Selections: []abi.RateSelection{{PolicyID: "hostile.p", Cost: 1}}}
	return frame(resp.AppendTo(abi.AppendOKFrame(nil)))
}

func main() {}
