package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/host/httpjson"
)

// cacheConfig: one bytes region "items" (1 KiB values, a refresh-lease
// wait of 50ms so a contended claim never holds a fuzz iteration long; a
// load timeout no longer than the lease, as config requires).
const cacheConfig = `capabilities:
  cache:
    provider: redis
    redis-role: cache
    hints: {hmac: "secret://env/HTTPAPI_CACHE_HINT_KEY"}
    defaults: {refresh-lease: {ttl: 1s, wait: 50ms, poll: 10ms}, single-flight: {load-timeout: 1s}}
    regions:
      items:
        ttl: {soft: 30s, hard: 5m, negative: 10s}
        max-bytes: 1024
`

// startCacheHost returns the daemon handler over a real host with the
// cache capability against a private redis-server.
func startCacheHost(tb testing.TB) http.Handler {
	tb.Helper()
	return httpapi.New(startHostWith(tb, "cache", false, cacheConfig), httpapi.Options{})
}

// rawRequest parses a request as the server would from the wire (so the
// URL keeps its escaped form); ok is false when net/http itself would
// refuse it before any handler runs.
func rawRequest(method, target, headers string, body []byte) (*http.Request, bool) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: caphost\r\n", method, target)
	lower := strings.ToLower(headers)
	for line := range strings.SplitSeq(headers, "\n") {
		if line = strings.TrimRight(line, "\r"); line != "" {
			b.WriteString(line + "\r\n")
		}
	}
	if !strings.Contains(lower, "content-length") && !strings.Contains(lower, "transfer-encoding") {
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(body)
	r, err := http.ReadRequest(bufio.NewReader(&b))
	if err != nil {
		return nil, false
	}
	r.RemoteAddr = "127.0.0.1:1"
	return r, true
}

// served is one answer of the daemon handler.
type served struct {
	status int
	header http.Header
	body   []byte
}

func (s served) code() string {
	var e httpjson.ErrorBody
	_ = json.Unmarshal(s.body, &e)
	return string(e.Code)
}

func serve(h http.Handler, r *http.Request) served {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return served{status: rec.Code, header: rec.Result().Header, body: rec.Body.Bytes()}
}

// outcomes are the documented bodies of a successful PUT or DELETE.
var outcomes = map[string]bool{
	"RECORDED": true, "NOT_RECORDED_CONDITION": true, "NOT_RECORDED_PROVIDER_POLICY": true,
	"DEGRADED_UNAVAILABLE": true, "INDETERMINATE": true, "INVALIDATED": true, "ALREADY_ABSENT": true,
}

// typed reports how a's answer to r breaks the API's promise, or "": a
// documented success, a typed miss (404, empty body, a cache status), or a
// JSON error with a code; never a redirect, never a 5xx but 503.
func typed(r *http.Request, a served) string {
	cachePath := strings.HasPrefix(r.URL.EscapedPath(), "/v1/cache/")
	switch {
	case a.status >= 300 && a.status < 400:
		return "a redirect"
	case a.status >= 500 && a.status != http.StatusServiceUnavailable:
		return "a 5xx other than 503"
	case a.status >= 200 && a.status < 300 && !cachePath:
		return "" // /livez, /readyz, /metrics: their own bodies
	case a.status >= 200 && a.status < 300 && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		if st := a.header.Get(cache.HeaderStatus); st != "fresh" && st != "stale" {
			return "a hit without a fresh or stale status"
		}
		if a.header.Get("Content-Type") != "application/octet-stream" {
			return "a hit that is not application/octet-stream"
		}
		return ""
	case a.status == http.StatusOK:
		var o struct {
			Outcome string `json:"outcome"`
		}
		if json.Unmarshal(a.body, &o) != nil || !outcomes[o.Outcome] {
			return "a success without a documented outcome"
		}
		return ""
	case a.status >= 200 && a.status < 300:
		return "an undocumented success status"
	case a.status == http.StatusNotFound && len(a.body) == 0:
		st := a.header.Get(cache.HeaderStatus)
		if !cachePath || (st != "negative" && !strings.HasPrefix(st, "miss; reason=")) {
			return "a 404 with neither a body nor a cache status"
		}
		return ""
	}
	if a.header.Get("Content-Type") != "application/json" {
		return "an error that is not application/json"
	}
	var e httpjson.ErrorBody
	if err := json.Unmarshal(a.body, &e); err != nil || e.Code == "" {
		return "an error without a JSON code"
	}
	if a.status == http.StatusMethodNotAllowed && a.header.Get("Allow") == "" {
		return "a 405 without Allow"
	}
	return ""
}

