package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// TestSelectAllocatesNothing pins the hot path: decoding, Select and the
// response encoding allocate nothing once the dispatcher's buffers exist
// (in a wasm guest each allocation costs about a microsecond).
func TestSelectAllocatesNothing(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	for _, req := range []abi.RateSelectRequest{
		{Route: "/search/x", Method: "get", APIKeyPlan: "pro", Attrs: []abi.Attr{{Name: "region", Value: "eu"}}},
		{Route: "/x", Method: "POST", ClientIPClass: "public"},
	} {
		in := req.AppendTo(nil)
		out := d.Handle(abi.ExportRateSelect, in, nil)
		allocs := testing.AllocsPerRun(100, func() { out = d.Handle(abi.ExportRateSelect, in, out[:0]) })
		require.Zero(t, allocs, "%+v", req)
		_, err := abi.ParseFrame(out)
		require.NoError(t, err)
	}
}
