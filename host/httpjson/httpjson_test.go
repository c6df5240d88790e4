package httpjson_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/httpjson"
)

func body(t *testing.T, rec *httptest.ResponseRecorder) httpjson.ErrorBody {
	t.Helper()
	var b httpjson.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b), rec.Body.String())
	return b
}

func TestMount(t *testing.T) {
	ok := func(s string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(s)) })
	}
	mux := http.NewServeMux()
	httpjson.Mount(mux, map[string]http.Handler{
		"POST /v1/x":    ok("post"),
		"PUT /v1/x":     ok("put"),
		"GET /v1/y/{n}": ok("y"),
		"/plain":        ok("plain"),
	})
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/v1/x", "post"}, {"PUT", "/v1/x", "put"}, {"GET", "/v1/y/3", "y"}, {"DELETE", "/plain", "plain"},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		assert.Equal(t, c.want, rec.Body.String(), c.method+" "+c.path)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/x", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, "POST, PUT", rec.Header().Get("Allow"))
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Equal(t, httpjson.CodeMethodNotAllowed, body(t, rec).Code)
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/y/3", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, "GET", rec.Header().Get("Allow"))
}

func TestReadBody(t *testing.T) {
	read := func(ct, b string, declared int64) ([]byte, *httpjson.Error) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(b))
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		if declared >= 0 {
			r.ContentLength = declared
		}
		return httpjson.ReadBody(httptest.NewRecorder(), r, 8)
	}
	b, e := read("application/json; charset=utf-8", `{"a":1}`, -1)
	require.Nil(t, e)
	assert.Equal(t, `{"a":1}`, string(b))
	_, e = read("", `{}`, -1)
	assert.Nil(t, e, "no content type is accepted")
	_, e = read("text/plain", `{}`, -1)
	require.NotNil(t, e)
	assert.Equal(t, http.StatusUnsupportedMediaType, e.Status)
	assert.Equal(t, httpjson.CodeUnsupportedMedia, e.Code())
	_, e = read("", `{}`, 9)
	require.NotNil(t, e, "a declared length over the bound is refused before reading")
	assert.Equal(t, httpjson.CodeTooLarge, e.Code())
	_, e = read("", `{"a":"123456"}`, 0)
	require.NotNil(t, e, "an undeclared length is bounded while reading")
	assert.Equal(t, http.StatusRequestEntityTooLarge, e.Status)
}

