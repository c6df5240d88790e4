// Command fsimport is a hostile test guest: encode reads a file through WASI, importing path_open.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
	"os"
)

func init() {
	guest.Register(&guest.Module{Name: "fsimport", Codecs: []guest.Codec{{
		Decl: abi.CodecDecl{SchemaID: "x", WriteVersion: 1, ReadableVersions: []uint32{1}},
		Encode: func(b []byte) ([]byte, error) {
			return os.ReadFile("/etc/passwd")
		},
		Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
	}}})
}

func main() {}
