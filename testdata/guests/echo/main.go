// Command echo is a test guest: codec schemas that echo their input, one that
// exercises the host imports, and one that exceeds the host-call budget.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	id := func(b []byte) ([]byte, error) { return b, nil }
	dec := func(_ uint32, b []byte) ([]byte, error) { return b, nil }
	decl := func(s string) abi.CodecDecl {
		return abi.CodecDecl{SchemaID: s, WriteVersion: 1, ReadableVersions: []uint32{1}}
	}
	guest.Register(&guest.Module{Name: "echo", Codecs: []guest.Codec{
		{Decl: decl("echo"), Encode: id, Decode: dec},
		{Decl: decl("imports"), Encode: func(b []byte) ([]byte, error) {
			guest.Log(abi.LogInfo, "hello\x1b[31m from "+string(b))
			guest.Count("test.allowed")
			guest.Count("test.not-allowlisted")
			return b, nil
		}, Decode: dec},
		{Decl: decl("spam"), Encode: func(b []byte) ([]byte, error) {
			for range 100_000 {
				guest.Count("test.allowed")
			}
			return b, nil
		}, Decode: dec},
	}})
}

func main() {}
