package fenced

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/internal/redistest"
)

func fuzzSeeds(reg fence.Registration) []string {
	own := "0123456789abcdef0123456789abcdef"
	return []string{
		fields(reg, "ttl-ms", 1000),
		fields(reg, "ttl-ms", 1000, "wait-ms", 20, "owner-token", own),
		fields(reg, "owner-token", own),
		fields(reg, "owner-token", own, "counter", 1, "ttl-ms", 1000),
		fields(reg, "owner-token", own, "counter", 1),
		fields(reg, "resource-epoch", int64(1)<<53-1, "counter", int64(1)<<53-1, "owner-token", own),
		`{"purpose":"p","purpose":"q"}`,
		`{"Purpose":"p"}`,
		"{\"resource\":\"\xff\"}",
		`{"resource":"\ud800"}`,
		`{"resource-epoch":1e3}`,
		`null`, `[]`, `{}`, ``,
	}
}

// FuzzDecodeRequest: the decoder never panics, fails only with a
// *httpjson.Error, accepts only bodies whose every field is within its
// bounds (integers ≤ 2^53−1), and an accepted request survives a round
// trip unchanged.
func FuzzDecodeRequest(f *testing.F) {
	reg := fence.Registration{Resource: "acct-7", Epoch: 42, Digest: fence.NewDigest()}
	for _, s := range fuzzSeeds(reg) {
		for op := OpAcquire; op <= OpRelease; op++ {
			f.Add(uint8(op), []byte(s))
		}
	}
	lim := Limits{DriftBudget: lease.DefaultDriftBudget, MaxTTL: time.Hour, MaxWait: time.Minute}
	f.Fuzz(func(t *testing.T, rawOp uint8, body []byte) {
		op := Op(rawOp % 5) // includes one invalid op (0)
		req, err := DecodeRequest(op, body, lim)
		if err != nil {
			var he *httpjson.Error
			require.True(t, errors.As(err, &he), "%T", err)
			assert.Contains(t, []int{400, 404, 413}, he.Status)
			return
		}
		checkRequest(t, op, req, lim)
		again, err := json.Marshal(req)
		require.NoError(t, err)
		back, err := DecodeRequest(op, again, lim)
		require.NoError(t, err)
		assert.Equal(t, req, back)
	})
}

func checkRequest(t *testing.T, op Op, req SidecarRequest, lim Limits) {
	t.Helper()
	require.True(t, op >= OpAcquire && op <= OpRelease)
	assert.True(t, lease.ValidPurpose(req.Purpose))
	assert.True(t, len(req.Resource) >= 1 && len(req.Resource) <= fence.MaxResourceLen && utf8.ValidString(req.Resource))
	assert.True(t, req.ResourceEpoch >= 1 && req.ResourceEpoch <= MaxJSONInteger)
	_, derr := fence.ParseDigest(req.RegistrationDigest)
	assert.NoError(t, derr)
	assert.True(t, len(req.OperationID) >= 1 && len(req.OperationID) <= lease.MaxOperationIDBytes && utf8.ValidString(req.OperationID))
	if req.OwnerToken != "" || op != OpAcquire {
		_, perr := owner.Parse(req.OwnerToken)
		assert.NoError(t, perr)
	}
	if op == OpRenew || op == OpRelease {
		assert.True(t, req.Counter >= 1 && req.Counter <= fence.MaxCounter)
	} else {
		assert.Zero(t, req.Counter)
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
}

// FuzzSidecarHandler drives the mounted handlers against a private
// redis-server holding a provisioned counter: whatever the body, the
// answer is JSON with a 200, 400, 413 or 503 (never a 5xx but 503, never
// a redirect); an error has a code; a 200 answers a body the decoder
// accepts; a held answer carries a token within 1..2^53−1 of the
// request's epoch; only acquire reveals an owner token.
func FuzzSidecarHandler(f *testing.F) {
	srv := redistest.StartStandalone(f)
	w := newWorld(f, srv.Addr(), srv, Config{MaxTTL: time.Minute, MaxWait: 20 * time.Millisecond})
	reg := w.activate(f, "acct-7")
	h := sidecar(w.c)
	for _, s := range fuzzSeeds(reg) {
		for op := OpAcquire; op <= OpRelease; op++ {
			f.Add(uint8(op), []byte(s))
		}
	}
	lim := w.c.Limits()
	f.Fuzz(func(t *testing.T, rawOp uint8, body []byte) {
		op := Op(rawOp%4 + 1)
		r := httptest.NewRequest(http.MethodPost, "/v1/fenced-lease/"+op.String(), strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		require.Contains(t, []int{200, 400, 413, 503}, rec.Code, rec.Body.String())
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		if rec.Code != http.StatusOK {
			var e httpjson.ErrorBody
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
			assert.NotEmpty(t, e.Code)
			return
		}
		req, err := DecodeRequest(op, body, lim)
		require.NoError(t, err, "a 200 for a body the decoder refuses")
		checkRequest(t, op, req, lim)
		var got SidecarResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
		assert.Equal(t, op.String(), got.Operation)
		assert.NotEmpty(t, got.Kind)
		if got.Held {
			assert.Equal(t, req.ResourceEpoch, got.ResourceEpoch)
			assert.True(t, got.Counter >= 1 && got.Counter <= fence.MaxCounter)
			assert.Positive(t, got.ValidityMs)
		} else {
			assert.Zero(t, got.Counter, "no token without a grant")
		}
		if op != OpAcquire {
			assert.Empty(t, got.OwnerToken)
			if req.OwnerToken != "" {
				assert.NotContains(t, rec.Body.String(), req.OwnerToken)
			}
		}
	})
}
