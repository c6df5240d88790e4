// Command wrongans is the Extism (go-pdk) twin of testdata/guests/wrongans:
// it declares all four kinds, answers every export, and gets exactly the
// same one thing wrong per kind, so each kind's conformance suite must fail
// with the same one precise check on both flavours:
//
//   - codec "wrong.profile": v1 payloads are returned unparsed, so garbage
//     stored at the readable version 1 decodes as ok instead of corrupt;
//   - cache-region "wrong.region": canonicalize overflows a fixed key buffer
//     (a Go panic, so a trap) on an id longer than 256 bytes;
//   - rate-policy "wrong.read": select dereferences a missing plan entry (a
//     trap) for an unknown API-key plan;
//   - renderer "wrong.welcome": parameters reach the HTML part unescaped.
//
// The native twin gets its status answers (unknown schema, region, template
// or locale; unreadable version) from the abi/guest SDK; here they are
// written out, with the same codes.
package main

import (
	"encoding/json"

	"github.com/extism/go-pdk"

	"github.com/caphost/caphost/abi"
)

func main() {}

//go:wasmexport caphost_abi_version
func exportVersion() int32 { return int32(abi.PackVersion(abi.Major, abi.Minor)) }

func reply(frame []byte) int32 {
	pdk.Output(frame)
	return 0
}

func ok(resp abi.Message) int32 { return reply(resp.AppendTo(abi.AppendOKFrame(nil))) }

func status(c abi.Code, detail string) int32 { return reply(abi.AppendErrorFrame(nil, c, detail)) }

// decode reads the Extism input into req; false means it already answered.
func decode(req abi.Message) bool {
	if err := req.Unmarshal(pdk.Input()); err != nil {
		status(abi.CodeInvalidRequest, err.Error())
		return false
	}
	return true
}

//go:wasmexport caphost_describe
func exportDescribe() int32 {
	d := abi.Description{
		ABI: abi.VersionDecl{Major: abi.Major, Minor: abi.Minor}, Module: "wrongans",
		Kinds:  []abi.Kind{abi.KindCodec, abi.KindCacheRegion, abi.KindRatePolicy, abi.KindRenderer},
		Codecs: []abi.CodecDecl{{SchemaID: "wrong.profile", WriteVersion: 2, ReadableVersions: []uint32{1, 2}}},
		Regions: []abi.RegionDecl{{ID: "wrong.region", KeyVersion: 1, SoftTTLMs: 1000, HardTTLMs: 2000,
			MaxBytes: 1024, Codec: "wrong.profile"}},
		RatePolicies: []abi.RatePolicyDecl{{ID: "wrong.read", Revision: 1, Algorithm: abi.AlgFixedWindow,
			Limit: 10, WindowMs: 1000, MaximumCost: 1, Dimensions: []string{"api-key"}}},
		Templates: []abi.TemplateDecl{{ID: "wrong.welcome", Version: 1, Locales: []string{"en"},
			Channels: []string{"email"}, Params: []string{"name"}}},
	}
	js, err := json.Marshal(d)
	if err != nil {
		return status(abi.CodeInternal, err.Error())
	}
	return reply(append(abi.AppendOKFrame(nil), js...))
}

//go:wasmexport caphost_codec_encode
func exportEncode() int32 {
	var req abi.CodecEncodeRequest
	if !decode(&req) {
		return 0
	}
	if req.Schema != "wrong.profile" {
		return status(abi.CodeNotFound, "unknown schema")
	}
	if !json.Valid(req.Value) {
		return status(abi.CodeInvalidRequest, "value is not JSON")
	}
	return ok(&abi.CodecEncodeResponse{Version: 2, Payload: req.Value})
}

//go:wasmexport caphost_codec_decode
func exportDecode() int32 {
	var req abi.CodecDecodeRequest
	if !decode(&req) {
		return 0
	}
	switch {
	case req.Schema != "wrong.profile":
		return status(abi.CodeNotFound, "unknown schema")
	case req.StoredVersion == 1:
		return ok(&abi.CodecDecodeResponse{Value: req.Payload}) // the bug: no validation of legacy payloads
	case req.StoredVersion != 2:
		return status(abi.CodeSchemaMismatch, "stored version is not readable")
	case !json.Valid(req.Payload):
		return status(abi.CodeCorrupt, "payload is not JSON")
	}
	return ok(&abi.CodecDecodeResponse{Value: req.Payload})
}

//go:wasmexport caphost_cache_canonicalize
func exportCanonicalize() int32 {
	var req abi.CanonicalizeRequest
	if !decode(&req) {
		return 0
	}
	if req.Region != "wrong.region" {
		return status(abi.CodeNotFound, "unknown region")
	}
	var buf [256]byte
	n := 0
	for _, a := range req.Attrs {
		if a.Name == "key" {
			n = copy(buf[:], a.Value)
			if len(a.Value) > len(buf) {
				buf[len(a.Value)] = 0 // the bug: a fixed buffer indexed past its end
			}
		}
	}
	return ok(&abi.CanonicalizeResponse{Parts: []string{"id:" + string(buf[:n])}})
}

//go:wasmexport caphost_cache_admit
func exportAdmit() int32 {
	var req abi.AdmitRequest
	if !decode(&req) {
		return 0
	}
	if req.Region != "wrong.region" {
		return status(abi.CodeNotFound, "unknown region")
	}
	return ok(&abi.AdmitResponse{Admit: true})
}

//go:wasmexport caphost_rate_select
func exportSelect() int32 {
	var req abi.RateSelectRequest
	if !decode(&req) {
		return 0
	}
	plans := map[string]*int{"": new(int), "free": new(int), "pro": new(int), "enterprise": new(int)}
	_ = *plans[req.APIKeyPlan] // the bug: nil for an unknown plan
	return ok(&abi.RateSelectResponse{Selections: []abi.RateSelection{{PolicyID: "wrong.read", Dimensions: []string{""}, Cost: 1}}})
}

//go:wasmexport caphost_render
func exportRender() int32 {
	var req abi.RenderRequest
	if !decode(&req) {
		return 0
	}
	if req.Template != "wrong.welcome" || req.Version != 1 || req.Locale != "en" || req.Channel != "email" {
		return status(abi.CodeNotFound, "unknown template, version, locale or channel")
	}
	name := ""
	for _, p := range req.Params {
		if p.Name == "name" {
			name = p.Value
		}
	}
	// The bug: the parameter is not HTML-escaped.
	return ok(&abi.RenderResponse{Parts: []abi.MessagePart{{Name: "html", ContentType: "text/html; charset=utf-8",
		Body: []byte("<p>Hello " + name + "</p>")}}})
}
