package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors/vectorstest"
)

// TestSelfTestVectors checks the vectors `make guests` bundles into this
// guest: the guest answers every one byte for byte, and every recorded
// answer is what the regions promise (written out here by hand, so a wrongly
// recorded answer fails).
func TestSelfTestVectors(t *testing.T) {
	f := vectorstest.Load(t, "selftest.json", "cache-region", Module())

	want := map[string]string{
		"products: the id (path key) and the lower-cased locale":                                     `parts ["SKU-42" "de"]`,
		"products: a missing locale defaults to en, so equivalent requests share an entry":           `parts ["SKU-42" "en"]`,
		"products: an id with punctuation is refused":                                                "invalid-request: id must be 1-64 letters, digits or '-'",
		"products: the id is the path key (attribute key): an attribute id alone is refused":         "invalid-request: id must be 1-64 letters, digits or '-'",
		"search-results: the query is case- and whitespace-normalised, page defaults to 1":           `parts ["red running shoes" "1"]`,
		"search-results: an explicit page is kept":                                                   `parts ["red running shoes" "3"]`,
		"search-results: the query is the path key (attribute key): an attribute q alone is refused": "invalid-request: query must be 1-256 bytes",
		"products admit a value within 64 KiB":                                                       "admit true",
		"products refuse a value over 64 KiB":                                                        "admit false",
		"search-results refuse results that loaded in under 2 ms":                                    "admit false",
		"search-results admit results that took 2 ms or more":                                        "admit true",
	}
	require.Len(t, f.Vectors, len(want), "every vector has a hand-written expectation")
	for _, v := range f.Vectors {
		exp, ok := want[v.Name]
		require.True(t, ok, "no expectation for vector %q", v.Name)
		var got string
		switch r := v.Response.(type) {
		case *abi.CanonicalizeResponse:
			got = fmt.Sprintf("parts %q", r.Parts)
		case *abi.AdmitResponse:
			got = fmt.Sprintf("admit %t", r.Admit)
		case nil:
			got = v.Status.String() + ": " + v.Detail
		}
		assert.Equal(t, exp, got, v.Name)
	}
}
