package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func call(t *testing.T, d *guest.Dispatcher, e abi.Export, req abi.Message, resp abi.Message) error {
	t.Helper()
	body, err := abi.ParseFrame(d.Handle(e, req.AppendTo(nil), nil))
	if err != nil {
		return err
	}
	require.NoError(t, resp.Unmarshal(body))
	return nil
}

func TestCanonicalize(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	var resp abi.CanonicalizeResponse
	require.NoError(t, call(t, d, abi.ExportCacheCanonicalize, &abi.CanonicalizeRequest{Region: "products",
		Attrs: []abi.Attr{{Name: "id", Value: "sku-42"}}}, &resp))
	assert.Equal(t, []string{"sku-42", "en"}, resp.Parts)
	require.NoError(t, call(t, d, abi.ExportCacheCanonicalize, &abi.CanonicalizeRequest{Region: "search-results",
		Attrs: []abi.Attr{{Name: "q", Value: "  Red   SHOES "}}}, &resp))
	assert.Equal(t, []string{"red shoes", "1"}, resp.Parts)

	err = call(t, d, abi.ExportCacheCanonicalize, &abi.CanonicalizeRequest{Region: "products",
		Attrs: []abi.Attr{{Name: "id", Value: "../etc"}}}, &resp)
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
	err = call(t, d, abi.ExportCacheCanonicalize, &abi.CanonicalizeRequest{Region: "nope"}, &resp)
	require.ErrorIs(t, err, abi.CodeNotFound)
}

func TestAdmit(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	var resp abi.AdmitResponse
	for _, tc := range []struct {
		req  abi.AdmitRequest
		want bool
	}{
		{abi.AdmitRequest{Region: "products", SizeBytes: 1000}, true},
		{abi.AdmitRequest{Region: "products", SizeBytes: 64<<10 + 1}, false},
		{abi.AdmitRequest{Region: "search-results", SizeBytes: 1000, LoadLatency: 500}, false},
		{abi.AdmitRequest{Region: "search-results", SizeBytes: 1000, LoadLatency: 5000}, true},
	} {
		require.NoError(t, call(t, d, abi.ExportCacheAdmit, &tc.req, &resp))
		assert.Equal(t, tc.want, resp.Admit, "%+v", tc.req)
	}
}
