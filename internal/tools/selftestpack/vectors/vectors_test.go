package vectors

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

// referenceFiles are the vectors files of the reference guests.
func referenceFiles(t testing.TB) []string {
	files, err := filepath.Glob("../../../../guests/*/selftest.json")
	require.NoError(t, err)
	require.Len(t, files, 4, "codec, cache-region, rate-policy and renderer ship vectors")
	return files
}

func TestReferenceFilesAreCanonical(t *testing.T) {
	for _, path := range referenceFiles(t) {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		f, err := ReadFile(path)
		require.NoError(t, err, path)
		for _, v := range f.Vectors {
			assert.True(t, v.Recorded, "%s: %s", path, v.Name)
		}
		// The files are what selftestpack -record writes, so recording
		// again produces no diff beyond changed answers.
		again, err := f.Marshal()
		require.NoError(t, err)
		assert.Equal(t, string(raw), string(again), path)
		sec, err := f.Section()
		require.NoError(t, err, path)
		require.Len(t, sec.Vectors, len(f.Vectors))
	}
}

const rateVector = `{"format": "caphost-selftest-v1", "module": "m", "vectors": [
 {"name": "pro read", "export": "caphost_rate_select",
  "request": {"route": "/orders", "method": "GET", "api_key_plan": "pro", "attrs": [{"name": "a", "value": "b"}]},
  "response": {"status": "ok", "body": {"selections": [{"policy_id": "pro.read", "dimensions": [""], "cost": 2}]}}},
 {"name": "brew", "export": "caphost_rate_select", "request": {"route": "/", "method": "BREW"},
  "response": {"status": "invalid-request", "detail": "unknown method"}}]}`

func TestEncodesExactFrames(t *testing.T) {
	f, err := Parse([]byte(rateVector))
	require.NoError(t, err)
	sec, err := f.Section()
	require.NoError(t, err)
	require.Len(t, sec.Vectors, 2)

	wantReq := (&abi.RateSelectRequest{Route: "/orders", Method: "GET", APIKeyPlan: "pro", Attrs: []abi.Attr{{Name: "a", Value: "b"}}}).AppendTo(nil)
	wantResp := (&abi.RateSelectResponse{Selections: []abi.RateSelection{{PolicyID: "pro.read", Dimensions: []string{""}, Cost: 2}}}).AppendTo(abi.AppendOKFrame(nil))
	assert.Equal(t, abi.SelfTestVector{Export: abi.ExportRateSelect, Request: wantReq, Response: wantResp}, sec.Vectors[0])
	assert.Equal(t, abi.AppendErrorFrame(nil, abi.CodeInvalidRequest, "unknown method"), sec.Vectors[1].Response)

	// The frames a guest answers are recorded back into the same vectors.
	for i := range f.Vectors {
		v := Vector{Name: f.Vectors[i].Name, Export: f.Vectors[i].Export, Request: f.Vectors[i].Request}
		require.NoError(t, v.SetFrame(sec.Vectors[i].Response))
		assert.Equal(t, f.Vectors[i], v)
	}
	bad := Vector{Export: abi.ExportRateSelect}
	require.ErrorIs(t, bad.SetFrame(nil), abi.ErrMalformed)
	require.Error(t, bad.SetFrame([]byte{0, byte(abi.TagRenderResponse), 0}), "a render response to rate_select")

	// Mismatches names the vector and shows what the guest said instead.
	calls := 0
	mm := f.Mismatches(func(e abi.Export, req []byte) []byte {
		calls++
		assert.Equal(t, abi.ExportRateSelect, e)
		return abi.AppendErrorFrame(nil, abi.CodeInternal, "boom")
	})
	assert.Equal(t, 2, calls)
	require.Len(t, mm, 2)
	assert.Equal(t, `vector 0 ("pro read"): the guest answered {"status":"internal","detail":"boom"}`, mm[0])
	assert.Empty(t, f.Mismatches(func(e abi.Export, req []byte) []byte {
		for _, v := range sec.Vectors {
			if bytes.Equal(v.Request, req) {
				return v.Response
			}
		}
		return nil
	}))
}