// TestCachePaths: every path shape of the cache API, through the daemon
// handler over a real host and Redis, gets its typed answer; keys travel in
// one segment and are decoded once.
func TestCachePaths(t *testing.T) {
	h := startCacheHost(t)
	do := func(method, target string, body []byte, headers string) served {
		t.Helper()
		r, ok := rawRequest(method, target, headers, body)
		require.True(t, ok, target)
		a := serve(h, r)
		assert.Empty(t, typed(r, a), "%s %s: %d %s", method, target, a.status, a.body)
		return a
	}
	// Keys that ServeMux wildcards cannot carry round-trip once encoded.
	for key, enc := range map[string]string{"..": "%2E%2E", ".": "%2e", "/": "%2F", "a/b": "a%2Fb", "a%2F": "a%252F", "sp ace": "sp%20ace", "é": "%C3%A9"} {
		a := do("PUT", "/v1/cache/items/"+enc, []byte("v:"+key), "")
		require.Equal(t, http.StatusOK, a.status, "%s: %s", key, a.body)
		a = do("GET", "/v1/cache/items/"+enc, nil, "")
		require.Equal(t, http.StatusOK, a.status, key)
		assert.Equal(t, "v:"+key, string(a.body), "decoded exactly once: %q", key)
	}
	a := do("GET", "/v1/cache/items/%2E", nil, "")
	assert.Equal(t, "v:.", string(a.body), "%2E and %2e are one key")
	a = do("GET", "/v1/cache/items/a%2F", nil, "")
	assert.Equal(t, http.StatusNotFound, a.status, "a%2F is the key a/, not a%2F")
	assert.Equal(t, "miss; reason=absent", a.header.Get(cache.HeaderStatus))
	assert.Empty(t, a.body)

	long := strings.Repeat("k", cache.MaxKeyPartBytes)
	a = do("PUT", "/v1/cache/items/"+long, []byte("v"), "")
	assert.Equal(t, http.StatusOK, a.status, "a key of exactly MaxKeyPartBytes")
	a = do("HEAD", "/v1/cache/items/"+long, nil, "")
	assert.Equal(t, http.StatusOK, a.status)

	for name, c := range map[string]struct {
		method, target, headers string
		status                  int
		code                    string
		allow                   string
	}{
		"dot-dot segment":          {"GET", "/v1/cache/items/..", "", 400, string(httpapi.CodeBadPath), ""},
		"dot segment":              {"PUT", "/v1/cache/items/.", "", 400, string(httpapi.CodeBadPath), ""},
		"dot-dot region":           {"DELETE", "/v1/cache/../k", "", 400, string(httpapi.CodeBadPath), ""},
		"empty key":                {"GET", "/v1/cache/items/", "", 400, string(httpapi.CodeBadPath), ""},
		"double slash":             {"GET", "/v1/cache//items/k", "", 400, string(httpapi.CodeBadPath), ""},
		"double slash in key":      {"GET", "/v1/cache/items//k", "", 400, string(httpapi.CodeBadPath), ""},
		"leading double slash":     {"GET", "//v1/cache/items/k", "", 400, string(httpapi.CodeBadPath), ""},
		"trailing slash":           {"GET", "/v1/cache/items/k/", "", 400, string(httpapi.CodeBadPath), ""},
		"trailing slash (region)":  {"DELETE", "/v1/cache/items/", "", 400, string(httpapi.CodeBadPath), ""},
		"trailing slash (root)":    {"GET", "/v1/cache/", "", 400, string(httpapi.CodeBadPath), ""},
		"trailing slash (ops)":     {"GET", "/livez/", "", 400, string(httpapi.CodeBadPath), ""},
		"asterisk":                 {"GET", "*", "", 400, string(httpapi.CodeBadPath), ""},
		"root":                     {"GET", "/v1/cache", "", 404, string(httpjson.CodeNotFound), ""},
		"third segment":            {"GET", "/v1/cache/items/a/b", "", 404, string(httpjson.CodeNotFound), ""},
		"unknown region":           {"GET", "/v1/cache/nope/k", "", 404, string(cache.CodeUnknownRegion), ""},
		"encoded dot-dot region":   {"GET", "/v1/cache/%2E%2E/k", "", 404, string(cache.CodeUnknownRegion), ""},
		"invalid UTF-8 region":     {"DELETE", "/v1/cache/%FF", "", 404, string(cache.CodeUnknownRegion), ""},
		"invalid UTF-8 key":        {"GET", "/v1/cache/items/%FF", "", 400, string(cache.CodeInvalidKey), ""},
		"over-long key":            {"GET", "/v1/cache/items/" + long + "k", "", 400, string(cache.CodeInvalidKey), ""},
		"NUL key is data":          {"DELETE", "/v1/cache/items/%00", "", 200, "", ""},
		"query on a plain region":  {"GET", "/v1/cache/items/k?locale=de", "", 400, string(cache.CodeInvalidKey), ""},
		"malformed query":          {"GET", "/v1/cache/items/k?a=%ZZ", "", 400, string(cache.CodeInvalidKey), ""},
		"query on a region delete": {"DELETE", "/v1/cache/items?all=1", "", 400, string(httpjson.CodeBadRequest), ""},
		"POST on a key":            {"POST", "/v1/cache/items/k", "", 405, string(httpjson.CodeMethodNotAllowed), "GET, HEAD, PUT, DELETE"},
		"PATCH on a key":           {"PATCH", "/v1/cache/items/%2E%2E", "", 405, string(httpjson.CodeMethodNotAllowed), "GET, HEAD, PUT, DELETE"},
		"OPTIONS on a key":         {"OPTIONS", "/v1/cache/items/k", "", 405, string(httpjson.CodeMethodNotAllowed), "GET, HEAD, PUT, DELETE"},
		"CONNECT on a key":         {"CONNECT", "/v1/cache/items/k", "", 405, string(httpjson.CodeMethodNotAllowed), "GET, HEAD, PUT, DELETE"},
		"GET on a region":          {"GET", "/v1/cache/items", "", 405, string(httpjson.CodeMethodNotAllowed), "DELETE"},
		"PUT on a region":          {"PUT", "/v1/cache/items", "", 405, string(httpjson.CodeMethodNotAllowed), "DELETE"},
		"POST on livez":            {"POST", "/livez", "", 405, string(httpjson.CodeMethodNotAllowed), "GET, HEAD"},
		"bad deadline":             {"GET", "/v1/cache/items/k", "Caphost-Deadline-Ms: 10001", 400, string(httpjson.CodeInvalidField), ""},
		"bad wait":                 {"GET", "/v1/cache/items/k", "Caphost-Refresh: claim\nCaphost-Wait: -1s", 400, string(httpjson.CodeInvalidField), ""},
		"bad refresh":              {"GET", "/v1/cache/items/k", "Caphost-Refresh: Claim", 400, string(httpjson.CodeInvalidField), ""},
	} {
		a := do(c.method, c.target, nil, c.headers)
		assert.Equal(t, c.status, a.status, "%s: %s", name, a.body)
		if c.code != "" {
			assert.Equal(t, c.code, a.code(), name)
		}
		assert.Equal(t, c.allow, a.header.Get("Allow"), name)
		assert.NotContains(t, string(a.body), "nope", name, "no path bytes are echoed")
	}
}

