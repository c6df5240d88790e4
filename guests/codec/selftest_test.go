package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors/vectorstest"
)

// TestSelfTestVectors checks the vectors `make guests` bundles into this
// guest: the guest answers every one byte for byte, and every recorded
// answer means what the schema history promises (written out here by hand,
// so a wrongly recorded answer fails).
func TestSelfTestVectors(t *testing.T) {
	f := vectorstest.Load(t, "selftest.json", "codec", Module())

	ada := `{"id":"u-7","name":"Ada Lovelace","email":"ada@example.com","locale":"de"}`
	shoe := `{"id":"SKU-42","name":"Trail shoe","price_cents":12999,"currency":"EUR","tags":["outdoor","sale"]}`
	page := `{"query":"red running shoes","page":2,"ids":["SKU-42","SKU-7","SKU-1009"]}`
	type answer struct {
		status abi.Code
		detail string
		json   string // the payload (encode) or value (decode), compared as JSON
	}
	want := map[string]answer{
		"encode writes the canonical v2 payload at write version 2":                   {abi.CodeOK, "", ada},
		"decode reads a v2 payload unchanged":                                         {abi.CodeOK, "", ada},
		"decode upgrades a v1 payload: full_name becomes name, locale defaults to en": {abi.CodeOK, "", `{"id":"u-9","name":"Grace Hopper","email":"grace@example.com","locale":"en"}`},
		"encode refuses a value missing required fields":                              {abi.CodeInvalidRequest, `value: missing member "email"`, ""},
		"a v1 payload without a name is corrupt, not upgraded to an empty name":       {abi.CodeCorrupt, "v1 payload: id, name, email and locale are required", ""},
		"user-profile: a case-variant member name is corrupt, not read as id":         {abi.CodeCorrupt, `v2 payload: unknown member "ID"`, ""},
		"user-profile: encode refuses a repeated member rather than keeping the last": {abi.CodeInvalidRequest, "value: repeated member", ""},

		"product: encode writes the canonical v2 payload (fixed member order) at write version 2": {abi.CodeOK, "", shoe},
		"product: decode reads a v2 payload unchanged":                                            {abi.CodeOK, "", shoe},
		"product: decode upgrades a v1 payload: the decimal price becomes exact integer cents":    {abi.CodeOK, "", `{"id":"SKU-7","name":"Wool socks","price_cents":29,"currency":"USD"}`},
		"product: decode upgrades a v1 price with one decimal: 1234.5 is 123450 cents":            {abi.CodeOK, "", `{"id":"SKU-8","name":"Rain jacket","price_cents":123450,"currency":"GBP"}`},
		"product: a v1 price with three decimals is corrupt, not rounded":                         {abi.CodeCorrupt, "v1 payload: price must be a decimal of 1-12 digits and at most 2 decimals", ""},
		"product: a v1 payload stored as v2 is corrupt":                                           {abi.CodeCorrupt, `v2 payload: unknown member "price"`, ""},
		"product: stored version 3 is a schema mismatch":                                          {abi.CodeSchemaMismatch, "stored version 3 is not readable", ""},
		"product: encode refuses a value without price_cents rather than pricing it at 0":         {abi.CodeInvalidRequest, `value: missing member "price_cents"`, ""},
		"product: encode refuses a lower-case currency":                                           {abi.CodeInvalidRequest, "value: currency must be 3 upper-case letters", ""},

		"search-page: encode writes the canonical v1 payload at write version 1": {abi.CodeOK, "", page},
		"search-page: decode reads a v1 payload unchanged":                       {abi.CodeOK, "", page},
		"search-page: a truncated payload is corrupt":                            {abi.CodeCorrupt, "v1 payload: truncated JSON", ""},
		"search-page: stored version 2 is a schema mismatch":                     {abi.CodeSchemaMismatch, "stored version 2 is not readable", ""},
		"search-page: encode refuses page 0":                                     {abi.CodeInvalidRequest, "value: page must be 1-9999", ""},
	}
	// Each schema's write version, which every encode answer must carry.
	writes := map[string]uint32{"user-profile": 2, "product": 2, "search-page": 1}
	require.Len(t, f.Vectors, len(want), "every vector has a hand-written expectation")
	for _, v := range f.Vectors {
		exp, ok := want[v.Name]
		require.True(t, ok, "no expectation for vector %q", v.Name)
		require.Equal(t, exp.status, v.Status, v.Name)
		assert.Equal(t, exp.detail, v.Detail, v.Name)
		switch r := v.Response.(type) {
		case *abi.CodecEncodeResponse:
			schema := v.Request.(*abi.CodecEncodeRequest).Schema
			assert.Equal(t, writes[schema], r.Version, "%s: written at the schema's write version", v.Name)
			assert.JSONEq(t, exp.json, string(r.Payload), v.Name)
		case *abi.CodecDecodeResponse:
			assert.JSONEq(t, exp.json, string(r.Value), v.Name)
		case nil:
			assert.Empty(t, exp.json, v.Name)
		default:
			t.Fatalf("%s: unexpected response %T", v.Name, r)
		}
	}
}
