package cache

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

type sidecarClient struct {
	t   *testing.T
	url string
}

func newSidecarClient(t *testing.T, c *Cache) *sidecarClient {
	t.Helper()
	mux := http.NewServeMux()
	httpjson.Mount(mux, NewSidecar(c, SidecarOptions{}).Routes())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &sidecarClient{t: t, url: srv.URL}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) code() string {
	var e httpjson.ErrorBody
	_ = json.Unmarshal(a.body, &e)
	return string(e.Code)
}

func (a answer) outcome() string {
	var o struct{ Outcome string }
	_ = json.Unmarshal(a.body, &o)
	return o.Outcome
}

func (s *sidecarClient) do(method, path string, body []byte, headers map[string]string) answer {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	require.NoError(s.t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// TestSidecarRoundTrip: PUT stores raw bytes with a source revision, GET
// answers them with the cache status in headers, DELETE invalidates, and a
// region DELETE bumps every generation.
func TestSidecarRoundTrip(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), newClock(), nil)
	s := newSidecarClient(t, in.c)

	a := s.do("GET", "/v1/cache/items/sku-42", nil, nil)
	assert.Equal(t, http.StatusNotFound, a.status)
	assert.Equal(t, "miss; reason=absent", a.header.Get(HeaderStatus))

	a = s.do("PUT", "/v1/cache/items/sku-42", []byte("\x00binary\xff"), map[string]string{HeaderRevision: "12"})
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	assert.Equal(t, "RECORDED", a.outcome())
	a = s.do("GET", "/v1/cache/items/sku-42", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	assert.Equal(t, []byte("\x00binary\xff"), a.body)
	assert.Equal(t, "fresh", a.header.Get(HeaderStatus))
	assert.Equal(t, "12", a.header.Get(HeaderRevision))
	assert.NotEmpty(t, a.header.Get(HeaderExpires))

	a = s.do("PUT", "/v1/cache/items/sku-42", []byte("older"), map[string]string{HeaderRevision: "11", HeaderIntent: "only-if-source-revision-newer"})
	assert.Equal(t, "NOT_RECORDED_CONDITION", a.outcome())

	a = s.do("PUT", "/v1/cache/items/gone", nil, map[string]string{HeaderAbsent: "true"})
	assert.Equal(t, "RECORDED", a.outcome())
	a = s.do("GET", "/v1/cache/items/gone", nil, nil)
	assert.Equal(t, http.StatusNotFound, a.status)
	assert.Equal(t, "negative", a.header.Get(HeaderStatus))

	a = s.do("DELETE", "/v1/cache/items/sku-42", nil, nil)
	assert.Equal(t, "INVALIDATED", a.outcome())
	a = s.do("GET", "/v1/cache/items/sku-42", nil, nil)
	assert.Equal(t, "miss; reason=invalidated", a.header.Get(HeaderStatus))

	s.do("PUT", "/v1/cache/items/k2", []byte("v"), nil)
	a = s.do("DELETE", "/v1/cache/items", nil, nil)
	assert.Equal(t, "INVALIDATED", a.outcome())
	a = s.do("GET", "/v1/cache/items/k2", nil, nil)
	// This host moved the generations itself, so its view is current: the
	// new generation simply holds nothing.
	assert.Equal(t, "miss; reason=absent", a.header.Get(HeaderStatus))
}

// TestSidecarRefreshTokens: of many callers that miss one key together,
// exactly one is granted the refresh lease; it records with its token;
// the others get a contended miss or, with a wait, the value.
func TestSidecarRefreshTokens(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, func(_ *policy.CacheRegionDecl, o *policy.CacheOps) {
		o.LeaseTTL, o.LeaseWait = 5*time.Second, 5*time.Second
	}), newClock(), nil)
	s := newSidecarClient(t, in.c)

	claim := map[string]string{HeaderRefresh: "claim"}
	const n = 8
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = s.do("GET", "/v1/cache/items/hot", nil, claim) }()
	}
	wg.Wait()
	var tokens []string
	for _, a := range answers {
		assert.Equal(t, http.StatusNotFound, a.status)
		switch a.header.Get(HeaderRefresh) {
		case "granted":
			tokens = append(tokens, a.header.Get(HeaderRefreshToken))
		default:
			assert.Equal(t, "contended", a.header.Get(HeaderRefresh))
		}
	}
	require.Len(t, tokens, 1, "exactly one caller loads")

	// A contended caller that waits gets the holder's value.
	got := make(chan answer, 1)
	go func() {
		got <- s.do("GET", "/v1/cache/items/hot", nil, map[string]string{HeaderRefresh: "claim", HeaderWait: "5s"})
	}()
	require.Eventually(t, func() bool {
		return metric(t, in.reg, "caphost_cache_refresh_leases_total", map[string]string{"region": "items", "result": "contended"}) >= n
	}, 10*time.Second, time.Millisecond)
	a := s.do("PUT", "/v1/cache/items/hot", []byte("loaded"), map[string]string{HeaderRefreshToken: tokens[0]})
	require.Equal(t, "RECORDED", a.outcome(), string(a.body))
	w := <-got
	assert.Equal(t, http.StatusOK, w.status)
	assert.Equal(t, []byte("loaded"), w.body)

	// A token is for its key only, and forged tokens are refused.
	a = s.do("PUT", "/v1/cache/items/other", []byte("x"), map[string]string{HeaderRefreshToken: tokens[0]})
	assert.Equal(t, string(CodeInvalidToken), a.code())
	forged := []byte(tokens[0])
	forged[10] ^= 1
	a = s.do("PUT", "/v1/cache/items/hot", []byte("x"), map[string]string{HeaderRefreshToken: string(forged)})
	assert.Equal(t, string(CodeInvalidToken), a.code())
}

