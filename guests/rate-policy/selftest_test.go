package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors/vectorstest"
)

// TestSelfTestVectors checks the vectors `make guests` bundles into this
// guest: the guest answers every one byte for byte, and every recorded
// answer says what the policy table in this package's comment promises
// (written out here by hand, so a wrongly recorded answer fails).
func TestSelfTestVectors(t *testing.T) {
	f := vectorstest.Load(t, "selftest.json", "rate-policy", Module())

	// policy[dimension values]*cost, in evaluation order.
	want := map[string]string{
		"pro API key, read route: pro.read at cost 1, keyed by the API key":              `pro.read[""]*1`,
		"enterprise API key, search route: the read bucket at the search cost 5":         `enterprise.read[""]*5`,
		"free API key, write: free.write at cost 1":                                      `free.write[""]*1`,
		"no API key, pro principal: pro.read keyed by the principal":                     `pro.read["principal"]*1`,
		"anonymous: the per-IP guard first, then the free bucket keyed by the client IP": `anonymous.ip[""]*1, free.read["client-ip"]*1`,
		"an unknown plan gets the free budget, never a bigger one":                       `free.read[""]*1`,
		"methods match case-insensitively: lower-case delete is a write":                 `enterprise.write[""]*1`,
		"an unknown method is refused as invalid-request":                                "invalid-request: unknown method",
	}
	require.Len(t, f.Vectors, len(want), "every vector has a hand-written expectation")
	for _, v := range f.Vectors {
		exp, ok := want[v.Name]
		require.True(t, ok, "no expectation for vector %q", v.Name)
		require.Equal(t, abi.ExportRateSelect, v.Export)
		assert.Equal(t, exp, summary(v), v.Name)
	}
}

func summary(v vectors.Vector) string {
	if v.Status != abi.CodeOK {
		return v.Status.String() + ": " + v.Detail
	}
	var parts []string
	for _, s := range v.Response.(*abi.RateSelectResponse).Selections {
		parts = append(parts, fmt.Sprintf("%s%q*%d", s.PolicyID, s.Dimensions, s.Cost))
	}
	return strings.Join(parts, ", ")
}
