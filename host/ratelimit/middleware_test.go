package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })

func TestWriteOutcomeEveryKind(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	pol := policy.RatePolicy{ID: "p", Revision: "r1"}
	dec := func(allowed bool, src Source) Decision {
		return Decision{Allowed: allowed, Limit: 10, Remaining: 3, RetryAfter: 1500 * time.Millisecond,
			ResetAt: now.Add(2100 * time.Millisecond), Policy: "p", Revision: "r1", Source: src, Certainty: Certain}
	}
	cases := []struct {
		name       string
		o          Outcome
		status     int
		retryAfter string
		headers    bool
	}{
		{"evaluated allow", Outcome{kind: Evaluated, decision: dec(true, SourceGlobalRedis)}, http.StatusTeapot, "", true},
		{"evaluated deny", Outcome{kind: Evaluated, decision: dec(false, SourceGlobalRedis)}, http.StatusTooManyRequests, "2", true},
		{"degraded allow", degraded(pol, dec(true, SourceLocalEmergency), CategoryRedisUnavailable, ReasonRedisUnavailable), http.StatusTeapot, "", true},
		{"degraded deny", degraded(pol, dec(false, SourceLocalEmergency), CategoryRedisUnavailable, ReasonRedisUnavailable), http.StatusTooManyRequests, "2", true},
		{"fail open", degraded(pol, dec(true, SourceFailOpen), CategoryRedisUnavailable, ReasonRedisUnavailable), http.StatusTeapot, "", true},
		{"shadow", Outcome{kind: Evaluated, decision: dec(true, SourceShadow)}, http.StatusTeapot, "", false},
		{"unavailable", unavailable(pol, CategoryRedisUnavailable), http.StatusServiceUnavailable, "1", false},
		{"indeterminate", indeterminate(pol, "e"), http.StatusServiceUnavailable, "1", false},
		{"deny zero retry", Outcome{kind: Evaluated, decision: Decision{Allowed: false, Limit: 10}}, http.StatusTooManyRequests, "1", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeOutcome(w, httptest.NewRequest(http.MethodGet, "/x", nil), okHandler, c.o, now, HeadersLegacy)
			assert.Equal(t, c.status, w.Code)
			assert.Equal(t, c.retryAfter, w.Header().Get("Retry-After"))
			if c.headers {
				assert.Equal(t, "10", w.Header().Get("RateLimit-Limit"))
				assert.NotEmpty(t, w.Header().Get("RateLimit-Remaining"))
				assert.NotEmpty(t, w.Header().Get("RateLimit-Reset"))
			} else {
				assert.Empty(t, w.Header().Get("RateLimit-Limit"))
			}
			assert.LessOrEqual(t, w.Body.Len(), 64)
		})
	}
	w := httptest.NewRecorder()
	writeOutcome(w, httptest.NewRequest(http.MethodGet, "/x", nil), okHandler, cases[1].o, now, HeadersLegacy)
	assert.Equal(t, "3", w.Header().Get("RateLimit-Remaining"))
	assert.Equal(t, "3", w.Header().Get("RateLimit-Reset"), "ceil(2.1s)")
}