// TestSidecarRefusesHostileInput: bad keys, attributes, headers and bodies
// are 400s with stable codes that never echo the input.
func TestSidecarRefusesHostileInput(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), newClock(), nil)
	s := newSidecarClient(t, in.c)
	for name, tc := range map[string]struct {
		method, path string
		body         []byte
		headers      map[string]string
		status       int
		code         string
	}{
		"unknown region":    {"GET", "/v1/cache/nope/k", nil, nil, 404, string(CodeUnknownRegion)},
		"invalid utf-8 key": {"GET", "/v1/cache/items/%FF%FE", nil, nil, 400, string(CodeInvalidKey)},
		"attributes on a region without a canonicaliser": {"GET", "/v1/cache/items/k?locale=de", nil, nil, 400, string(CodeInvalidKey)},
		"key too long":       {"GET", "/v1/cache/items/" + strings.Repeat("k", MaxKeyPartBytes+1), nil, nil, 400, string(CodeInvalidKey)},
		"bad revision":       {"PUT", "/v1/cache/items/k", []byte("v"), map[string]string{HeaderRevision: "-1"}, 400, string(httpjson.CodeInvalidField)},
		"revision padded":    {"PUT", "/v1/cache/items/k", []byte("v"), map[string]string{HeaderRevision: "007"}, 400, string(httpjson.CodeInvalidField)},
		"newer without rev":  {"PUT", "/v1/cache/items/k", []byte("v"), map[string]string{HeaderIntent: "only-if-source-revision-newer"}, 400, string(httpjson.CodeInvalidField)},
		"unknown intent":     {"PUT", "/v1/cache/items/k", []byte("v"), map[string]string{HeaderIntent: "overwrite"}, 400, string(httpjson.CodeInvalidField)},
		"absent with body":   {"PUT", "/v1/cache/items/k", []byte("v"), map[string]string{HeaderAbsent: "true"}, 400, string(httpjson.CodeInvalidField)},
		"value too large":    {"PUT", "/v1/cache/items/k", make([]byte, 64<<10+1), nil, 413, string(httpjson.CodeTooLarge)},
		"bad deadline":       {"GET", "/v1/cache/items/k", nil, map[string]string{HeaderDeadline: "0"}, 400, string(httpjson.CodeInvalidField)},
		"bad wait":           {"GET", "/v1/cache/items/k", nil, map[string]string{HeaderRefresh: "claim", HeaderWait: "1h"}, 400, string(httpjson.CodeInvalidField)},
		"bad refresh header": {"GET", "/v1/cache/items/k", nil, map[string]string{HeaderRefresh: "yes"}, 400, string(httpjson.CodeInvalidField)},
		"garbage token":      {"PUT", "/v1/cache/items/k", []byte("v"), map[string]string{HeaderRefreshToken: "!!"}, 400, string(CodeInvalidToken)},
	} {
		a := s.do(tc.method, tc.path, tc.body, tc.headers)
		assert.Equal(t, tc.status, a.status, "%s: %s", name, a.body)
		assert.Equal(t, tc.code, a.code(), name)
		assert.NotContains(t, string(a.body), "\xff", name)
	}
}

