package idempotency

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/owner"
)

// FuzzDecodeRequest: the sidecar's decoder never panics, fails only with a
// *httpjson.Error, and accepts only bodies whose every field is within its
// bounds for the step; an accepted request survives a round trip unchanged
// (two distinct bodies never decode to one request by folding bytes).
func FuzzDecodeRequest(f *testing.F) {
	const tok = "0123456789abcdef0123456789abcdef"
	fp := `"fingerprint":"` + fingerprint("r") + `"`
	base := `"route":"create-payment","principal":"tenant-7","key":"k-1","operation-id":"op"`
	for _, s := range []string{
		`{` + base + `,` + fp + `}`,
		`{` + base + `,` + fp + `,"owner-token":"` + tok + `","codec-id":"json-v1"}`,
		`{` + base + `,"owner-token":"` + tok + `","attempt":1}`,
		`{` + base + `,"owner-token":"` + tok + `","attempt":2,"response":"eyJpZCI6NDJ9"}`,
		`{` + base + `,"owner-token":"` + tok + `","attempt":1,"disposition":"abandon"}`,
		`{"route":"r","route":"s"}`,
		`{"Route":"r"}`,
		"{\"principal\":\"\xff\"}",
		`{"key":"\ud800"}`,
		`null`, `[]`, `{}`, ``,
	} {
		for step := StepClaim; step <= StepRelease; step++ {
			f.Add(uint8(step), []byte(s))
		}
	}
	lim := Limits{MaxResponseBytes: 64}
	f.Fuzz(func(t *testing.T, rawStep uint8, body []byte) {
		step := Step(rawStep % 8) // includes one invalid step (0)
		req, err := DecodeRequest(step, body, lim)
		if err != nil {
			var he *httpjson.Error
			require.True(t, errors.As(err, &he), "%T", err)
			assert.Contains(t, []int{400, 404, 413}, he.Status)
			return
		}
		require.True(t, step >= StepClaim && step <= StepRelease)
		assert.True(t, ValidRoute(req.Route))
		assert.True(t, len(req.Principal) >= 1 && len(req.Principal) <= MaxPrincipalBytes && utf8.ValidString(req.Principal))
		assert.True(t, len(req.Key) >= 1 && len(req.Key) <= MaxKeyBytes && utf8.ValidString(req.Key))
		assert.True(t, len(req.OperationID) >= 1 && len(req.OperationID) <= MaxOperationIDBytes && utf8.ValidString(req.OperationID))
		if req.OwnerToken != "" || step != StepClaim {
			_, perr := owner.Parse(req.OwnerToken)
			assert.NoError(t, perr)
		}
		if step == StepClaim || step == StepInspect {
			assert.Len(t, req.Fingerprint, FingerprintHexLen)
			assert.Zero(t, req.Attempt)
		} else {
			assert.Empty(t, req.Fingerprint)
			assert.Empty(t, req.CodecID)
			assert.Positive(t, req.Attempt)
		}
		if step == StepComplete {
			resp, derr := base64.StdEncoding.Strict().DecodeString(req.Response)
			require.NoError(t, derr)
			assert.LessOrEqual(t, len(resp), lim.MaxResponseBytes)
		} else {
			assert.Empty(t, req.Response)
		}
		if step == StepFail {
			assert.Contains(t, []string{"retryable", "abandon"}, req.Disposition)
		} else {
			assert.Empty(t, req.Disposition)
		}
		again, err := json.Marshal(req)
		require.NoError(t, err)
		back, err := DecodeRequest(step, again, lim)
		require.NoError(t, err)
		assert.Equal(t, req, back)
	})
}
