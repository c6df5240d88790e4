// Command sockimport is a hostile test guest: it imports a WASI socket function.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
	"unsafe"
)

func init() {
	guest.Register(&guest.Module{Name: "sockimport", Codecs: []guest.Codec{{
		Decl: abi.CodecDecl{SchemaID: "x", WriteVersion: 1, ReadableVersions: []uint32{1}},
		Encode: func(b []byte) ([]byte, error) {
			sockAccept(3, 0, nil)
			return b, nil
		},
		Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
	}}})
}

//go:wasmimport wasi_snapshot_preview1 sock_accept
func sockAccept(fd int32, flags int32, out unsafe.Pointer) int32

func main() {}
