package abi

import (
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden vectors under testdata/golden")

// sampleMessages is one populated value of every message type; the golden
// files pin their encodings so any layout change is a visible ABI change.
func sampleMessages() map[string]Message {
	return map[string]Message{
		"codec_encode_request":  &CodecEncodeRequest{Schema: "user-profile", Value: []byte(`{"id":"1"}`)},
		"codec_encode_response": &CodecEncodeResponse{Version: 2, Payload: []byte("payload")},
		"codec_decode_request":  &CodecDecodeRequest{Schema: "user-profile", StoredVersion: 1, Payload: []byte("old")},
		"codec_decode_response": &CodecDecodeResponse{Value: []byte("v")},
		"canonicalize_request":  &CanonicalizeRequest{Region: "products", Attrs: []Attr{{"sku", "A-1"}, {"locale", "de"}}},
		"canonicalize_response": &CanonicalizeResponse{Parts: []string{"A-1", "de"}},
		"admit_request":         &AdmitRequest{Region: "products", SizeBytes: 300, Class: "hot", CostHintUS: 1500, LoadLatency: 20000},
		"admit_response":        &AdmitResponse{Admit: true},
		"rate_select_request": &RateSelectRequest{Route: "/search", Method: "GET", PrincipalTier: "gold",
			APIKeyPlan: "pro", ClientIPClass: "public", Attrs: []Attr{{"region", "eu"}}},
		"rate_select_response": &RateSelectResponse{Selections: []RateSelection{
			{PolicyID: "pro.read", Dimensions: []string{"search"}, Cost: 5}, {PolicyID: "anonymous.ip", Cost: 1}}},
		"render_request": &RenderRequest{Template: "welcome", Version: 1, Locale: "en", Channel: "email",
			Params: []Attr{{"name", "<Ada>"}}, NowUnixMilli: -1},
		"render_response": &RenderResponse{Parts: []MessagePart{{Name: "subject", ContentType: "text/plain", Body: []byte("Hi")}}},
	}
}

func fresh(m Message) Message {
	switch m.(type) {
	case *CodecEncodeRequest:
		return &CodecEncodeRequest{}
	case *CodecEncodeResponse:
		return &CodecEncodeResponse{}
	case *CodecDecodeRequest:
		return &CodecDecodeRequest{}
	case *CodecDecodeResponse:
		return &CodecDecodeResponse{}
	case *CanonicalizeRequest:
		return &CanonicalizeRequest{}
	case *CanonicalizeResponse:
		return &CanonicalizeResponse{}
	case *AdmitRequest:
		return &AdmitRequest{}
	case *AdmitResponse:
		return &AdmitResponse{}
	case *RateSelectRequest:
		return &RateSelectRequest{}
	case *RateSelectResponse:
		return &RateSelectResponse{}
	case *RenderRequest:
		return &RenderRequest{}
	case *RenderResponse:
		return &RenderResponse{}
	}
	panic("unknown message")
}

func allMessages() []Message {
	var out []Message
	for _, m := range sampleMessages() {
		out = append(out, fresh(m))
	}
	return out
}

func TestGoldenRoundTrip(t *testing.T) {
	for name, msg := range sampleMessages() {
		t.Run(name, func(t *testing.T) {
			enc := msg.AppendTo(nil)
			path := filepath.Join("testdata", "golden", name+".hex")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(hex.EncodeToString(enc)+"\n"), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./abi -run Golden -update to create")
			assert.Equal(t, strings.TrimSpace(string(want)), hex.EncodeToString(enc))

			got := fresh(msg)
			require.NoError(t, got.Unmarshal(enc))
			assert.Equal(t, msg, got)
			// Every strict prefix is rejected, and so is a trailing byte.
			for i := range enc {
				require.ErrorIs(t, fresh(msg).Unmarshal(enc[:i]), ErrMalformed, "prefix %d", i)
			}
			require.ErrorIs(t, fresh(msg).Unmarshal(append(enc, 0)), ErrMalformed)
		})
	}
}

func TestDecoderRejects(t *testing.T) {
	var m CodecEncodeRequest
	// Wrong tag: a request sent to the wrong export.
	err := m.Unmarshal((&CodecDecodeResponse{}).AppendTo(nil))
	require.ErrorIs(t, err, ErrMalformed)
	// Non-minimal varint length (0x80 0x00 for 0).
	require.ErrorIs(t, m.Unmarshal([]byte{byte(TagCodecEncodeRequest), 0x80, 0x00, 0}), ErrMalformed)
	// Invalid UTF-8 in a string.
	require.ErrorIs(t, m.Unmarshal([]byte{byte(TagCodecEncodeRequest), 1, 0xff, 0}), ErrMalformed)
	// Oversized string bound.
	long := (&CodecEncodeRequest{Schema: strings.Repeat("s", MaxNameBytes+1)}).AppendTo(nil)
	require.ErrorIs(t, m.Unmarshal(long), ErrMalformed)
	// Too many list items.
	var rs RateSelectResponse
	many := &RateSelectResponse{}
	for range MaxSelections + 1 {
		many.Selections = append(many.Selections, RateSelection{PolicyID: "p", Cost: 1})
	}
	require.ErrorIs(t, rs.Unmarshal(many.AppendTo(nil)), ErrMalformed)
	// A count larger than the remaining bytes fails before allocating.
	require.ErrorIs(t, rs.Unmarshal([]byte{byte(TagRateSelectResponse), 10}), ErrMalformed)
	// Bool must be 0 or 1.
	var ar AdmitResponse
	require.ErrorIs(t, ar.Unmarshal([]byte{byte(TagAdmitResponse), 2}), ErrMalformed)
	// uint32 overflow.
	var er CodecEncodeResponse
	require.ErrorIs(t, er.Unmarshal(AppendBytes(AppendUvarint([]byte{byte(TagCodecEncodeResponse)}, 1<<32), nil)), ErrMalformed)
	// Oversized message.
	require.ErrorIs(t, m.Unmarshal(make([]byte, MaxMessageBytes+1)), ErrMalformed)
	var de *DecodeError
	require.ErrorAs(t, m.Unmarshal([]byte{byte(TagCodecEncodeRequest), 5}), &de)
	assert.Equal(t, "schema", de.Field)
}

func TestFrames(t *testing.T) {
	body, err := ParseFrame(append(AppendOKFrame(nil), 1, 2))
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 2}, body)

	_, err = ParseFrame(AppendErrorFrame(nil, CodeCorrupt, "bad payload"))
	require.ErrorIs(t, err, CodeCorrupt)
	var se *StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "bad payload", se.Detail)

	// Details are truncated on a rune boundary.
	_, err = ParseFrame(AppendErrorFrame(nil, CodeInternal, strings.Repeat("é", MaxDetailBytes)))
	require.ErrorAs(t, err, &se)
	assert.LessOrEqual(t, len(se.Detail), MaxDetailBytes)
	// CodeOK is not an error code.
	_, err = ParseFrame(AppendErrorFrame(nil, CodeOK, "x"))
	require.ErrorIs(t, err, CodeInternal)

	for _, bad := range [][]byte{nil, {200}, {byte(CodeCorrupt)}, {byte(CodeCorrupt), 1, 'a', 'b'}} {
		_, err := ParseFrame(bad)
		require.ErrorIs(t, err, ErrMalformed, "%x", bad)
	}
}

