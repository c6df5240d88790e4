// Command wrongans is a test guest that loads, answers every export and
// declares all four kinds, but gets exactly one thing wrong per kind, so
// each kind's conformance suite must fail with one precise check:
//
//   - codec "wrong.profile": v1 payloads are returned unparsed, so garbage
//     stored at the readable version 1 decodes as ok instead of corrupt;
//   - cache-region "wrong.region": canonicalize overflows a fixed key buffer
//     (a Go panic, so a trap) on an id longer than 256 bytes;
//   - rate-policy "wrong.read": select dereferences a missing plan entry (a
//     trap) for an unknown API-key plan;
//   - renderer "wrong.welcome": parameters reach the HTML part unescaped.
//
// Everything else answers the way the suite expects.
package main

import (
	"encoding/json"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() { guest.Register(module()) }

func main() {}

func module() *guest.Module {
	return &guest.Module{
		Name: "wrongans",
		Codecs: []guest.Codec{{
			Decl: abi.CodecDecl{SchemaID: "wrong.profile", WriteVersion: 2, ReadableVersions: []uint32{1, 2}},
			Encode: func(v []byte) ([]byte, error) {
				if !json.Valid(v) {
					return nil, guest.Errorf(abi.CodeInvalidRequest, "value is not JSON")
				}
				return v, nil
			},
			Decode: func(version uint32, p []byte) ([]byte, error) {
				if version == 1 {
					return p, nil // the bug: no validation of legacy payloads
				}
				if !json.Valid(p) {
					return nil, guest.Errorf(abi.CodeCorrupt, "payload is not JSON")
				}
				return p, nil
			},
		}},
		Regions: []guest.CacheRegion{{
			Decl: abi.RegionDecl{ID: "wrong.region", KeyVersion: 1, SoftTTLMs: 1000, HardTTLMs: 2000, MaxBytes: 1024, Codec: "wrong.profile"},
			Canonicalize: func(attrs []abi.Attr) ([]string, error) {
				var buf [256]byte
				n := 0
				for _, a := range attrs {
					if a.Name == "key" {
						n = copy(buf[:], a.Value)
						if len(a.Value) > len(buf) {
							// The bug: a fixed buffer indexed past its end.
							buf[len(a.Value)] = 0
						}
					}
				}
				return []string{"id:" + string(buf[:n])}, nil
			},
		}},
		Rate: &guest.RatePolicies{
			Policies: []abi.RatePolicyDecl{{ID: "wrong.read", Revision: 1, Algorithm: abi.AlgFixedWindow,
				Limit: 10, WindowMs: 1000, MaximumCost: 1, Dimensions: []string{"api-key"}}},
			Select: func(req *abi.RateSelectRequest) ([]abi.RateSelection, error) {
				plans := map[string]*int{"": new(int), "free": new(int), "pro": new(int), "enterprise": new(int)}
				_ = *plans[req.APIKeyPlan] // the bug: nil for an unknown plan
				return []abi.RateSelection{{PolicyID: "wrong.read", Dimensions: []string{""}, Cost: 1}}, nil
			},
		},
		Renderer: &guest.Renderer{
			Templates: []abi.TemplateDecl{{ID: "wrong.welcome", Version: 1, Locales: []string{"en"},
				Channels: []string{"email"}, Params: []string{"name"}}},
			Render: func(req *abi.RenderRequest) ([]abi.MessagePart, error) {
				name := ""
				for _, p := range req.Params {
					if p.Name == "name" {
						name = p.Value
					}
				}
				// The bug: the parameter is not HTML-escaped.
				return []abi.MessagePart{{Name: "html", ContentType: "text/html; charset=utf-8", Body: []byte("<p>Hello " + name + "</p>")}}, nil
			},
		},
	}
}
