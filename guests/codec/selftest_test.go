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
	type answer struct {
		status abi.Code
		detail string
		json   string // the payload (encode) or value (decode), compared as JSON
	}
	want := map[string]answer{
		"encode writes the canonical v2 payload at write version 2":                   {abi.CodeOK, "", ada},
		"decode reads a v2 payload unchanged":                                         {abi.CodeOK, "", ada},
		"decode upgrades a v1 payload: full_name becomes name, locale defaults to en": {abi.CodeOK, "", `{"id":"u-9","name":"Grace Hopper","email":"grace@example.com","locale":"en"}`},
		"encode refuses a value missing required fields":                              {abi.CodeInvalidRequest, "value: id, name, email and locale are required", ""},
		"a v1 payload without a name is corrupt, not upgraded to an empty name":       {abi.CodeCorrupt, "payload: id, name, email and locale are required", ""},
	}
	require.Len(t, f.Vectors, len(want), "every vector has a hand-written expectation")
	for _, v := range f.Vectors {
		exp, ok := want[v.Name]
		require.True(t, ok, "no expectation for vector %q", v.Name)
		require.Equal(t, exp.status, v.Status, v.Name)
		assert.Equal(t, exp.detail, v.Detail, v.Name)
		switch r := v.Response.(type) {
		case *abi.CodecEncodeResponse:
			assert.Equal(t, uint32(2), r.Version, "%s: writes use v2", v.Name)
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
