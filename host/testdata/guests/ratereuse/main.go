// Command ratereuse is a test guest that changes the reference guest's
// free.read limits without a new revision. The host must refuse it before
// it serves: a changed policy under an old revision would reinterpret the
// state stored under that revision.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "ratereuse", Rate: &guest.RatePolicies{
		Policies: []abi.RatePolicyDecl{{ID: "free.read", Revision: 1, Algorithm: abi.AlgTokenBucket,
			Limit: 6000, WindowMs: 60_000, Burst: 6000, MaximumCost: 5, Dimensions: []string{"route-class"}}},
		Select: func(req *abi.RateSelectRequest) ([]abi.RateSelection, error) {
			return []abi.RateSelection{{PolicyID: "free.read", Dimensions: []string{"read"}, Cost: 1}}, nil
		},
	}})
}

func main() {}
