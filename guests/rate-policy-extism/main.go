// Command rate-policy-extism is the reference rate-policy guest written for
// the Extism flavour with the Extism Go PDK: the same policies and the same
// answers as guests/rate-policy, the same ABI messages (package abi) and
// response frames, but Extism's calling convention: exports take no
// parameters and return an i32, the request arrives as the Extism input and
// the response frame leaves as the Extism output. Host functions are the
// caphost_v1 ones exposed as Extism user functions (caphost_log,
// caphost_count in extism:host/user).
//
// The policy table is duplicated from guests/rate-policy (a main package
// cannot be imported); the host's cross-flavour tests fail if they drift.
// It has no selftest.json of its own: `make guests` bundles its native
// twin's, which it must answer byte for byte.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rate-policy-extism.wasm ./guests/rate-policy-extism
package main

import (
	"encoding/json"
	"strings"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest/view"
)

func main() {}

// plans and their per-minute limits per route class (as guests/rate-policy).
var plans = []struct {
	name        string
	read, write uint64
}{
	{"free", 60, 10},
	{"pro", 600, 120},
	{"enterprise", 6000, 1200},
}

const searchCost = 5

// Description is the guest's describe output.
func Description() *abi.Description {
	var pols []abi.RatePolicyDecl
	for _, p := range plans {
		for _, rc := range []struct {
			class   string
			limit   uint64
			maxCost uint32
		}{{"read", p.read, searchCost}, {"write", p.write, 1}} {
			pols = append(pols, abi.RatePolicyDecl{
				ID: p.name + "." + rc.class, Revision: 1, Algorithm: abi.AlgTokenBucket,
				Limit: rc.limit, WindowMs: 60_000, Burst: rc.limit / 4, MaximumCost: rc.maxCost,
				Dimensions: []string{"api-key"}, FailureMode: "fail-closed",
			})
		}
	}
	pols = append(pols, abi.RatePolicyDecl{
		ID: "anonymous.ip", Revision: 1, Algorithm: abi.AlgFixedWindow,
		Limit: 30, WindowMs: 60_000, MaximumCost: 1, FailureMode: "fail-closed",
		Dimensions: []string{"client-ip"},
	})
	return &abi.Description{
		ABI:    abi.VersionDecl{Major: abi.Major, Minor: abi.Minor},
		Module: "rate-policy", Kinds: []abi.Kind{abi.KindRatePolicy}, RatePolicies: pols,
	}
}

// Identity modes, indexing selections: which host source keys the plan's
// bucket.
const (
	modeAPIKey = iota
	modePrincipal
	modeAnonymous
	numModes
)

// Route classes, indexing selections.
const (
	classRead = iota
	classWrite
	classSearch
	numClasses
)

var classNames = [numClasses]string{"read", "write", "search"}

// selections[plan][class][mode] is every possible answer, built once.
var selections = func() [][numClasses][numModes][]abi.RateSelection {
	out := make([][numClasses][numModes][]abi.RateSelection, len(plans))
	for pi, p := range plans {
		for c := range numClasses {
			bucket, cost := classNames[c], uint32(1)
			if c == classSearch {
				bucket, cost = "read", searchCost
			}
			id := p.name + "." + bucket
			// The dimension value names the host source that fills the
			// api-key dimension: the key itself, else the principal, else
			// (anonymous) the client IP. The guest never sees the values.
			out[pi][c][modeAPIKey] = []abi.RateSelection{{PolicyID: id, Dimensions: []string{""}, Cost: cost}}
			out[pi][c][modePrincipal] = []abi.RateSelection{{PolicyID: id, Dimensions: []string{"principal"}, Cost: cost}}
			out[pi][c][modeAnonymous] = []abi.RateSelection{
				{PolicyID: "anonymous.ip", Dimensions: []string{""}, Cost: 1},
				{PolicyID: id, Dimensions: []string{"client-ip"}, Cost: cost},
			}
		}
	}
	return out
}()

// Select maps request attributes to the policies to evaluate; ok is false
// for an unknown method.
func Select(req *abi.RateSelectRequest) (sels []abi.RateSelection, ok bool) {
	class := routeClass(req.Method, req.Route)
	if class < 0 {
		return nil, false
	}
	mode := modeAPIKey
	switch {
	case req.APIKeyPlan != "":
	case req.PrincipalTier != "":
		mode = modePrincipal
	default:
		// Anonymous traffic is limited per client IP first, then on the free
		// tier's bucket keyed by that IP.
		mode = modeAnonymous
	}
	return selections[plan(req)][class][mode], true
}

// plan: the API-key plan, else the principal tier; unknown is free (0).
func plan(req *abi.RateSelectRequest) int {
	for i, p := range plans {
		if req.APIKeyPlan == p.name {
			return i
		}
	}
	for i, p := range plans {
		if req.PrincipalTier == p.name {
			return i
		}
	}
	return 0
}

func routeClass(method, route string) int {
	for _, m := range [...]string{"GET", "HEAD", "OPTIONS"} {
		if strings.EqualFold(method, m) {
			if route == "/search" || strings.HasPrefix(route, "/search/") {
				return classSearch
			}
			return classRead
		}
	}
	for _, m := range [...]string{"POST", "PUT", "PATCH", "DELETE"} {
		if strings.EqualFold(method, m) {
			return classWrite
		}
	}
	return -1
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
		sels, ok := Select(req)
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
