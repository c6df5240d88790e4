package abi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// minimalWasm is the 8-byte header of an empty module.
var minimalWasm = []byte("\x00asm\x01\x00\x00\x00")

func TestSelfTestSectionRoundTrip(t *testing.T) {
	got, err := ReadSelfTestSection(minimalWasm)
	require.NoError(t, err)
	assert.Nil(t, got, "no section, no vectors")

	req := (&RateSelectRequest{Route: "/", Method: "GET"}).AppendTo(nil)
	v := &SelfTestVectors{Vectors: []SelfTestVector{{Export: ExportRateSelect, Request: req, Response: []byte{0, 10, 0}}}}
	wasm := AppendSelfTestSection(minimalWasm, v)
	got, err = ReadSelfTestSection(wasm)
	require.NoError(t, err)
	assert.Equal(t, v, got)

	_, err = ReadSelfTestSection(AppendSelfTestSection(wasm, v))
	require.ErrorIs(t, err, ErrSelfTestSection, "duplicate section")
	_, err = ReadSelfTestSection(wasm[:len(wasm)-1])
	require.ErrorIs(t, err, ErrSelfTestSection, "truncated")
	_, err = ReadSelfTestSection(AppendSelfTestSection(minimalWasm, &SelfTestVectors{Vectors: []SelfTestVector{{Export: ExportDescribe}}}))
	require.ErrorIs(t, err, ErrSelfTestSection, "describe is not a vector export")
	_, err = ReadSelfTestSection([]byte("not wasm"))
	require.ErrorIs(t, err, ErrSelfTestSection)
}

func FuzzReadSelfTestSection(f *testing.F) {
	f.Add(minimalWasm)
	f.Add(AppendSelfTestSection(minimalWasm, &SelfTestVectors{Vectors: []SelfTestVector{{Export: ExportRender, Request: []byte{11}, Response: []byte{4, 0}}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ReadSelfTestSection(b)
		if err != nil || v == nil {
			return
		}
		// Decoding is canonical: re-encoding reproduces a readable section.
		again, err := ReadSelfTestSection(AppendSelfTestSection(minimalWasm, v))
		require.NoError(t, err)
		require.Equal(t, v, again)
	})
}
