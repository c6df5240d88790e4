// Command hostcalls is a test guest whose codecs call the caphost_v1
// imports: "imports" logs a line (with an escape byte the host must
// sanitise) and counts an allowlisted and a non-allowlisted event, "spam"
// exceeds any host-call budget. It imports both caphost_v1.log and
// caphost_v1.count, so it loads only when both are granted.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	dec := func(_ uint32, b []byte) ([]byte, error) { return b, nil }
	decl := func(s string) abi.CodecDecl {
		return abi.CodecDecl{SchemaID: s, WriteVersion: 1, ReadableVersions: []uint32{1}}
	}
	guest.Register(&guest.Module{Name: "hostcalls", Codecs: []guest.Codec{
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