func TestMiddlewareAgainstRedis(t *testing.T) {
	s := redistest.StartStandalone(t)
	login := policy.RatePolicyDecl{ID: "login", Revision: "v3", Algorithm: policy.RateTokenBucket,
		Parameters: policy.RateParameters{Capacity: 2, RefillTokens: 2, RefillPeriod: time.Minute},
		Dimensions: []policy.RateDimension{policy.DimClientIP, policy.DimRoute}}
	f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, login)
	sel := NewStaticSelector([]RouteRule{{Route: "/login", Method: "POST", Selections: []Selection{{Policy: "login", Cost: 1}}}})
	ex := &HeaderExtractor{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ClientIPHeaders: []string{"X-Forwarded-For"}}
	h := Middleware(f.l, sel, ex, MiddlewareOptions{})(okHandler)

	do := func(path, remote, xff string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, path, nil)
		r.RemoteAddr = remote
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	secretIP := "203.0.113.77"
	assert.Equal(t, http.StatusTeapot, do("/login", secretIP+":1234", "").Code)
	w := do("/login", "10.1.2.3:555", "198.51.100.1, "+secretIP) // trusted proxy: client is the rightmost untrusted hop
	assert.Equal(t, http.StatusTeapot, w.Code)
	assert.Equal(t, "2", w.Header().Get("RateLimit-Limit"))
	assert.Equal(t, "0", w.Header().Get("RateLimit-Remaining"))
	w = do("/login", secretIP+":1", "")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "30", w.Header().Get("Retry-After"), "one token refills in 30s")
	assert.NotContains(t, w.Body.String(), secretIP)
	// A spoofed header from an untrusted peer is ignored.
	assert.Equal(t, http.StatusTooManyRequests, do("/login", secretIP+":1", "192.0.2.9").Code)
	assert.Equal(t, http.StatusTeapot, do("/login", "192.0.2.9:1", "").Code)
	assert.Equal(t, http.StatusTeapot, do("/other", secretIP+":1", "").Code, "no policy selected")
	assert.Equal(t, http.StatusBadRequest, do("/login", "not-an-ip", "").Code)

	failing := Middleware(f.l, selectorFunc(func(context.Context, Attributes) ([]Selection, error) {
		return nil, errors.New("guest trapped")
	}), ex, MiddlewareOptions{})(okHandler)
	w = httptest.NewRecorder()
	failing.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login", nil))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code, "a selector failure never allows")

	s.Kill()
	w = do("/login", "192.0.2.200:1", "")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code, "fail-closed")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
}

type selectorFunc func(context.Context, Attributes) ([]Selection, error)

func (f selectorFunc) Select(ctx context.Context, a Attributes) ([]Selection, error) {
	return f(ctx, a)
}

func TestHeaderExtractor(t *testing.T) {
	ex := &HeaderExtractor{
		TrustedProxies:  []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		ClientIPHeaders: []string{"X-Forwarded-For"},
		TenantHeader:    "X-Tenant", PrincipalHeader: "X-User", APIKeyHeader: "X-Api-Key", PrincipalTierHeader: "X-Tier",
	}
	r := httptest.NewRequest(http.MethodGet, "/a/b", nil)
	r.RemoteAddr = "[::1]:80"
	r.Header.Add("X-Forwarded-For", "1.1.1.1, 10.0.0.2")
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("X-User", "alice")
	r.Header.Set("X-Tier", "gold")
	a, id, err := ex.Extract(r)
	require.NoError(t, err)
	assert.Equal(t, "1.1.1.1", id.ClientIP)
	assert.Equal(t, Attributes{Route: "/a/b", Method: "GET", PrincipalTier: "gold", ClientIPClass: "public-v4"}, a)
	assert.Equal(t, "acme", id.Tenant)
	assert.Equal(t, "alice", id.Principal)
	assert.NotContains(t, id.String(), "alice")

	r.Header.Set("X-Forwarded-For", "garbage")
	_, _, err = ex.Extract(r)
	require.ErrorIs(t, err, ErrExtract)
	r.Header.Del("X-Forwarded-For")
	r.Header.Set("X-User", strings.Repeat("x", 2000))
	_, _, err = ex.Extract(r)
	require.ErrorIs(t, err, ErrExtract)
}

func TestSubjectForSelection(t *testing.T) {
	pol := policy.RatePolicy{ID: "p", Dimensions: []policy.RateDimension{policy.DimPrincipal, policy.DimRoute}}
	a := Attributes{Route: "/r", PrincipalTier: "gold"}
	sub, err := SubjectFor(pol, Selection{Policy: "p"}, a, Identity{Principal: "alice"})
	require.NoError(t, err)
	assert.Equal(t, Subject{policy.DimPrincipal: []byte("alice"), policy.DimRoute: []byte("/r")}, sub)
	sub, err = SubjectFor(pol, Selection{Policy: "p", Dimensions: map[string]string{"principal": "principal-tier"}}, a, Identity{})
	require.NoError(t, err)
	assert.Equal(t, []byte("gold"), sub[policy.DimPrincipal])
	_, err = SubjectFor(pol, Selection{Policy: "p"}, a, Identity{})
	require.ErrorIs(t, err, ErrNoSource)
	assert.NotContains(t, Subject{policy.DimPrincipal: []byte("alice")}.String(), "alice")
}