func TestVersion(t *testing.T) {
	err := CheckVersion(2, 0)
	require.ErrorIs(t, err, ErrUnsupportedMajor)
	assert.NotErrorIs(t, err, ErrNewerMinor)
	assert.Contains(t, err.Error(), "guest speaks ABI 2.0, host speaks 1.1")
	require.NoError(t, CheckVersion(1, 0), "an older minor is served")
	err = CheckVersion(1, Minor+1)
	require.ErrorIs(t, err, ErrNewerMinor)
	assert.NotErrorIs(t, err, ErrUnsupportedMajor)
	assert.Contains(t, err.Error(), "guest speaks ABI 1.2, host speaks 1.1: upgrade caphost")
	maj, min := UnpackVersion(PackVersion(1, 3))
	assert.Equal(t, [2]uint16{1, 3}, [2]uint16{maj, min})
}

func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for e := ExportDescribe; int(e) < NumExports; e++ {
		require.True(t, strings.HasPrefix(e.Name(), "caphost_"))
		require.False(t, seen[e.Name()])
		seen[e.Name()] = true
	}
	assert.Equal(t, "", Export(0).Name())
	for _, k := range []Kind{KindCodec, KindCacheRegion, KindRatePolicy, KindRenderer} {
		require.True(t, k.Valid())
		for _, e := range ExportsOf(k) {
			assert.Equal(t, k, e.Kind())
		}
	}
	assert.False(t, Kind("lua").Valid())
	assert.False(t, Algorithm("leaky-lua").Valid())
}
