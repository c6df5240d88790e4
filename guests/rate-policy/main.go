// Command rate-policy is the reference rate-policy guest (native flavour):
// tiered token-bucket limits by API-key plan (free, pro, enterprise) and
// route class (read, write, search), plus a fixed-window guard for anonymous
// clients — the table in guests/internal/tiers, shared with the Extism
// flavour. It owns product rate policy only; algorithms, keys, clocks and
// Redis stay in the host.
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
	"github.com/caphost/caphost/guests/internal/tiers"
)

// c-shared modules have no main entry; the host runs _initialize, which runs
// init, so init is where a guest registers.
func init() { guest.Register(Module()) }

func main() {}

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

// Module returns the guest's declarations and handlers: the shared tiers
// policy at this build's revision.
func Module() *guest.Module {
	return &guest.Module{Name: "rate-policy", Rate: &guest.RatePolicies{Policies: tiers.Policies(revision()), Select: Select}}
}

// Select is tiers.Select with the SDK's error for an unknown method.
func Select(req *abi.RateSelectRequest) ([]abi.RateSelection, error) {
	sels, ok := tiers.Select(req)
	if !ok {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "unknown method")
	}
	return sels, nil
}
