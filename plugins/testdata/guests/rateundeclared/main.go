// Command rateundeclared is a test guest that loads and answers but fails
// exactly one conformance check, "select returns declared policy ids with
// bounded costs": for /orders/42 it selects a policy it never declared and
// for /search/items a cost above the declared maximum. Every answer is
// deterministic and every other request gets a declared selection.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "rateundeclared", Rate: &guest.RatePolicies{
		Policies: []abi.RatePolicyDecl{{ID: "undeclared.ok", Revision: 1, Algorithm: abi.AlgFixedWindow,
			Limit: 10, WindowMs: 1000, MaximumCost: 2}},
		Select: func(r *abi.RateSelectRequest) ([]abi.RateSelection, error) {
			switch r.Route {
			case "/orders/42":
				return []abi.RateSelection{{PolicyID: "undeclared.other", Cost: 1}}, nil
			case "/search/items":
				return []abi.RateSelection{{PolicyID: "undeclared.ok", Cost: 3}}, nil
			}
			return []abi.RateSelection{{PolicyID: "undeclared.ok", Cost: 1}}, nil
		},
	}})
}

func main() {}
