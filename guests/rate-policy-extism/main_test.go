package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/guests/internal/tiers"
)

func TestHandle(t *testing.T) {
	var st State
	body, err := abi.ParseFrame(Handle(abi.ExportDescribe, nil, nil, &st))
	require.NoError(t, err)
	d, err := abi.ParseDescription(body)
	require.NoError(t, err)
	assert.Len(t, d.RatePolicies, 7)

	sel := func(req abi.RateSelectRequest) ([]abi.RateSelection, error) {
		body, err := abi.ParseFrame(Handle(abi.ExportRateSelect, req.AppendTo(nil), nil, &st))
		if err != nil {
			return nil, err
		}
		var resp abi.RateSelectResponse
		require.NoError(t, resp.Unmarshal(body))
		return resp.Selections, nil
	}
	got, err := sel(abi.RateSelectRequest{Route: "/search/items", Method: "get", APIKeyPlan: "pro"})
	require.NoError(t, err)
	assert.Equal(t, []abi.RateSelection{{PolicyID: "pro.read", Dimensions: []string{""}, Cost: tiers.SearchCost}}, got)
	got, err = sel(abi.RateSelectRequest{Route: "/x", Method: "DELETE"})
	require.NoError(t, err)
	assert.Equal(t, []abi.RateSelection{{PolicyID: "anonymous.ip", Dimensions: []string{""}, Cost: 1}, {PolicyID: "free.write", Dimensions: []string{"client-ip"}, Cost: 1}}, got)
	_, err = sel(abi.RateSelectRequest{Route: "/x", Method: "BREW"})
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
	_, err = abi.ParseFrame(Handle(abi.ExportRateSelect, []byte{1, 2, 3}, nil, &st))
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
	_, err = abi.ParseFrame(Handle(abi.ExportRender, nil, nil, &st))
	require.ErrorIs(t, err, abi.CodeUnsupported)

	// The hot path allocates nothing once State's buffers exist.
	in := (&abi.RateSelectRequest{Route: "/x", Method: "GET", APIKeyPlan: "enterprise", Attrs: []abi.Attr{{Name: "a", Value: "b"}}}).AppendTo(nil)
	st.out = Handle(abi.ExportRateSelect, in, st.out[:0], &st)
	assert.Zero(t, testing.AllocsPerRun(100, func() { st.out = Handle(abi.ExportRateSelect, in, st.out[:0], &st) }))
}
