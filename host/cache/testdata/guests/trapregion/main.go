// Command trapregion is a hostile test guest: a cache-region guest that
// passes the conformance suite and then traps (a Go panic) when it
// canonicalises the key "trap" and when it admits a 7-byte value. The
// cache must fail the first closed — never a miss, never a source load —
// and store nothing for the second.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "trapregion", Regions: []guest.CacheRegion{{
		Decl: abi.RegionDecl{ID: "items", KeyVersion: 1, SoftTTLMs: 30_000, HardTTLMs: 60_000, MaxBytes: 1024, Codec: "bytes"},
		Canonicalize: func(attrs []abi.Attr) ([]string, error) {
			for _, a := range attrs {
				if a.Name == "key" && a.Value == "trap" {
					var m map[string]int
					m["x"]++ // nil map write: a Go panic, a wasm trap
				}
			}
			return []string{"k"}, nil
		},
		Admit: func(req *abi.AdmitRequest) bool {
			if req.SizeBytes == 7 {
				var m map[string]int
				m["x"]++
			}
			return true
		},
	}}})
}

func main() {}
