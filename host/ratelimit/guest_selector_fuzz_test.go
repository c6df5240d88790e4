package ratelimit

import (
	"strings"
	"testing"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/policy"
)

// FuzzGuestOutput feeds guest-controlled declarations and selections
// through the host mapping: it must never panic, every declaration it
// produces must either compile or be refused with a validation error, and
// every selection it accepts must name a mapped policy, a known source and
// a positive cost.
func FuzzGuestOutput(f *testing.F) {
	f.Add("pro.read", uint32(1), "token-bucket", uint64(600), int64(60_000), uint64(150), uint32(5), "route-class", "read", uint32(1))
	f.Add("per-user", uint32(2), "fixed-window", uint64(10), int64(1000), uint64(0), uint32(1), "principal", "api-key", uint32(1))
	f.Add("a..b", uint32(0), "concurrency", uint64(1<<63), int64(-1), uint64(1), uint32(0), "tenant,global", "", uint32(9))
	f.Fuzz(func(t *testing.T, id string, rev uint32, alg string, limit uint64, windowMs int64, burst uint64, maxCost uint32, dims, value string, cost uint32) {
		decl := abi.RatePolicyDecl{ID: id, Revision: rev, Algorithm: abi.Algorithm(alg), Limit: limit, WindowMs: windowMs,
			Burst: burst, MaximumCost: maxCost, Dimensions: strings.Split(dims, ",")}
		decls := GuestPolicyDecls(&abi.Description{RatePolicies: []abi.RatePolicyDecl{decl}})
		if len(decls) != 1 {
			t.Fatalf("one declaration in, %d out", len(decls))
		}
		if _, err := policy.CompileRatePolicies(decls, policy.RateCompileOptions{}); err != nil && !strings.Contains(err.Error(), "invalid") {
			t.Fatalf("compile failed without a validation error: %v", err)
		}
		values := make([]string, len(decl.Dimensions))
		for i := range values {
			values[i] = value
		}
		sels, err := mapSelections([]abi.RateSelection{{PolicyID: id, Dimensions: values, Cost: cost}},
			newDeclTable(&abi.Description{RatePolicies: []abi.RatePolicyDecl{decl}}))
		if err != nil {
			return
		}
		for _, s := range sels {
			if s.Policy != decls[0].ID {
				t.Fatalf("selection policy %q, mapped declaration %q", s.Policy, decls[0].ID)
			}
			for _, src := range s.Dimensions {
				if !validSource(src) {
					t.Fatalf("unknown source %q accepted", src)
				}
			}
			if s.Cost != int64(cost) {
				t.Fatalf("cost %d became %d", cost, s.Cost)
			}
		}
	})
}
