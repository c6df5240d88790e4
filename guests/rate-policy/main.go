// Command rate-policy is the reference rate-policy guest: tiered token-bucket
// limits by API-key plan (free, pro, enterprise) and route class (read, write,
// search), plus a fixed-window guard for anonymous clients. It owns product
// rate policy only; algorithms, keys, clocks and Redis stay in the host.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rate-policy.wasm ./guests/rate-policy
package main

import (
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

// Module returns the guest's declarations and handlers.
func Module() *guest.Module {
	var pols []abi.RatePolicyDecl
	for _, p := range plans {
		for _, rc := range []struct {
			class string
			limit uint64
		}{{"read", p.read}, {"write", p.write}} {
			pols = append(pols, abi.RatePolicyDecl{
				ID: p.name + "." + rc.class, Revision: 1, Algorithm: abi.AlgTokenBucket,
				Limit: rc.limit, WindowMs: 60_000, Burst: rc.limit / 4, MaximumCost: searchCost,
				Dimensions: []string{"route-class"}, FailureMode: "fail-closed",
			})
		}
	}
	pols = append(pols, abi.RatePolicyDecl{
		ID: "anonymous.ip", Revision: 1, Algorithm: abi.AlgFixedWindow,
		Limit: 30, WindowMs: 60_000, MaximumCost: 1, FailureMode: "fail-closed",
	})
	return &guest.Module{Name: "rate-policy", Rate: &guest.RatePolicies{Policies: pols, Select: Select}}
}

// Select maps request attributes to the policies to evaluate.
func Select(req *abi.RateSelectRequest) ([]abi.RateSelection, error) {
	class, cost := routeClass(req.Method, req.Route)
	if class == "" {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "unknown method")
	}
	bucket := class
	if class == "search" {
		bucket = "read"
	}
	var out []abi.RateSelection
	if req.APIKeyPlan == "" && req.PrincipalTier == "" {
		// Anonymous traffic is limited per client-IP class first, then on the free tier.
		out = append(out, abi.RateSelection{PolicyID: "anonymous.ip", Cost: 1})
	}
	out = append(out, abi.RateSelection{PolicyID: plan(req) + "." + bucket, Dimensions: []string{class}, Cost: cost})
	return out, nil
}

// plan picks the API-key plan, else the principal tier; anything unknown is
// treated as free so a typo never grants a bigger budget.
func plan(req *abi.RateSelectRequest) string {
	for _, cand := range []string{req.APIKeyPlan, req.PrincipalTier} {
		for _, p := range plans {
			if cand == p.name {
				return p.name
			}
		}
	}
	return "free"
}

func routeClass(method, route string) (string, uint32) {
	switch strings.ToUpper(method) {
	case "GET", "HEAD", "OPTIONS":
		if route == "/search" || strings.HasPrefix(route, "/search/") {
			return "search", searchCost
		}
		return "read", 1
	case "POST", "PUT", "PATCH", "DELETE":
		return "write", 1
	}
	return "", 0
}