// TestSidecarPaths: the sidecar routes below /v1/cache/ on the escaped
// path: the region and the key are one segment each, decoded exactly once
// (so "..", "." and "/" are keys like any other when encoded), every other
// shape is a JSON 404 and every other method a JSON 405 with Allow.
// (Literal dot segments and empty segments never reach it behind
// `caphost serve`: host/httpapi answers them 400 bad-path.)
func TestSidecarPaths(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), newClock(), nil)
	s := newSidecarClient(t, in.c)

	for key, enc := range map[string]string{"..": "%2E%2E", ".": "%2E", "/": "%2F", "a/b": "a%2Fb", "a%2F": "a%252F"} {
		a := s.do("PUT", "/v1/cache/items/"+enc, []byte(key), nil)
		require.Equal(t, http.StatusOK, a.status, "%s: %s", key, a.body)
		a = s.do("GET", "/v1/cache/items/"+enc, nil, nil)
		require.Equal(t, http.StatusOK, a.status, key)
		assert.Equal(t, key, string(a.body), "decoded once: %q", key)
		lk, err := in.region(t, "items").Lookup(context.Background(), Parts(key))
		require.NoError(t, err)
		assert.Equal(t, Hit, lk.Kind, "the path key %s is the part %q", enc, key)
	}
	a := s.do("DELETE", "/v1/cache/items/%2e%2e", nil, nil)
	assert.Equal(t, "INVALIDATED", a.outcome(), "%2e%2e and %2E%2E are one key")

	for name, tc := range map[string]struct {
		method, path string
		status       int
		code, allow  string
	}{
		"root":                    {"GET", "/v1/cache", 404, string(httpjson.CodeNotFound), ""},
		"empty region":            {"DELETE", "/v1/cache/", 404, string(httpjson.CodeNotFound), ""},
		"empty key":               {"GET", "/v1/cache/items/", 404, string(httpjson.CodeNotFound), ""},
		"third segment":           {"GET", "/v1/cache/items/a/b", 404, string(httpjson.CodeNotFound), ""},
		"unknown region":          {"DELETE", "/v1/cache/%2E%2E", 404, string(CodeUnknownRegion), ""},
		"invalid UTF-8 key":       {"PUT", "/v1/cache/items/%FF", 400, string(CodeInvalidKey), ""},
		"over-long key":           {"DELETE", "/v1/cache/items/" + strings.Repeat("%2E", MaxKeyPartBytes+1), 400, string(CodeInvalidKey), ""},
		"query on a region":       {"DELETE", "/v1/cache/items?x=1", 400, string(httpjson.CodeBadRequest), ""},
		"wrong method (key)":      {"POST", "/v1/cache/items/k", 405, string(httpjson.CodeMethodNotAllowed), allowKey},
		"wrong method (region)":   {"GET", "/v1/cache/items", 405, string(httpjson.CodeMethodNotAllowed), allowRegion},
		"wrong method, dot key":   {"PATCH", "/v1/cache/items/%2E%2E", 405, string(httpjson.CodeMethodNotAllowed), allowKey},
		"wrong method, no region": {"POST", "/v1/cache/nope", 405, string(httpjson.CodeMethodNotAllowed), allowRegion},
	} {
		a := s.do(tc.method, tc.path, nil, nil)
		assert.Equal(t, tc.status, a.status, "%s: %s", name, a.body)
		assert.Equal(t, tc.code, a.code(), name)
		assert.Equal(t, tc.allow, a.header.Get("Allow"), name)
		assert.Equal(t, "application/json", a.header.Get("Content-Type"), name)
	}
	a = s.do("HEAD", "/v1/cache/items/%2F", nil, nil)
	assert.Equal(t, http.StatusOK, a.status, "HEAD is GET without the body")
	assert.Equal(t, "fresh", a.header.Get(HeaderStatus))
}

// TestSidecarSplitPath: the path parser alone.
func TestSidecarSplitPath(t *testing.T) {
	for in, want := range map[string][3]string{
		"/v1/cache/items":          {"items", "", "region"},
		"/v1/cache/items/k":        {"items", "k", "key"},
		"/v1/cache/it%65ms/%2E%2E": {"items", "..", "key"},
		"/v1/cache/items/%2F":      {"items", "/", "key"},
		"/v1/cache/items/%252F":    {"items", "%2F", "key"},
		"/v1/cache/items/a+b":      {"items", "a+b", "key"},
		"/v1/cache/%FF/%00":        {"\xff", "\x00", "key"},
		"/v1/cache":                {"", "", ""},
		"/v1/cache/":               {"", "", ""},
		"/v1/cache/items/":         {"", "", ""},
		"/v1/cache//k":             {"", "", ""},
		"/v1/cache/items/..":       {"", "", ""},
		"/v1/cache/./k":            {"", "", ""},
		"/v1/cache/items/a/b":      {"", "", ""},
		"/v1/cachex/items/k":       {"", "", ""},
		"/v1/cache/items/%ZZ":      {"", "", ""},
		"/other/v1/cache/items/k":  {"", "", ""},
	} {
		region, key, hasKey, ok := splitPath(in)
		shape := ""
		switch {
		case ok && hasKey:
			shape = "key"
		case ok:
			shape = "region"
		}
		assert.Equal(t, want, [3]string{region, key, shape}, in)
	}
}