// TestCanonical: the paths New routes are exactly those ServeMux would not
// clean.
func TestCanonical(t *testing.T) {
	for _, p := range []string{"/", "/livez", "/v1/cache/items/%2E%2E", "/v1/cache/items/%2F", "/a/.b/c..", "/%2e"} {
		assert.True(t, httpapi.Canonical(p), p)
	}
	for _, p := range []string{"", "*", "livez", "//", "/a//b", "/a/", "/.", "/..", "/a/./b", "/a/../b", "/a/.."} {
		assert.False(t, httpapi.Canonical(p), p)
	}
}

// FuzzSidecarRequest: any method, target, headers and body, through the
// daemon handler over a real host with the cache capability and a private
// redis-server, gets a typed answer (see typed): the routing and decoding
// of the cache API, its method, query and header checks, and the cache
// behind them.
func FuzzSidecarRequest(f *testing.F) {
	for _, s := range []struct {
		method, target, headers string
		body                    []byte
	}{
		{"GET", "/v1/cache/items/k", "", nil},
		{"PUT", "/v1/cache/items/k", "Caphost-Source-Revision: 7", []byte("v")},
		{"PUT", "/v1/cache/items/%2E%2E", "Caphost-Record-Intent: only-if-source-revision-newer\nCaphost-Source-Revision: 1", []byte("v")},
		{"PUT", "/v1/cache/items/gone", "Caphost-Authoritative-Absent: true", nil},
		{"GET", "/v1/cache/items/gone", "", nil},
		{"GET", "/v1/cache/items/k", "Caphost-Refresh: claim\nCaphost-Wait: 20ms", nil},
		{"PUT", "/v1/cache/items/k", "Caphost-Refresh-Token: AAAA", []byte("v")},
		{"DELETE", "/v1/cache/items/%2F", "", nil},
		{"DELETE", "/v1/cache/items", "", nil},
		{"GET", "/v1/cache/items/..", "", nil},
		{"GET", "/v1/cache/items//k", "", nil},
		{"GET", "/v1/cache/items/", "", nil},
		{"GET", "/v1/cache/items/%FF", "", nil},
		{"HEAD", "/v1/cache/items/k", "", nil},
		{"POST", "/v1/cache/items/k", "", nil},
		{"GET", "/v1/cache/nope/k?x=1", "Caphost-Deadline-Ms: 5", nil},
		{"PUT", "/v1/cache/items/big", "", bytes.Repeat([]byte("x"), 1025)},
		{"PUT", "/v1/cache/items/k", "Transfer-Encoding: chunked", []byte("1\r\nv\r\n0\r\n\r\n")},
		{"GET", "http://h/v1/cache/items/a%2Fb", "", nil},
		{"CONNECT", "/v1/cache/items/k", "", nil},
		{"GET", "/livez", "", nil},
	} {
		f.Add(s.method, s.target, s.headers, s.body)
	}
	h := startCacheHost(f)
	f.Fuzz(func(t *testing.T, method, target, headers string, body []byte) {
		r, ok := rawRequest(method, target, headers, body)
		if !ok {
			return // net/http answers it before any handler runs
		}
		a := serve(h, r)
		if why := typed(r, a); why != "" {
			t.Fatalf("%s %q: %s: %d %v %q", method, target, why, a.status, a.header, a.body)
		}
		_, _ = io.Copy(io.Discard, r.Body)
	})
}

