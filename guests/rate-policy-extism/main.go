// Command rate-policy-extism is the reference rate-policy guest written for
// the Extism flavour with the Extism Go PDK: the same policies and the same
// answers as guests/rate-policy, the same ABI messages (package abi) and
// response frames, but Extism's calling convention: exports take no
// parameters and return an i32, the request arrives as the Extism input and
// the response frame leaves as the Extism output. Host functions are the
// caphost_v1 ones exposed as Extism user functions (caphost_log,
// caphost_count in extism:host/user).
//
// The policy table and selection are guests/internal/tiers, shared with the
// native flavour.
// It has no selftest.json of its own: `make guests` bundles its native
// twin's, which it must answer byte for byte.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rate-policy-extism.wasm ./guests/rate-policy-extism
package main

import (
	"encoding/json"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest/view"
	"github.com/caphost/caphost/guests/internal/tiers"
)

func main() {}

// Description is the guest's describe output.
func Description() *abi.Description {
	return &abi.Description{
		ABI:    abi.VersionDecl{Major: abi.Major, Minor: abi.Minor},
		Module: "rate-policy", Kinds: []abi.Kind{abi.KindRatePolicy}, RatePolicies: tiers.Policies(1),
	}
}

// Handle answers one export with a response frame appended to out. It is
// the whole guest minus the Extism glue, so it is unit-tested natively.
func Handle(e abi.Export, in, out []byte, st *State) []byte {
	switch e {
	case abi.ExportDescribe:
		js, err := json.Marshal(Description())
		if err != nil {
			return abi.AppendErrorFrame(out, abi.CodeInternal, "describe: "+err.Error())
		}
		return append(abi.AppendOKFrame(out), js...)
	case abi.ExportRateSelect:
		req := &st.req
		if !view.RateSelect(in, req, &st.attrs) {
			detail := "malformed request"
			if err := (&abi.RateSelectRequest{}).Unmarshal(in); err != nil {
				detail = err.Error()
			}
			return abi.AppendErrorFrame(out, abi.CodeInvalidRequest, detail)
		}
		sels, ok := tiers.Select(req)
		if !ok {
			return abi.AppendErrorFrame(out, abi.CodeInvalidRequest, "unknown method")
		}
		resp := abi.RateSelectResponse{Selections: sels}
		return resp.AppendTo(abi.AppendOKFrame(out))
	}
	return abi.AppendErrorFrame(out, abi.CodeUnsupported, "unknown export")
}

// State is reused across calls (an instance is single-threaded).
type State struct {
	req   abi.RateSelectRequest
	attrs []abi.Attr
	out   []byte
}
