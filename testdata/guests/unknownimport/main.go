// Command unknownimport is a hostile test guest: it imports a host function outside the ABI.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "unknownimport", Codecs: []guest.Codec{{
		Decl: abi.CodecDecl{SchemaID: "x", WriteVersion: 1, ReadableVersions: []uint32{1}},
		Encode: func(b []byte) ([]byte, error) {
			exec(int32(len(b)))
			return b, nil
		},
		Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
	}}})
}

//go:wasmimport caphost_v1 exec
func exec(n int32) int32

func main() {}
