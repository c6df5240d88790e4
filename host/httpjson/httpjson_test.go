package httpjson_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
		Name string `json:"name"`
		N    int    `json:"n,omitempty"`
	}
	var d doc
	require.Nil(t, httpjson.Decode([]byte(`{"name":"x","n":2}`), 64, &d))
	assert.Equal(t, doc{Name: "x", N: 2}, d)
	for name, in := range map[string]string{
		"unknown member": `{"name":"x","secret-key":1}`,
		"trailing data":  `{"name":"x"} {}`,
		"wrong type":     `{"name":"do-not-echo","n":"do-not-echo"}`,
		"syntax":         `{"name":`,
		"empty":          ``,
		"not an object":  `["do-not-echo"]`,
	} {
		var d doc
		e := httpjson.Decode([]byte(in), 64, &d)
		require.NotNil(t, e, name)
		assert.Equal(t, http.StatusBadRequest, e.Status, name)
		assert.Equal(t, httpjson.CodeBadRequest, e.Code(), name)
		assert.NotContains(t, e.Body.Message, "do-not-echo", name)
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
