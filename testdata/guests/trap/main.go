// Command trap is a hostile test guest: encode panics (a Go panic exits the instance).
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "trap", Codecs: []guest.Codec{{
		Decl: abi.CodecDecl{SchemaID: "x", WriteVersion: 1, ReadableVersions: []uint32{1}},
		Encode: func(b []byte) ([]byte, error) {
			if len(b) > 0 {
				var m map[string]int
				m["boom"]++
			}
			return b, nil
		},
		Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
	}}})
}

func main() {}
