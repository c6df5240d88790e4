package main

import (
	"strings"
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
	for _, tc := range []struct {
		region string
		attrs  []abi.Attr
		want   []string // nil: refused as invalid-request
	}{
		// The sidecar's attributes: the path key as "key", query parameters
		// by name; unknown ones do not change the key.
		{"products", []abi.Attr{{Name: "key", Value: "sku-42"}}, []string{"sku-42", "en"}},
		{"products", []abi.Attr{{Name: "key", Value: "SKU-42"}, {Name: "locale", Value: "de-CH"}, {Name: "utm", Value: "x"}}, []string{"SKU-42", "de-ch"}},
		{"products", []abi.Attr{{Name: "key", Value: "../etc"}}, nil},
		{"products", []abi.Attr{{Name: "key", Value: strings.Repeat("a", 65)}}, nil},
		{"products", []abi.Attr{{Name: "key", Value: "SKU-42"}, {Name: "locale", Value: strings.Repeat("a", 17)}}, nil},
		{"products", []abi.Attr{{Name: "id", Value: "sku-42"}}, nil}, // the former attribute name
		{"search-results", []abi.Attr{{Name: "key", Value: "  Red   SHOES "}}, []string{"red shoes", "1"}},
		{"search-results", []abi.Attr{{Name: "key", Value: "red shoes"}, {Name: "page", Value: "12"}}, []string{"red shoes", "12"}},
		{"search-results", []abi.Attr{{Name: "key", Value: "red shoes"}, {Name: "page", Value: "10000"}}, nil},
		{"search-results", []abi.Attr{{Name: "key", Value: "red shoes"}, {Name: "page", Value: "-1"}}, nil},
		{"search-results", []abi.Attr{{Name: "key", Value: strings.Repeat("q", maxQuery+1)}}, nil},
		{"search-results", []abi.Attr{{Name: "key", Value: " \t "}}, nil},
		{"search-results", []abi.Attr{{Name: "q", Value: "red shoes"}}, nil}, // the former attribute name
	} {
		var resp abi.CanonicalizeResponse
		err := call(t, d, abi.ExportCacheCanonicalize, &abi.CanonicalizeRequest{Region: tc.region, Attrs: tc.attrs}, &resp)
		if tc.want == nil {
			require.ErrorIs(t, err, abi.CodeInvalidRequest, "%s %v", tc.region, tc.attrs)
			continue
		}
		require.NoError(t, err, "%s %v", tc.region, tc.attrs)
		assert.Equal(t, tc.want, resp.Parts, "%s %v", tc.region, tc.attrs)
	}

	var resp abi.CanonicalizeResponse
	err = call(t, d, abi.ExportCacheCanonicalize, &abi.CanonicalizeRequest{Region: "nope"}, &resp)
	require.ErrorIs(t, err, abi.CodeNotFound)
}

// The declarations the host's cache reads: products asks for an L1 (it is
// not strict, so the host grants it) and both regions name guests/codec's
// schemas.
func TestDeclarations(t *testing.T) {
	d := Module().Description()
	require.NoError(t, d.Validate())
	require.Len(t, d.Regions, 2)
	p, s := d.Regions[0], d.Regions[1]
	assert.Equal(t, abi.RegionDecl{ID: "products", KeyVersion: 1, SoftTTLMs: 30_000, HardTTLMs: 600_000,
		NegativeTTLMs: 5_000, JitterPercent: 10, StaleIfError: true, L1: true, MaxBytes: 64 << 10, Codec: "product"}, p)
	assert.Equal(t, abi.RegionDecl{ID: "search-results", KeyVersion: 1, SoftTTLMs: 5_000, HardTTLMs: 30_000,
		NegativeTTLMs: 1_000, JitterPercent: 20, MaxBytes: 256 << 10, Codec: "search-page"}, s)
}

func TestPolicyRevisionKnob(t *testing.T) {
	old := policyRevision
	t.Cleanup(func() { policyRevision = old })
	for rev, want := range map[string]int64{"v1": 30_000, "v2": 60_000, "v99": 600_000, "garbage": 30_000, "v0": 30_000} {
		policyRevision = rev
		d := Module().Description()
		require.NoError(t, d.Validate(), rev)
		assert.Equal(t, want, d.Regions[0].SoftTTLMs, rev)
		assert.Equal(t, int64(5_000), d.Regions[1].SoftTTLMs, "only products changes (%s)", rev)
	}
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