func TestDecode(t *testing.T) {
	type doc struct {
		Name string            `json:"name"`
		N    int               `json:"n,omitempty"`
		M    map[string]string `json:"m,omitempty"`
	}
	var d doc
	require.Nil(t, httpjson.Decode([]byte(` {"name":"x\u00ff\ud83d\ude00","n":2,"m":{"a":"\u0000"}} `), 128, &d))
	assert.Equal(t, doc{Name: "xÿ😀", N: 2, M: map[string]string{"a": "\x00"}}, d, "valid escapes, a surrogate pair, NUL")
	for name, c := range map[string]struct{ in, msg string }{
		"unknown member":         {`{"name":"x","secret-key":1}`, "unknown member /secret-key"},
		"case-variant member":    {`{"Name":"x"}`, "unknown member /Name"},
		"duplicate member":       {`{"name":"do-not-echo","name":"do-not-echo"}`, "duplicate member /name"},
		"duplicate map key":      {`{"m":{"a":"do-not-echo","a":"do-not-echo"}}`, "duplicate member /m/a"},
		"invalid UTF-8":          {"{\"name\":\"mk-\xff\"}", "malformed JSON at byte"},
		"invalid UTF-8 in a key": {"{\"m\":{\"k\xfe\":\"v\"}}", "malformed JSON at byte"},
		"encoded surrogate":      {"{\"name\":\"mk-\xed\xa0\x80\"}", "malformed JSON at byte"},
		"lone surrogate":         {`{"name":"mk-\ud800"}`, "malformed JSON at byte"},
		"lone low surrogate":     {`{"name":"mk-\udfff-do-not-echo"}`, "malformed JSON at byte"},
		"null body":              {`null`, "must be a JSON object"},
		"null member":            {`{"name":null}`, "null (omit the member instead) at /name"},
		"null in a map":          {`{"m":{"a":null}}`, "null (omit the member instead) at /m/a"},
		"trailing data":          {`{"name":"x"} {}`, "trailing data"},
		"trailing garbage":       {`{"name":"x"}]`, "trailing data"},
		"wrong type":             {`{"name":"do-not-echo","n":"do-not-echo"}`, "must be an integer in range: /n"},
		"fraction":               {`{"n":1.5}`, "must be an integer in range: /n"},
		"syntax":                 {`{"name":`, "truncated"},
		"empty":                  {``, "empty"},
		"blank":                  {` `, "empty"},
		"not an object":          {`["do-not-echo"]`, "must be a JSON object"},
	} {
		var d doc
		e := httpjson.Decode([]byte(c.in), 128, &d)
		require.NotNil(t, e, name)
		assert.Equal(t, http.StatusBadRequest, e.Status, name)
		assert.Equal(t, httpjson.CodeBadRequest, e.Code(), name)
		assert.Contains(t, e.Body.Message, c.msg, name)
		assert.NotContains(t, e.Body.Message, "do-not-echo", name)
		assert.NotContains(t, e.Body.Message, "mk-", name)
	}
	e := httpjson.Decode([]byte(`{"name":"0123456789"}`), 8, &d)
	require.NotNil(t, e)
	assert.Equal(t, httpjson.CodeTooLarge, e.Code())
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	e := httpjson.FieldError("cost", "must be >= 1")
	e.RetryAfter = 1500 * time.Millisecond
	httpjson.WriteError(rec, e)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Equal(t, "2", rec.Header().Get("Retry-After"), "rounded up to whole seconds")
	assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
	assert.Equal(t, httpjson.ErrorBody{Code: httpjson.CodeInvalidField, Message: "must be >= 1", Field: "cost"}, body(t, rec))
	assert.Equal(t, "invalid-field: must be >= 1", e.Error())

	rec = httptest.NewRecorder()
	httpjson.WriteError(rec, httpjson.NewError(http.StatusUnauthorized, "unauthorized", "token"))
	assert.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer")
	assert.Empty(t, rec.Header().Get("Retry-After"))
}

func TestSanitize(t *testing.T) {
	assert.Equal(t, "a?b?", httpjson.Sanitize("a\nb\x1b[31m", 4))
	assert.Equal(t, "??", httpjson.Sanitize("é", 10), "non-ASCII bytes are replaced one by one")
}

// FuzzDecode: the strict decoder never panics, every refusal is a coded
// 400/413, and what it accepts is one valid JSON object (UTF-8, no
// duplicate names) whose strings survive a round trip unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"name":"x","m":{"a":"b"}}`, `null`, `{"name":"\ud800"}`, "{\"name\":\"\xff\"}",
		`{"m":{"a":"1","a":"2"}}`, `{"Name":"x"}`, `{"name":"x"} {}`, `{"n":null}`, `{}`} {
		f.Add([]byte(s))
	}
	type doc struct {
		Name string            `json:"name"`
		N    int64             `json:"n"`
		M    map[string]string `json:"m,omitempty"`
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var d doc
		if e := httpjson.Decode(in, 1<<10, &d); e != nil {
			if e.Code() == "" || (e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge) {
				t.Fatalf("uncoded refusal: %+v", e)
			}
			return
		}
		if !utf8.Valid(in) || !jsontext.Value(in).IsValid() {
			t.Fatalf("accepted an invalid object: %q", in)
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back doc
		if e := httpjson.Decode(out, 1<<12, &back); e != nil || back.Name != d.Name || len(back.M) != len(d.M) {
			t.Fatalf("round trip changed %q: %v", in, e)
		}
	})
}
