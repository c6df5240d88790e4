// Command abimajor is a hostile test guest with hand-written glue that claims
// ABI major 2, which this host does not speak.
package main

import (
	"unsafe"

	"github.com/caphost/caphost/abi"
)

var in, out []byte

//go:wasmexport caphost_abi_version
func version() uint32 { return abi.PackVersion(2, 3) }

//go:wasmexport caphost_alloc
func alloc(n uint32) uint32 {
	in = make([]byte, n+1)
	return uint32(uintptr(unsafe.Pointer(&in[0])))
}

//go:wasmexport caphost_describe
func describe(ptr, n uint32) uint64 {
	out = append([]byte{0}, `{"abi":{"major":2,"minor":3},"module":"abimajor","kinds":["codec"],`+
		`"codecs":[{"schema_id":"x","write_version":1,"readable_versions":[1]}]}`...)
	return uint64(uintptr(unsafe.Pointer(&out[0])))<<32 | uint64(len(out))
}

func main() {}
