// Command kthcall is a hostile test guest: a rate-policy module whose
// answer to an input changes only on that input's third call, and only when
// another input was asked between its second and third. Asked the same
// request twice in a row it answers alike, so a determinism check made of
// back-to-back pairs accepts it; a check that repeats inputs interleaved
// refuses it. It keeps the state a real guest might: a per-instance count
// of each request it has seen.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

var (
	seen = map[string]int{}
	last string
)

func init() {
	guest.Register(&guest.Module{Name: "kthcall", Rate: &guest.RatePolicies{
		Policies: []abi.RatePolicyDecl{{ID: "kth.p", Revision: 1, Algorithm: abi.AlgFixedWindow,
			Limit: 10, WindowMs: 1000, MaximumCost: 2}},
		Select: func(r *abi.RateSelectRequest) ([]abi.RateSelection, error) {
			key := r.Method + " " + r.Route + " " + r.APIKeyPlan + " " + r.PrincipalTier + " " + r.ClientIPClass
			seen[key]++
			cost := uint32(1)
			if seen[key] == 3 && last != key {
				cost = 2
			}
			last = key
			return []abi.RateSelection{{PolicyID: "kth.p", Cost: cost}}, nil
		},
	}})
}

func main() {}