// subtreeBackend is a backend whose one capability route is a subtree.
type subtreeBackend struct{ fakeBackend }

func (*subtreeBackend) CapabilityRoutes() map[string]http.Handler {
	return map[string]http.Handler{"/v1/tree/": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpjson.WriteJSON(w, http.StatusOK, map[string]string{"ok": "tree"})
	})}
}

// TestNoRedirects: ServeMux would redirect /v1/tree to a subtree route
// /v1/tree/ and clean /v1/tree/./x into a redirect; New answers both with
// JSON instead, and still serves the subtree (and /livez, whose
// trailing-slash and dot variants are bad paths too).
func TestNoRedirects(t *testing.T) {
	h := httpapi.New(&subtreeBackend{}, httpapi.Options{})
	for target, want := range map[string]int{
		"/v1/tree":        http.StatusNotFound,
		"/v1/tree/x":      http.StatusOK,
		"/v1/tree/%2E%2E": http.StatusOK,
		"/v1/tree/./x":    http.StatusBadRequest,
		"/v1/tree/x/":     http.StatusBadRequest,
		"/livez/..":       http.StatusBadRequest,
		"/nowhere":        http.StatusNotFound,
	} {
		r, ok := rawRequest(http.MethodGet, target, "", nil)
		require.True(t, ok, target)
		a := serve(h, r)
		assert.Equal(t, want, a.status, "%s: %s", target, a.body)
		assert.Equal(t, "application/json", a.header.Get("Content-Type"), target)
	}
}
