package view

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

// check decodes b with both decoders and fails unless they agree on
// acceptance and, when accepted, on every field.
func check(t *testing.T, b []byte) {
	t.Helper()
	var buf []abi.Attr
	pairs := []struct {
		name string
		fast func() (bool, any)
		slow func() (error, any)
	}{
		{"codec-encode", func() (bool, any) { var m abi.CodecEncodeRequest; return CodecEncode(b, &m), m },
			func() (error, any) { var m abi.CodecEncodeRequest; return m.Unmarshal(b), m }},
		{"codec-decode", func() (bool, any) { var m abi.CodecDecodeRequest; return CodecDecode(b, &m), m },
			func() (error, any) { var m abi.CodecDecodeRequest; return m.Unmarshal(b), m }},
		{"canonicalize", func() (bool, any) { var m abi.CanonicalizeRequest; return Canonicalize(b, &m, &buf), m },
			func() (error, any) { var m abi.CanonicalizeRequest; return m.Unmarshal(b), m }},
		{"admit", func() (bool, any) { var m abi.AdmitRequest; return Admit(b, &m), m },
			func() (error, any) { var m abi.AdmitRequest; return m.Unmarshal(b), m }},
		{"rate-select", func() (bool, any) { var m abi.RateSelectRequest; return RateSelect(b, &m, &buf), m },
			func() (error, any) { var m abi.RateSelectRequest; return m.Unmarshal(b), m }},
		{"render", func() (bool, any) { var m abi.RenderRequest; return Render(b, &m, &buf), m },
			func() (error, any) { var m abi.RenderRequest; return m.Unmarshal(b), m }},
	}
	for _, p := range pairs {
		ok, fast := p.fast()
		err, slow := p.slow()
		require.Equal(t, err == nil, ok, "%s: view accepted=%v, abi error=%v, input %x", p.name, ok, err, b)
		if ok {
			require.Equal(t, slow, fast, "%s: fields differ for %x", p.name, b)
		}
	}
}

func goldenRequests(t testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "golden", "*_request.hex"))
	require.NoError(t, err)
	require.Len(t, files, 6, "golden request vectors from package abi")
	var out [][]byte
	for _, f := range files {
		h, err := os.ReadFile(f)
		require.NoError(t, err)
		b, err := hex.DecodeString(strings.TrimSpace(string(h)))
		require.NoError(t, err)
		out = append(out, b)
	}
	return out
}

func TestGoldenAgreesWithABI(t *testing.T) {
	for _, b := range goldenRequests(t) {
		check(t, b)
		// Every truncation and a trailing byte must be rejected by both.
		for i := range b {
			check(t, b[:i])
		}
		check(t, append(append([]byte(nil), b...), 0))
	}
	// Hand-picked edge cases: non-minimal varint, 64-bit overflow, invalid
	// UTF-8, a count beyond the input, an oversized message.
	for _, b := range [][]byte{
		{byte(abi.TagCodecEncodeRequest), 0x80, 0x00, 0x00},
		{byte(abi.TagAdmitRequest), 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0},
		{byte(abi.TagAdmitRequest), 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0},
		{byte(abi.TagCodecEncodeRequest), 1, 0xff, 0},
		{byte(abi.TagCanonicalizeRequest), 0, 5, 0},
		{byte(abi.TagCodecDecodeRequest), 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0},
		append([]byte{byte(abi.TagCodecEncodeRequest), 0}, make([]byte, abi.MaxMessageBytes)...),
	} {
		check(t, b)
	}
}

func TestRateSelectAllocatesNothing(t *testing.T) {
	req := abi.RateSelectRequest{Route: "/search/x", Method: "GET", APIKeyPlan: "pro",
		Attrs: []abi.Attr{{Name: "region", Value: "eu"}, {Name: "tier", Value: "gold"}}}
	b := req.AppendTo(nil)
	var m abi.RateSelectRequest
	var buf []abi.Attr
	require.True(t, RateSelect(b, &m, &buf)) // grows buf once
	allocs := testing.AllocsPerRun(100, func() {
		if !RateSelect(b, &m, &buf) {
			t.Fatal("rejected")
		}
	})
	require.Zero(t, allocs)
	require.Equal(t, req, m)
}

// FuzzAgreesWithABI is differential: on any input the view decoders accept
// exactly what abi accepts and produce the same fields.
func FuzzAgreesWithABI(f *testing.F) {
	for _, b := range goldenRequests(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { check(t, b) })
}
