// Package tiers is the product rate policy shared by both flavours of the
// reference rate-policy guest (guests/rate-policy, native SDK, and
// guests/rate-policy-extism, Extism PDK): tiered token-bucket limits by
// API-key plan (free, pro, enterprise) and route class (read, write,
// search), plus a fixed-window guard for anonymous clients. The flavours
// differ only in their glue; the table and the selection live here once, so
// they cannot drift. It imports only package abi and the standard library,
// so it builds for wasip1 under either flavour.
package tiers

import (
	"strings"

	"github.com/caphost/caphost/abi"
)

// plans and their per-minute limits per route class. Search is charged on the
// read bucket at a higher cost rather than getting a bucket of its own.
var plans = []struct {
	name        string
	read, write uint64
}{
	{"free", 60, 10},
	{"pro", 600, 120},
	{"enterprise", 6000, 1200},
}

// SearchCost is what a search request costs on its plan's read bucket.
const SearchCost = 5

// Policies declares every policy at revision rev, with every limit and
// burst multiplied by rev (so a hot swap to revision 2 visibly doubles
// them).
func Policies(rev uint32) []abi.RatePolicyDecl {
	scale := uint64(rev)
	var pols []abi.RatePolicyDecl
	for _, p := range plans {
		for _, rc := range []struct {
			class   string
			limit   uint64
			maxCost uint32
		}{{"read", p.read, SearchCost}, {"write", p.write, 1}} {
			pols = append(pols, abi.RatePolicyDecl{
				ID: p.name + "." + rc.class, Revision: rev, Algorithm: abi.AlgTokenBucket,
				Limit: rc.limit * scale, WindowMs: 60_000, Burst: rc.limit / 4 * scale, MaximumCost: rc.maxCost,
				Dimensions: []string{"api-key"}, FailureMode: "fail-closed",
			})
		}
	}
	return append(pols, abi.RatePolicyDecl{
		ID: "anonymous.ip", Revision: rev, Algorithm: abi.AlgFixedWindow,
		Limit: 30 * scale, WindowMs: 60_000, MaximumCost: 1, FailureMode: "fail-closed",
		Dimensions: []string{"client-ip"},
	})
}

// Select maps request attributes to the policies to evaluate; ok is false
// for an unknown method. It allocates nothing (each allocation costs about
// a microsecond in a wasm guest): every possible answer is built once, and
// the request's strings are only compared. The returned slice is shared:
// callers must not modify it.
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
				bucket, cost = "read", SearchCost
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

// plan picks the API-key plan, else the principal tier, as an index into
// plans; anything unknown is free (index 0) so a typo never grants a bigger
// budget.
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

// routeClass classifies the request; methods match case-insensitively
// (EqualFold, because ToUpper would allocate for lower-case input).
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
