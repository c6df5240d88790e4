// Command ratedrop is a test guest that declares none of the reference
// guest's policies: a generation that drops free.read, after which a guest
// bringing free.read back changed under its old revision must still be
// refused (the revision's state outlives the generation that dropped it).
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "ratedrop", Rate: &guest.RatePolicies{
		Policies: []abi.RatePolicyDecl{{ID: "drop.all", Revision: 1, Algorithm: abi.AlgFixedWindow,
			Limit: 100, WindowMs: 60_000, MaximumCost: 5, Dimensions: []string{"api-key"}, FailureMode: "fail-closed"}},
		Select: func(req *abi.RateSelectRequest) ([]abi.RateSelection, error) {
			return []abi.RateSelection{{PolicyID: "drop.all", Dimensions: []string{""}, Cost: 1}}, nil
		},
	}})
}

func main() {}
