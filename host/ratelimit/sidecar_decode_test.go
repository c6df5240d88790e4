package ratelimit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/policy"
)

// evaluateVectors reads testdata/evaluate: valid/*.json must decode;
// invalid/<code>/*.json must fail with exactly that code.
func evaluateVectors(t testing.TB) (valid map[string][]byte, invalid map[string]string, bodies map[string][]byte) {
	valid, invalid, bodies = map[string][]byte{}, map[string]string{}, map[string][]byte{}
	files, err := filepath.Glob(filepath.Join("testdata", "evaluate", "*", "*.json"))
	require.NoError(t, err)
	more, err := filepath.Glob(filepath.Join("testdata", "evaluate", "invalid", "*", "*.json"))
	require.NoError(t, err)
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, _ := filepath.Rel(filepath.Join("testdata", "evaluate"), f)
		bodies[rel] = b
		parts := strings.Split(filepath.ToSlash(rel), "/")
		switch {
		case parts[0] == "valid":
			valid[rel] = b
		case parts[0] == "invalid" && len(parts) == 3:
			invalid[rel] = parts[1]
		}
	}
	require.NotEmpty(t, valid)
	require.NotEmpty(t, invalid)
	return valid, invalid, bodies
}

func TestDecodeEvaluateVectors(t *testing.T) {
	valid, invalid, bodies := evaluateVectors(t)
	for name, b := range valid {
		_, err := DecodeEvaluateRequest(b)
		assert.NoError(t, err, name)
	}
	for name, code := range invalid {
		_, err := DecodeEvaluateRequest(bodies[name])
		require.Error(t, err, name)
		var c *httpjson.Error
		require.True(t, errors.As(err, &c), name)
		assert.Equal(t, code, string(c.Code()), name)
	}
	req, err := DecodeEvaluateRequest(valid[filepath.Join("valid", "explicit.json")])
	require.NoError(t, err)
	assert.Equal(t, EvaluateRequest{
		Attributes: EvaluateAttributes{Route: "/login", Method: "POST"},
		Subject:    map[string]string{"client-ip": "203.0.113.7", "route": "/login"},
		Policy:     "login", Cost: 1, EvaluationID: "req-42", DeadlineMs: 200,
	}, req)
}

// FuzzDecodeEvaluateRequest: the decoder never panics, and whatever it
// accepts is within every documented bound.
func FuzzDecodeEvaluateRequest(f *testing.F) {
	_, _, bodies := evaluateVectors(f)
	for _, b := range bodies {
		f.Add(b)
	}
	f.Add([]byte(`{"subject":{"api-key":"\u0000"}}`))
	f.Add([]byte(`{"attributes":{"route":"\xff"}}`))
	f.Add([]byte("{\"subject\":{\"api-key\":\"mk-\xff\"}}"))
	f.Add([]byte("{\"subject\":{\"api-key\":\"mk-\xfe\"}}"))
	f.Add([]byte(`{"subject":{"api-key":"mk-\ud800"}}`))
	f.Add([]byte(`{"subject":{"api-key":"a","api-key":"b"}}`))
	f.Add([]byte(`{"Subject":{"api-key":"a"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeEvaluateRequest(body)
		if !decodedStrictly(t, body, err) {
			return
		}
		for _, a := range []string{req.Attributes.Route, req.Attributes.Method, req.Attributes.PrincipalTier,
			req.Attributes.APIKeyPlan, req.Attributes.ClientIPClass, req.Attributes.ResourceClass} {
			if len(a) > MaxAttributeBytes || !utf8.ValidString(a) {
				t.Fatalf("attribute out of bounds: %q", a)
			}
		}
		if len(req.Subject) > MaxSubjectEntries {
			t.Fatalf("%d subject entries", len(req.Subject))
		}
		for k, v := range req.Subject {
			if d := policy.RateDimension(k); !d.Valid() || d == policy.DimGlobal || v == "" || len(v) > MaxSubjectValueBytes {
				t.Fatalf("subject entry out of bounds: %q", k)
			}
		}
		if req.Cost < 0 || (req.Cost > 0 && req.Policy == "") || req.DeadlineMs < 0 || req.DeadlineMs > 10_000 ||
			len(req.EvaluationID) > MaxEvaluationIDBytes || len(req.Policy) > MaxPolicyIDBytes {
			t.Fatalf("accepted out-of-bounds request: %+v", req)
		}
	})
}

// FuzzDecodePermitRequest: the concurrency decoders never panic, refuse
// with a code, and accept only bounded, valid UTF-8 requests.
func FuzzDecodePermitRequest(f *testing.F) {
	tok := strings.Repeat("ab", 16)
	for _, s := range []string{
		`{"policy":"exports","subject":{"tenant":"t","route":"/r"},"ttl-ms":5000}`,
		`{"policy":"exports","subject":{"tenant":"t"},"owner":"` + tok + `","revision":"r1"}`,
		"{\"policy\":\"exports\",\"subject\":{\"tenant\":\"t-\xff\"}}",
		`{"policy":"exports","subject":{"tenant":"t-\ud800"}}`,
		`{"policy":"a","policy":"b"}`, `{"Policy":"exports"}`, `null`, `{"policy":null}`,
	} {
		f.Add(uint8(1), []byte(s))
		f.Add(uint8(2), []byte(s))
	}
	f.Fuzz(func(t *testing.T, op uint8, body []byte) {
		req, err := DecodePermitRequest(ConcurrencyOp(op%4), body)
		if !decodedStrictly(t, body, err) {
			return
		}
		if req.Policy == "" || len(req.Policy) > MaxPolicyIDBytes || len(req.Subject) > MaxSubjectEntries ||
			req.TTLMs < 0 || req.DeadlineMs < 0 || req.DeadlineMs > MaxSidecarDeadline.Milliseconds() {
			t.Fatalf("accepted out-of-bounds request: %+v", req)
		}
		for k, v := range req.Subject {
			if d := policy.RateDimension(k); !d.Valid() || d == policy.DimGlobal || v == "" || len(v) > MaxSubjectValueBytes || !utf8.ValidString(v) {
				t.Fatalf("subject entry out of bounds: %q", k)
			}
		}
		if op%4 != uint8(OpAcquire) {
			if _, err := ParseOwnerToken(req.Owner); err != nil {
				t.Fatalf("accepted a malformed owner token for %d", op%4)
			}
		}
	})
}

// decodedStrictly is the fuzz property every sidecar decoder shares: a
// refusal carries a code; an acceptance is one valid JSON value (UTF-8,
// unique names). It reports whether body was accepted.
func decodedStrictly(t *testing.T, body []byte, err error) bool {
	t.Helper()
	if err != nil {
		var c *httpjson.Error
		if !errors.As(err, &c) || c.Code() == "" {
			t.Fatalf("error without a code: %v", err)
		}
		return false
	}
	if !utf8.Valid(body) || !jsontext.Value(body).IsValid() {
		t.Fatalf("accepted a body that is not one valid JSON value (UTF-8, unique names): %q", body)
	}
	return true
}
