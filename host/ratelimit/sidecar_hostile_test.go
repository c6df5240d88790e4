package ratelimit

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

// TestSidecarDistinctSubjectsNeverShareABucket: subject bytes that differ
// only in invalid UTF-8 (or a lone surrogate escape) used to decode to one
// U+FFFD value and share a bucket, so one caller could spend another's
// quota. Through the sidecar, every such body is refused before anything
// is stored, and valid distinct values each land in their own bucket in
// the real Redis (the host digests bytes: no normalisation, no folding).
func TestSidecarDistinctSubjectsNeverShareABucket(t *testing.T) {
	h := newSidecarHost(t, `
policies:
  per-key: {revision: r1, algorithm: fixed-window, limit: 100, window: 720h, subject: [api-key]}
  exports: {revision: r1, algorithm: concurrency, limit: 2, permit-ttl: 30s, subject: [tenant]}
`, nil)
	dbsize := func() int64 {
		n, err := h.srv.Admin().DBSize(ctxT(t)).Result()
		require.NoError(t, err)
		return n
	}
	refused := []struct{ path, body string }{
		{"/v1/ratelimit/evaluate", "{\"policy\":\"per-key\",\"subject\":{\"api-key\":\"mk-\xff\"}}"},
		{"/v1/ratelimit/evaluate", "{\"policy\":\"per-key\",\"subject\":{\"api-key\":\"mk-\xfe\"}}"},
		{"/v1/ratelimit/evaluate", "{\"policy\":\"per-key\",\"subject\":{\"api-key\":\"mk-\xed\xa0\x80\"}}"}, // an encoded surrogate
		{"/v1/ratelimit/evaluate", "{\"policy\":\"per-key\",\"subject\":{\"api-key\":\"mk-\xc0\xaf\"}}"},     // an overlong '/'
		{"/v1/ratelimit/evaluate", `{"policy":"per-key","subject":{"api-key":"mk-\ud800"}}`},
		{"/v1/ratelimit/evaluate", `{"policy":"per-key","subject":{"api-key":"mk-\udfff"}}`},
		{"/v1/ratelimit/evaluate", `{"policy":"per-key","subject":{"api-key":"mk-\ud800\u0041"}}`},
		{"/v1/ratelimit/evaluate", "{\"policy\":\"per-key\",\"subject\":{\"api-key\":\"k\"},\"attributes\":{\"route\":\"/\xff\"}}"},
		{"/v1/ratelimit/evaluate", "{\"policy\":\"per-key\",\"subject\":{\"api-key\":\"k\"},\"evaluation-id\":\"e-\xff\"}"},
		{"/v1/ratelimit/evaluate", `{"policy":"per-key","subject":{"api-key":"a","api-key":"b"}}`},
		{"/v1/ratelimit/evaluate", `{"policy":"per-key","Subject":{"api-key":"a"}}`},
		{"/v1/ratelimit/evaluate", `null`},
		{"/v1/ratelimit/evaluate", `{"policy":"per-key","subject":{"api-key":null}}`},
		{"/v1/concurrency/acquire", "{\"policy\":\"exports\",\"subject\":{\"tenant\":\"t-\xff\"}}"},
		{"/v1/concurrency/acquire", `{"policy":"exports","subject":{"tenant":"t-\ud800"}}`},
		{"/v1/concurrency/acquire", "{\"policy\":\"ex\xffports\",\"subject\":{\"tenant\":\"t\"}}"},
		{"/v1/concurrency/acquire", `{"policy":"exports","subject":{"tenant":"a"},"policy":"exports"}`},
		{"/v1/concurrency/acquire", `null`},
		{"/v1/concurrency/release", "{\"policy\":\"exports\",\"subject\":{\"tenant\":\"t\"},\"owner\":\"" + "0123456789abcdef0123456789abcde\xff" + "\"}"},
	}
	for i, c := range refused {
		rec, m := h.post(t, c.path, c.body)
		assert.Equal(t, http.StatusBadRequest, rec.Code, "case %d: %v", i, m)
		assert.Equal(t, "bad-request", m["code"], "case %d", i)
		assert.NotContains(t, m["message"], "mk-", "case %d: no value in the message", i)
	}
	assert.Zero(t, dbsize(), "no refused body reached Redis")

	// Distinct valid values, including U+FFFD itself and two spellings of
	// é that differ in bytes (NFC and NFD): one bucket each.
	values := []string{"mk-\u00ff", "mk-\u00fe", "mk-\ufffd", "mk-\ufffd\ufffd", "mk-\u00e9", "mk-e\u0301", "mk-\u0000", "mk-", "MK-"}
	for _, v := range values {
		b, err := json.Marshal(map[string]any{"policy": "per-key", "subject": map[string]string{"api-key": v}})
		require.NoError(t, err)
		rec, m := h.post(t, "/v1/ratelimit/evaluate", string(b))
		require.Equal(t, http.StatusOK, rec.Code, "%q: %v", v, m)
		assert.EqualValues(t, 99, m["remaining"], "%q starts its own bucket", v)
	}
	pol := policyOf(t, h.l.Policies(), "per-key")
	for _, v := range values {
		assert.Equal(t, int64(1), h.used(t, pol, Subject{policy.DimAPIKey: []byte(v)}), "%q", v)
	}
	assert.Equal(t, int64(len(values)), dbsize(), "one key per distinct subject, no more")

	// The same bytes spelled as an escape are the same subject.
	rec, m := h.post(t, "/v1/ratelimit/evaluate", `{"policy":"per-key","subject":{"api-key":"mk-\u00ff"}}`)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.EqualValues(t, 98, m["remaining"])
	assert.Equal(t, int64(len(values)), dbsize())
}
