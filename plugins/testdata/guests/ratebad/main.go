// Command ratebad is a test guest that loads and answers but fails the
// conformance suite: its selection cost alternates between calls, so equal
// requests get different answers.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

var calls uint32

func init() {
	guest.Register(&guest.Module{Name: "ratebad", Rate: &guest.RatePolicies{
		Policies: []abi.RatePolicyDecl{{ID: "bad.flaky", Revision: 1, Algorithm: abi.AlgFixedWindow,
			Limit: 10, WindowMs: 1000, MaximumCost: 2}},
		Select: func(*abi.RateSelectRequest) ([]abi.RateSelection, error) {
			calls++
			return []abi.RateSelection{{PolicyID: "bad.flaky", Cost: 1 + calls%2}}, nil
		},
	}})
}

func main() {}
