// Command testguest is an Extism (go-pdk) test guest: a codec that echoes
// (for the side-by-side benchmark) and a rate policy whose routes misbehave
// on purpose: /loop never returns, /spam calls the host too often, /trap
// panics, /undeclared selects a policy it did not declare.
package main

import (
	"encoding/json"

	"github.com/extism/go-pdk"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest/view"
)

func main() {}

var out []byte

//go:wasmimport extism:host/user caphost_count
func hostCount(offset uint64)

//go:wasmexport caphost_abi_version
func exportVersion() int32 { return int32(abi.PackVersion(abi.Major, abi.Minor)) }

//go:wasmexport caphost_describe
func exportDescribe() int32 {
	d := abi.Description{
		ABI: abi.VersionDecl{Major: abi.Major, Minor: abi.Minor}, Module: "testguest",
		Kinds:        []abi.Kind{abi.KindCodec, abi.KindRatePolicy},
		Codecs:       []abi.CodecDecl{{SchemaID: "echo", WriteVersion: 1, ReadableVersions: []uint32{1}}},
		RatePolicies: []abi.RatePolicyDecl{{ID: "p", Revision: 1, Algorithm: abi.AlgFixedWindow, Limit: 1, WindowMs: 1000, MaximumCost: 1, FailureMode: "fail-closed"}},
	}
	js, _ := json.Marshal(d)
	pdk.Output(append([]byte{byte(abi.CodeOK)}, js...))
	return 0
}

var enc abi.CodecEncodeRequest

//go:wasmexport caphost_codec_encode
func exportEncode() int32 {
	in := pdk.Input()
	if !view.CodecEncode(in, &enc) {
		out = abi.AppendErrorFrame(out[:0], abi.CodeInvalidRequest, "bad request")
	} else {
		resp := abi.CodecEncodeResponse{Version: 1, Payload: enc.Value}
		out = resp.AppendTo(abi.AppendOKFrame(out[:0]))
	}
	pdk.Output(out)
	return 0
}

//go:wasmexport caphost_codec_decode
func exportDecode() int32 {
	pdk.Output(abi.AppendErrorFrame(out[:0], abi.CodeUnsupported, "no"))
	return 0
}

var (
	req   abi.RateSelectRequest
	attrs []abi.Attr
)

//go:wasmexport caphost_rate_select
func exportSelect() int32 {
	if !view.RateSelect(pdk.Input(), &req, &attrs) {
		pdk.Output(abi.AppendErrorFrame(out[:0], abi.CodeInvalidRequest, "bad request"))
		return 0
	}
	id := "p"
	switch req.Route {
	case "/loop":
		n := 0
		for {
			n++
			if n < 0 {
				break
			}
		}
	case "/spam":
		m := pdk.AllocateString("test.allowed")
		for range 100_000 {
			hostCount(m.Offset())
		}
	case "/trap":
		panic("guest panicked on purpose")
	case "/undeclared":
		id = "q"
	}
	resp := abi.RateSelectResponse{Selections: []abi.RateSelection{{PolicyID: id, Cost: 1}}}
	pdk.Output(resp.AppendTo(abi.AppendOKFrame(out[:0])))
	return 0
}
