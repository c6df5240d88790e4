package lease

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/owner"
)

// FuzzDecodeRequest: the sidecar's decoder never panics, fails only with a
// *httpjson.Error, and accepts only bodies whose every field is within its
// bounds; an accepted request survives a round trip unchanged (two distinct
// bodies never decode to one request by folding bytes).
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"purpose":"nightly-cleanup","resource":"orders","operation-id":"op","ttl-ms":1000}`,
		`{"purpose":"nightly-cleanup","resource":"orders","operation-id":"op","ttl-ms":1000,"wait-ms":500,"owner-token":"0123456789abcdef0123456789abcdef"}`,
		`{"purpose":"p","resource":"\u00e9","operation-id":"op","owner-token":"0123456789abcdef0123456789abcdef"}`,
		`{"purpose":"p","purpose":"q"}`,
		`{"Purpose":"p"}`,
		"{\"resource\":\"\xff\"}",
		`{"resource":"\ud800"}`,
		`null`, `[]`, `{}`, ``,
	} {
		for op := OpAcquire; op <= OpRelease; op++ {
			f.Add(uint8(op), []byte(s))
		}
	}
	lim := Limits{DriftBudget: DefaultDriftBudget, MaxTTL: time.Hour, MaxWait: time.Minute}
	f.Fuzz(func(t *testing.T, rawOp uint8, body []byte) {
		op := Op(rawOp%5 + 0) // includes one invalid op (0)
		req, err := DecodeRequest(op, body, lim)
		if err != nil {
			var he *httpjson.Error
			require.True(t, errors.As(err, &he), "%T", err)
			assert.Contains(t, []int{400, 404, 413}, he.Status)
			return
		}
		require.True(t, op >= OpAcquire && op <= OpRelease)
		assert.True(t, ValidPurpose(req.Purpose))
		assert.True(t, len(req.Resource) >= 1 && len(req.Resource) <= MaxResourceBytes && utf8.ValidString(req.Resource))
		assert.True(t, len(req.OperationID) >= 1 && len(req.OperationID) <= MaxOperationIDBytes && utf8.ValidString(req.OperationID))
		if req.OwnerToken != "" || op != OpAcquire {
			_, perr := owner.Parse(req.OwnerToken)
			assert.NoError(t, perr)
		}
		if op == OpAcquire || op == OpRenew {
			assert.True(t, req.TTLMs > lim.DriftBudget.Milliseconds() && req.TTLMs <= lim.MaxTTL.Milliseconds())
		} else {
			assert.Zero(t, req.TTLMs)
		}
		assert.True(t, req.WaitMs >= 0 && req.WaitMs <= lim.MaxWait.Milliseconds())
		if op != OpAcquire {
			assert.Zero(t, req.WaitMs)
		}
		again, err := json.Marshal(req)
		require.NoError(t, err)
		back, err := DecodeRequest(op, again, lim)
		require.NoError(t, err)
		assert.Equal(t, req, back)
	})
}
