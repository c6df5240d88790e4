package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
	"github.com/caphost/caphost/guests/internal/tiers"
)

func TestSelect(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	cases := []struct {
		name string
		req  abi.RateSelectRequest
		want []abi.RateSelection
	}{
		{"pro read", abi.RateSelectRequest{Route: "/orders", Method: "GET", APIKeyPlan: "pro"},
			[]abi.RateSelection{{PolicyID: "pro.read", Dimensions: []string{""}, Cost: 1}}},
		{"enterprise write via tier", abi.RateSelectRequest{Route: "/orders", Method: "post", PrincipalTier: "enterprise"},
			[]abi.RateSelection{{PolicyID: "enterprise.write", Dimensions: []string{"principal"}, Cost: 1}}},
		{"search costs more", abi.RateSelectRequest{Route: "/search/items", Method: "GET", APIKeyPlan: "free"},
			[]abi.RateSelection{{PolicyID: "free.read", Dimensions: []string{""}, Cost: tiers.SearchCost}}},
		{"unknown plan is free", abi.RateSelectRequest{Route: "/x", Method: "DELETE", APIKeyPlan: "platinum"},
			[]abi.RateSelection{{PolicyID: "free.write", Dimensions: []string{""}, Cost: 1}}},
		{"anonymous", abi.RateSelectRequest{Route: "/x", Method: "GET", ClientIPClass: "public"},
			[]abi.RateSelection{{PolicyID: "anonymous.ip", Dimensions: []string{""}, Cost: 1}, {PolicyID: "free.read", Dimensions: []string{"client-ip"}, Cost: 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			frame := d.Handle(abi.ExportRateSelect, tc.req.AppendTo(nil), nil)
			body, err := abi.ParseFrame(frame)
			require.NoError(t, err)
			var resp abi.RateSelectResponse
			require.NoError(t, resp.Unmarshal(body))
			assert.Equal(t, tc.want, resp.Selections)
		})
	}
	req := abi.RateSelectRequest{Route: "/x", Method: "BREW"}
	_, err = abi.ParseFrame(d.Handle(abi.ExportRateSelect, req.AppendTo(nil), nil))
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
}

func TestPolicyRevisionKnob(t *testing.T) {
	v1 := Module().Rate.Policies
	old := policyRevision
	t.Cleanup(func() { policyRevision = old })
	policyRevision = "v2"
	v2 := Module().Rate.Policies
	require.Len(t, v2, len(v1))
	for i := range v1 {
		assert.Equal(t, uint32(1), v1[i].Revision)
		assert.Equal(t, uint32(2), v2[i].Revision)
		assert.Equal(t, 2*v1[i].Limit, v2[i].Limit, v1[i].ID)
		assert.Equal(t, 2*v1[i].Burst, v2[i].Burst, v1[i].ID)
	}
	_, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	policyRevision = "garbage"
	assert.Equal(t, uint32(1), Module().Rate.Policies[0].Revision)
}
