// Command rate-policy is the reference rate-policy guest: tiered token-bucket
// limits by API-key plan (free, pro, enterprise) and route class (read, write,
// search), plus a fixed-window guard for anonymous clients. It owns product
// rate policy only; algorithms, keys, clocks and Redis stay in the host.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rate-policy.wasm ./guests/rate-policy
//
// The policy revision is a build-time knob used to exercise hot swaps:
// building with -ldflags=-X=main.policyRevision=v2 declares every policy
// with revision 2 and doubles every limit and burst (any "vN" gives revision
// N and multiplies limits by N; anything else is revision 1).
package main

import (
	"strconv"
	"strings"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// c-shared modules have no main entry; the host runs _initialize, which runs
// init, so init is where a guest registers.
func init() { guest.Register(Module()) }

func main() {}

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

const searchCost = 5

// policyRevision is set at link time (-X=main.policyRevision=v2); see the
// package comment.
var policyRevision = "v1"

// revision parses policyRevision; a malformed value falls back to 1 so a bad
// build flag never produces an invalid describe.
func revision() uint32 {
	n, err := strconv.ParseUint(strings.TrimPrefix(policyRevision, "v"), 10, 8)
	if err != nil || n == 0 || !strings.HasPrefix(policyRevision, "v") {
		return 1
	}
	return uint32(n)
}

// Module returns the guest's declarations and handlers.
func Module() *guest.Module {
	rev := revision()
	scale := uint64(rev)
	var pols []abi.RatePolicyDecl
	for _, p := range plans {
		for _, rc := range []struct {
			class   string
			limit   uint64
			maxCost uint32
		}{{"read", p.read, searchCost}, {"write", p.write, 1}} {
			pols = append(pols, abi.RatePolicyDecl{
				ID: p.name + "." + rc.class, Revision: rev, Algorithm: abi.AlgTokenBucket,
				Limit: rc.limit * scale, WindowMs: 60_000, Burst: rc.limit / 4 * scale, MaximumCost: rc.maxCost,
				Dimensions: []string{"api-key"}, FailureMode: "fail-closed",
			})
		}
	}
	pols = append(pols, abi.RatePolicyDecl{
		ID: "anonymous.ip", Revision: rev, Algorithm: abi.AlgFixedWindow,
		Limit: 30 * scale, WindowMs: 60_000, MaximumCost: 1, FailureMode: "fail-closed",
		Dimensions: []string{"client-ip"},
	})
	return &guest.Module{Name: "rate-policy", Rate: &guest.RatePolicies{Policies: pols, Select: Select}}
}

// Select maps request attributes to the policies to evaluate. It allocates
// nothing (each allocation costs about a microsecond in a wasm guest): every
// possible answer is built once, and the request's strings are only compared.
func Select(req *abi.RateSelectRequest) ([]abi.RateSelection, error) {
	class := routeClass(req.Method, req.Route)
	if class < 0 {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "unknown method")
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
	return selections[plan(req)][class][mode], nil
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

// selections[plan][class][mode] is the answer for that combination.
// Search is charged on the read bucket at searchCost.
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
