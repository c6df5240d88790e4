// Command membomb is a hostile test guest: encode allocates until memory
// runs out. It takes 8 MiB at a time, so a test's memory limit (a few
// tens of MiB) is reached in a handful of allocations: on a loaded
// machine hundreds of 1 MiB steps, each a garbage collection of a
// growing heap, could outlast the call's deadline and turn the memory
// failure under test into a deadline.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "membomb", Codecs: []guest.Codec{{
		Decl: abi.CodecDecl{SchemaID: "x", WriteVersion: 1, ReadableVersions: []uint32{1}},
		Encode: func(b []byte) ([]byte, error) {
			for {
				hoard = append(hoard, make([]byte, 8<<20))
			}
		},
		Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
	}}})
}

var hoard [][]byte

func main() {}
