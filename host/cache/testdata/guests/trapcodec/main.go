// Command trapcodec is a hostile test guest that passes the codec
// conformance suite and then fails on chosen inputs: it declares the
// reference codec's "product" schema (v2, reads v1 and v2), stores JSON
// objects as they are and answers corrupt for a payload that is not JSON.
// Encoding or decoding anything containing "trap" panics (a trap),
// anything containing "spin" spins until its deadline, anything containing
// "wait" logs the line "wait" (a host function the tests make block until
// the call's deadline: a guest that runs out of time without spending it
// on CPU, as on a loaded host), and anything containing "garble" answers a
// status whose detail is not UTF-8, a frame the host cannot parse
// (malformed output). The cache must fail every one of them closed and
// count it — never answer a miss, never store a value — and quarantine
// only an entry the guest crashed decoding, or spent its whole deadline
// on CPU decoding: a deadline alone is not the bytes' fault.
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
	return v, misbehave(v)
}

func decode(_ uint32, p []byte) ([]byte, error) {
	if !json.Valid(p) {
		return nil, guest.Errorf(abi.CodeCorrupt, "not JSON")
	}
	return p, misbehave(p)
}

// misbehave fails the call the way b asks for, if it asks.
func misbehave(b []byte) error {
	if bytes.Contains(b, []byte("trap")) {
		var m map[string]int
		m["trap"]++ // nil map write: a Go panic, a wasm trap
	}
	if bytes.Contains(b, []byte("spin")) {
		for spin(b) {
		}
	}
	if bytes.Contains(b, []byte("wait")) {
		guest.Log(abi.LogInfo, "wait")
	}
	if bytes.Contains(b, []byte("garble")) {
		return guest.Errorf(abi.CodeInternal, "%s", "\xff\xfe")
	}
	return nil
}

// spin is true for as long as the host lets the guest run; a call the
// compiler cannot prove constant keeps the loop in the module.
func spin(p []byte) bool { return len(p) > 0 }

func main() {}
