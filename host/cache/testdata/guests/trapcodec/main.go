// Command trapcodec is a hostile test guest that passes the codec
// conformance suite and then fails on one input: it declares the
// reference codec's "product" schema (v2, reads v1 and v2), stores JSON
// objects as they are, answers corrupt for anything that is not JSON, and
// panics (a trap) when it decodes a payload containing "trap", and spins
// until its deadline on one containing "spin". The cache must fail both
// lookups closed and count them — never answer a miss — and quarantine
// only the entry the guest crashed on: a deadline is not the bytes' fault.
package main

import (
	"bytes"
	"encoding/json"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "trapcodec", Codecs: []guest.Codec{
		{Decl: abi.CodecDecl{SchemaID: "product", WriteVersion: 2, ReadableVersions: []uint32{1, 2}}, Encode: encode, Decode: decode},
		// The reference regions also name search-page.
		{Decl: abi.CodecDecl{SchemaID: "search-page", WriteVersion: 1, ReadableVersions: []uint32{1}}, Encode: encode, Decode: decode},
	}})
}

func encode(v []byte) ([]byte, error) {
	if !json.Valid(v) || !bytes.HasPrefix(v, []byte("{")) {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "want a JSON object")
	}
	return v, nil
}

func decode(_ uint32, p []byte) ([]byte, error) {
	if !json.Valid(p) {
		return nil, guest.Errorf(abi.CodeCorrupt, "not JSON")
	}
	if bytes.Contains(p, []byte("trap")) {
		var m map[string]int
		m["trap"]++ // nil map write: a Go panic, a wasm trap
	}
	if bytes.Contains(p, []byte("spin")) {
		for spin(p) {
		}
	}
	return p, nil
}

// spin is true for as long as the host lets the guest run; a call the
// compiler cannot prove constant keeps the loop in the module.
func spin(p []byte) bool { return len(p) > 0 }

func main() {}
