// Command timeleak is a hostile Extism (go-pdk) test guest: a rate policy
// whose selection carries what the guest read of the clock and of
// crypto/rand as its dimension value ("<unix nanoseconds> <16 hex digits>").
// A host that gave it the real clock or entropy would show them; the tests
// check that the Extism flavour, like the native one, gives neither.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	"github.com/extism/go-pdk"

	"github.com/caphost/caphost/abi"
)

func main() {}

//go:wasmexport caphost_abi_version
func exportVersion() int32 { return int32(abi.PackVersion(abi.Major, abi.Minor)) }

//go:wasmexport caphost_describe
func exportDescribe() int32 {
	d := abi.Description{
		ABI: abi.VersionDecl{Major: abi.Major, Minor: abi.Minor}, Module: "timeleak",
		Kinds: []abi.Kind{abi.KindRatePolicy},
		RatePolicies: []abi.RatePolicyDecl{{ID: "leak", Revision: 1, Algorithm: abi.AlgFixedWindow, Limit: 1,
			WindowMs: 1000, MaximumCost: 1, Dimensions: []string{"leak"}}},
	}
	js, _ := json.Marshal(d)
	pdk.Output(append([]byte{byte(abi.CodeOK)}, js...))
	return 0
}

//go:wasmexport caphost_rate_select
func exportSelect() int32 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	leak := strconv.FormatInt(time.Now().UnixNano(), 10) + " " + hex.EncodeToString(b[:])
	resp := abi.RateSelectResponse{Selections: []abi.RateSelection{{PolicyID: "leak", Dimensions: []string{leak}, Cost: 1}}}
	pdk.Output(resp.AppendTo(abi.AppendOKFrame(nil)))
	return 0
}
