// Command ratev2 is a test guest for hot swaps: a rate-policy module whose
// single policy, revision 2, is distinguishable in every answer from the
// reference rate-policy guest's ("swap.v2" instead of "<plan>.<class>").
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "ratev2", Rate: &guest.RatePolicies{
		Policies: []abi.RatePolicyDecl{{ID: "swap.v2", Revision: 2, Algorithm: abi.AlgTokenBucket,
			Limit: 100, WindowMs: 1000, Burst: 10, MaximumCost: 1, FailureMode: "fail-closed"}},
		Select: func(*abi.RateSelectRequest) ([]abi.RateSelection, error) {
			return []abi.RateSelection{{PolicyID: "swap.v2", Cost: 1}}, nil
		},
	}})
}

func main() {}
