// Command malformed is a hostile test guest with hand-written glue (no SDK)
// whose codec_encode answers frames that violate the ABI, chosen by the
// request's last byte: 'o' out-of-bounds pointer, 'g' OK status with a garbage
// body, 's' unknown status code, 'e' empty frame.
package main

import (
	"unsafe"

	"github.com/caphost/caphost/abi"
)

var in, out []byte

const describe = `{"abi":{"major":1,"minor":0},"module":"malformed","kinds":["codec"],` +
	`"codecs":[{"schema_id":"x","write_version":1,"readable_versions":[1]}]}`

func frame(b []byte) uint64 {
	out = b
	if len(b) == 0 {
		out = make([]byte, 1)
	}
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
func describeExport(ptr, n uint32) uint64 { return frame(append([]byte{0}, describe...)) }

//go:wasmexport caphost_codec_encode
func encode(ptr, n uint32) uint64 {
	var mode byte
	if n > 0 {
		mode = in[n-1]
	}
	switch mode {
	case 'o':
		return uint64(0xfff00000)<<32 | 64
	case 'g':
		return frame([]byte{0, 0xff, 0xff, 0xff})
	case 's':
		return frame([]byte{200, 0})
	}
	return frame(nil)
}

//go:wasmexport caphost_codec_decode
func decode(ptr, n uint32) uint64 { return encode(ptr, n) }

func main() {}
