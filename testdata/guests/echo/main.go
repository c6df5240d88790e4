// Command echo is a test guest: a codec schema that echoes its input. It
// imports nothing of caphost_v1, so it loads without grants; the host
// imports are exercised by testdata/guests/hostcalls.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "echo", Codecs: []guest.Codec{{
		Decl:   abi.CodecDecl{SchemaID: "echo", WriteVersion: 1, ReadableVersions: []uint32{1}},
		Encode: func(b []byte) ([]byte, error) { return b, nil },
		Decode: func(_ uint32, b []byte) ([]byte, error) { return b, nil },
	}}})
}

func main() {}
