// Command clockloop is a test guest whose encode reads the WASI clock in a
// loop that only its deadline (or Close) ends: a call that is inside a host
// function of the call most of the time, which is where closing the module
// under the call raced inside wazero.
package main

import (
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "clockloop", Codecs: []guest.Codec{{
		Decl: abi.CodecDecl{SchemaID: "x", WriteVersion: 1, ReadableVersions: []uint32{1}},
		Encode: func(b []byte) ([]byte, error) {
			var last int64
			for {
				if now := time.Now().UnixNano(); now < last {
					return b, nil // never: the clock is monotonic here
				} else {
					last = now
				}
			}
		},
		Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
	}}})
}

func main() {}
