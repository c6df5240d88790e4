// Command ratebomb is a hostile test guest: it declares a rate policy but
// grabs far more memory than any module limit allows while it initialises.
// A host must refuse it as a swap candidate and keep the serving generation.
package main

import (
	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// sink keeps the allocations reachable so the Go runtime must grow memory.
var sink [][]byte

func init() {
	for range 1 << 12 {
		b := make([]byte, 1<<20)
		b[0] = 1
		sink = append(sink, b)
	}
	guest.Register(&guest.Module{Name: "ratebomb", Rate: &guest.RatePolicies{
		Policies: []abi.RatePolicyDecl{{ID: "free.read", Revision: 9, Algorithm: abi.AlgTokenBucket,
			Limit: 1000, WindowMs: 60_000, Burst: 1000, MaximumCost: 5, Dimensions: []string{"route-class"}}},
		Select: func(*abi.RateSelectRequest) ([]abi.RateSelection, error) { return nil, nil },
	}})
}

func main() {}
