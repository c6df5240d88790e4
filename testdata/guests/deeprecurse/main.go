// Command deeprecurse is a hostile test guest: encode recurses as deep as its
// input asks (a decimal depth; "max" means without end), so that the call
// stack, not memory or time, is the limit that stops it.
package main

import (
	"strconv"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "deeprecurse", Codecs: []guest.Codec{{
		Decl: abi.CodecDecl{SchemaID: "x", WriteVersion: 1, ReadableVersions: []uint32{1}},
		Encode: func(b []byte) ([]byte, error) {
			n, err := strconv.Atoi(string(b))
			if err != nil {
				n = -1 // never reaches 0
			}
			return strconv.AppendInt(nil, int64(down(n)), 10), nil
		},
		Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
	}}})
}

// down calls itself n times; sink keeps the compiler from turning it into a loop.
//
//go:noinline
func down(n int) int {
	if n == 0 {
		return 0
	}
	return down(n-1) + 1 + sink
}

var sink int

func main() {}
