package plugins

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

// TestDecodeResponseChecksDeclarations exercises the one place typed answers
// are re-checked (both flavours call it from Exchange) against the
// declarations of real modules.
func TestDecodeResponseChecksDeclarations(t *testing.T) {
	e := newEngine(t, Config{})
	rate := load(t, e, "rate-policy", Limits{})
	codec := load(t, e, "codec", Limits{})
	ok := func(m abi.Message) []byte { return m.AppendTo(abi.AppendOKFrame(nil)) }

	sel := func(s ...abi.RateSelection) error {
		var resp abi.RateSelectResponse
		return DecodeResponse(rate, abi.ExportRateSelect, &abi.RateSelectRequest{}, ok(&abi.RateSelectResponse{Selections: s}), &resp)
	}
	require.NoError(t, sel(abi.RateSelection{PolicyID: "pro.read", Dimensions: []string{""}, Cost: 5}))
	require.NoError(t, sel())
	err := sel(abi.RateSelection{PolicyID: "pro.read", Dimensions: []string{""}, Cost: 1},
		abi.RateSelection{PolicyID: "gold.read", Dimensions: []string{""}, Cost: 1})
	require.ErrorIs(t, err, ErrUndeclaredSelection)
	assert.EqualError(t, err, ErrUndeclaredSelection.Error()+": selected an undeclared policy")
	for _, bad := range []abi.RateSelection{
		{PolicyID: "pro.read", Dimensions: []string{""}, Cost: 0},
		{PolicyID: "pro.read", Dimensions: []string{""}, Cost: 6},  // maximum_cost 5
		{PolicyID: "pro.write", Dimensions: []string{""}, Cost: 2}, // maximum_cost 1
		{PolicyID: "pro.read", Dimensions: []string{"", "x"}, Cost: 1},
		{PolicyID: "pro.read", Cost: 1},
	} {
		err := sel(bad)
		require.ErrorIs(t, err, ErrUndeclaredSelection, "%+v", bad)
		assert.EqualError(t, err, ErrUndeclaredSelection.Error()+": selection of "+bad.PolicyID, "%+v", bad)
	}

	// A status frame is the guest's answer, not a violation.
	var rs abi.RateSelectResponse
	err = DecodeResponse(rate, abi.ExportRateSelect, &abi.RateSelectRequest{}, abi.AppendErrorFrame(nil, abi.CodeInvalidRequest, "no"), &rs)
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
	// Another export's messages are a host bug, named as such.
	err = DecodeResponse(rate, abi.ExportRateSelect, &abi.RateSelectRequest{}, ok(&abi.RenderResponse{}), &abi.RenderResponse{})
	require.ErrorIs(t, err, ErrMessageMismatch)

	enc := func(schema string, version uint32) error {
		var resp abi.CodecEncodeResponse
		return DecodeResponse(codec, abi.ExportCodecEncode, &abi.CodecEncodeRequest{Schema: schema},
			ok(&abi.CodecEncodeResponse{Version: version, Payload: []byte("{}")}), &resp)
	}
	require.NoError(t, enc("user-profile", 2))
	assert.EqualError(t, enc("user-profile", 1), "encoded with version 1, declared write version 2")
	assert.EqualError(t, enc("other", 2), "encoded undeclared schema")

	var cr abi.CanonicalizeResponse
	assert.EqualError(t, DecodeResponse(codec, abi.ExportCacheCanonicalize, &abi.CanonicalizeRequest{}, ok(&abi.CanonicalizeResponse{}), &cr), "no key parts")
	var rr abi.RenderResponse
	assert.EqualError(t, DecodeResponse(codec, abi.ExportRender, &abi.RenderRequest{}, ok(&abi.RenderResponse{}), &rr), "no message parts")
	var dr abi.CodecDecodeResponse
	require.Error(t, DecodeResponse(codec, abi.ExportCodecDecode, &abi.CodecDecodeRequest{}, []byte{byte(abi.CodeOK), 0xff}, &dr),
		"a body that does not decode")
}