func TestBytesForms(t *testing.T) {
	in := `{"format": "caphost-selftest-v1", "module": "m", "vectors": [
 {"name": "binary", "export": "caphost_codec_decode",
  "request": {"schema": "s", "stored_version": 1, "payload": {"base64": "/wA="}},
  "response": {"status": "ok", "body": {"value": "<p>é & ü</p>"}}}]}`
	f, err := Parse([]byte(in))
	require.NoError(t, err)
	assert.Equal(t, []byte{0xff, 0}, f.Vectors[0].Request.(*abi.CodecDecodeRequest).Payload)
	out, err := f.Marshal()
	require.NoError(t, err)
	assert.Contains(t, string(out), `"payload": {`+"\n"+`          "base64": "/wA="`, "invalid UTF-8 is written as base64")
	assert.Contains(t, string(out), `"value": "<p>é & ü</p>"`, "text stays readable: no HTML escaping")
	back, err := Parse(out)
	require.NoError(t, err)
	assert.Equal(t, f, back)
}

func TestParseRejects(t *testing.T) {
	vec := func(s string) string {
		return `{"format": "caphost-selftest-v1", "module": "m", "vectors": [` + s + `]}`
	}
	ok := `{"name": "n", "export": "caphost_rate_select", "request": {"route": "/", "method": "GET"}, "response": {"status": "ok", "body": {"selections": []}}}`
	cases := map[string]struct{ in, want string }{
		"format":          {`{"format": "v0", "module": "m", "vectors": [` + ok + `]}`, `format is "v0"`},
		"module":          {`{"format": "caphost-selftest-v1", "vectors": [` + ok + `]}`, "module is required"},
		"no vectors":      {vec(""), "0 vectors"},
		"unknown field":   {vec(strings.Replace(ok, `"name"`, `"nmae"`, 1)), `unknown object member name "nmae" within "/vectors/0"`},
		"trailing":        {vec(ok) + "{}", "trailing data"},
		"duplicate":       {vec(ok + "," + ok), `duplicate name "n"`},
		"no name":         {vec(strings.Replace(ok, `"name": "n"`, `"name": ""`, 1)), "name is required"},
		"describe":        {vec(strings.Replace(ok, "caphost_rate_select", "caphost_describe", 1)), "not a callable v1 export"},
		"unknown export":  {vec(strings.Replace(ok, "caphost_rate_select", "rate_select", 1)), "not a callable v1 export"},
		"no request":      {vec(`{"name": "n", "export": "caphost_rate_select"}`), "request is required"},
		"request field":   {vec(strings.Replace(ok, `"route"`, `"path"`, 1)), `unmarshal JSON string into Go vectors.rateSelectRequestJSON: unknown object member name "path"`},
		"wrong request":   {vec(strings.Replace(ok, `"route": "/"`, `"schema": "s"`, 1)), `unknown object member name "schema"`},
		"status":          {vec(strings.Replace(ok, `"status": "ok"`, `"status": "OK"`, 1)), `status "OK" is not a v1 status`},
		"ok without body": {vec(`{"name": "n", "export": "caphost_rate_select", "request": {}, "response": {"status": "ok"}}`), "needs a body"},
		"ok with detail":  {vec(`{"name": "n", "export": "caphost_rate_select", "request": {}, "response": {"status": "ok", "detail": "x", "body": {}}}`), "not a detail"},
		"error with body": {vec(`{"name": "n", "export": "caphost_rate_select", "request": {}, "response": {"status": "corrupt", "body": {}}}`), "has a detail, not a body"},
		"negative":        {vec(`{"name": "n", "export": "caphost_codec_decode", "request": {"stored_version": -1}}`), `unmarshal JSON number -1 into Go uint32 within "/stored_version"`},
		"bytes":           {vec(`{"name": "n", "export": "caphost_codec_encode", "request": {"value": 7}}`), "bytes must be a string or"},
		"base64":          {vec(`{"name": "n", "export": "caphost_codec_encode", "request": {"value": {"base64": "!"}}}`), "base64"},
		"too big":         {strings.Repeat(" ", MaxFileBytes+1), "exceeds"},
		// encoding/json accepts every one of these: it matches names
		// case-insensitively, keeps the last duplicate, turns invalid
		// UTF-8 and lone surrogates into U+FFFD and reads null as zero.
		"upper-case member":   {vec(strings.Replace(ok, `"export"`, `"EXPORT"`, 1)), `"EXPORT"`},
		"upper-case request":  {vec(strings.Replace(ok, `"route"`, `"ROUTE"`, 1)), `"ROUTE"`},
		"duplicate member":    {vec(strings.Replace(ok, `"name": "n"`, `"name": "n", "name": "m"`, 1)), "duplicate"},
		"duplicate request":   {vec(strings.Replace(ok, `"route": "/"`, `"route": "/", "route": "/admin"`, 1)), "duplicate"},
		"invalid utf-8":       {vec(strings.Replace(ok, `"route": "/"`, "\"route\": \"/\xff\"", 1)), "invalid UTF-8"},
		"lone surrogate":      {vec(strings.Replace(ok, `"route": "/"`, `"route": "/\ud800"`, 1)), "surrogate"},
		"null request":        {vec(`{"name": "n", "export": "caphost_rate_select", "request": null}`), "null"},
		"null member":         {vec(strings.Replace(ok, `"route": "/"`, `"route": "/", "attrs": null`, 1)), "null"},
		"null in a byte form": {vec(`{"name": "n", "export": "caphost_codec_encode", "request": {"value": {"base64": null}}}`), "null"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(c.in))
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestSectionRejects(t *testing.T) {
	parse := func(v string) *File {
		f, err := Parse([]byte(`{"format": "caphost-selftest-v1", "module": "m", "vectors": [` + v + `]}`))
		require.NoError(t, err)
		return f
	}
	cases := map[string]struct{ in, want string }{
		"unrecorded":     {`{"name": "n", "export": "caphost_rate_select", "request": {"route": "/", "method": "GET"}}`, "no response recorded"},
		"long detail":    {`{"name": "n", "export": "caphost_rate_select", "request": {}, "response": {"status": "internal", "detail": "` + strings.Repeat("x", abi.MaxDetailBytes+1) + `"}}`, "at most 256 bytes"},
		"request bound":  {`{"name": "n", "export": "caphost_rate_select", "request": {"method": "` + strings.Repeat("M", abi.MaxNameBytes+1) + `"}, "response": {"status": "internal"}}`, "request: abi: malformed message"},
		"response bound": {`{"name": "n", "export": "caphost_cache_canonicalize", "request": {}, "response": {"status": "ok", "body": {"parts": [` + strings.Repeat(`"p",`, abi.MaxKeyParts) + `"p"]}}}`, "response: abi: malformed message"},
	}
	for name, c := range cases {
		_, err := parse(c.in).Section()
		require.ErrorIs(t, err, ErrInvalid, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
}

// FuzzParse: whatever Parse accepts survives Marshal and Parse unchanged,
// and whatever Section accepts reads back through abi's section decoder.
func FuzzParse(f *testing.F) {
	f.Add([]byte(rateVector))
	for _, path := range referenceFiles(f) {
		b, err := os.ReadFile(path)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		out, err := file.Marshal()
		require.NoError(t, err)
		again, err := Parse(out)
		require.NoError(t, err)
		require.Equal(t, file, again)
		sec, err := file.Section()
		if err != nil {
			return
		}
		var back abi.SelfTestVectors
		require.NoError(t, back.Unmarshal(sec.AppendTo(nil)))
		require.Equal(t, sec, &back)
	})
}
