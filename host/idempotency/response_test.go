package idempotency

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sample() Response {
	return Response{Status: 201, Header: http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/v1/payments/42"},
		"Link":         {"</a>; rel=a", "</b>; rel=b"},
	}, Body: []byte(`{"id":42}`)}
}

func TestResponseRoundTrip(t *testing.T) {
	b, err := sample().Encode()
	require.NoError(t, err)
	got, err := DecodeResponse(b, DefaultMaxResponseBytes)
	require.NoError(t, err)
	assert.Equal(t, sample(), got)
	again, err := got.Encode()
	require.NoError(t, err)
	assert.Equal(t, b, again, "decode then encode is byte-identical")

	empty := Response{Status: 204, Header: http.Header{}}
	b, err = empty.Encode()
	require.NoError(t, err)
	got, err = DecodeResponse(b, DefaultMaxResponseBytes)
	require.NoError(t, err)
	assert.Equal(t, 204, got.Status)
	assert.Empty(t, got.Body)
}

// TestResponseGolden pins the stored encoding: records outlive a deploy.
func TestResponseGolden(t *testing.T) {
	b, err := sample().Encode()
	require.NoError(t, err)
	path := filepath.Join("testdata", "response-v1.hex")
	if os.Getenv("CAPHOST_UPDATE_GOLDEN") == "1" {
		require.NoError(t, os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "golden file missing: run with CAPHOST_UPDATE_GOLDEN=1 once")
	assert.Equal(t, strings.TrimSpace(string(want)), hex.EncodeToString(b))
}

func TestResponseRefusals(t *testing.T) {
	for name, r := range map[string]Response{
		"status":      {Status: 99},
		"crlf value":  {Status: 200, Header: http.Header{"X-A": {"a\r\nSet-Cookie: x"}}},
		"bad name":    {Status: 200, Header: http.Header{"X A": {"v"}}},
		"not canon":   {Status: 200, Header: http.Header{"x-a": {"v"}}},
		"obs-text":    {Status: 200, Header: http.Header{"X-A": {"caf\xe9"}}},
		"many values": {Status: 200, Header: http.Header{"X-A": make([]string, maxHeaders+1)}},
	} {
		_, err := r.Encode()
		assert.Error(t, err, name)
	}
	good, err := sample().Encode()
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("CHR2"), good[4:]...),
		"trailing":  append(append([]byte(nil), good...), 'x'),
		"truncated": good[:len(good)-1],
		"too big":   good,
	} {
		limit := DefaultMaxResponseBytes
		if name == "too big" {
			limit = len(good) - 1
		}
		_, err := DecodeResponse(b, limit)
		assert.ErrorIs(t, err, ErrCorruptResponse, name)
	}
}

func FuzzDecodeResponse(f *testing.F) {
	good, _ := sample().Encode()
	f.Add(good)
	f.Add([]byte("CHR1\x00\xc8\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResponse(b, DefaultMaxResponseBytes)
		if err != nil {
			require.ErrorIs(t, err, ErrCorruptResponse)
			return
		}
		again, err := r.Encode()
		require.NoError(t, err, "whatever decodes re-encodes")
		require.Equal(t, b, again, "and byte-identically: one encoding per response")
	})
}

// TestRecorderKeepsAllowlistAndBound: the client gets everything; the
// copy keeps only allowlisted headers and fails past its bound.
func TestRecorderKeepsAllowlistAndBound(t *testing.T) {
	w := httptest.NewRecorder()
	rec := newRecorder(w, DefaultReplayHeaders(), 16)
	rec.Header().Set("Content-Type", "text/plain")
	rec.Header().Set("Set-Cookie", "session=secret")
	rec.WriteHeader(202)
	_, _ = rec.Write([]byte("0123456789"))
	resp, ok := rec.response()
	require.True(t, ok)
	assert.Equal(t, 202, resp.Status)
	assert.Equal(t, http.Header{"Content-Type": {"text/plain"}}, resp.Header, "Set-Cookie is never replayed")
	_, _ = rec.Write([]byte("0123456789"))
	_, ok = rec.response()
	assert.False(t, ok, "over the bound: not storable")
	assert.Equal(t, "01234567890123456789", w.Body.String(), "the client got it all")
}
