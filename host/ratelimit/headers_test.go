package ratelimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// sfMember is one parsed member of a draft field: the policy name and its
// integer parameters.
type sfMember struct {
	name   string
	params map[string]int64
}

// parseField parses a RateLimit or RateLimit-Policy field as an RFC 9651
// List whose members are Strings with Integer parameters (the draft's
// shape); absent → nil.
func parseField(t *testing.T, h http.Header, name string) []sfMember {
	t.Helper()
	vals := h.Values(name)
	if len(vals) == 0 {
		return nil
	}
	l, err := httpsfv.UnmarshalList(vals)
	require.NoError(t, err, "%s: %q", name, vals)
	out := make([]sfMember, 0, len(l))
	for _, m := range l {
		it, ok := m.(httpsfv.Item)
		require.True(t, ok, "%s: a member is an Item, not an inner list", name)
		s, ok := it.Value.(string)
		require.True(t, ok, "%s: the policy identifier is a String", name)
		p := map[string]int64{}
		for _, k := range it.Params.Names() {
			v, _ := it.Params.Get(k)
			n, ok := v.(int64)
			require.True(t, ok, "%s: parameter %s is an Integer", name, k)
			p[k] = n
		}
		out = append(out, sfMember{s, p})
	}
	return out
}

func legacy(h http.Header) []string {
	return []string{h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset")}
}

func TestWriteHeaders(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	dec := func(id string, limit, remaining int64, src Source) Decision {
		return Decision{Allowed: remaining > 0, Limit: limit, Remaining: remaining, ResetAt: now.Add(2100 * time.Millisecond),
			Window: time.Minute, Policy: id, Revision: "r1", Source: src, Certainty: Certain}
	}
	tenantD, routeD := dec("tenant", 10, 7, SourceGlobalRedis), dec("route", 5, 2, SourceGlobalRedis)
	shadowD := dec("shadow", 1, 0, SourceShadow)
	shadowD.Allowed = true
	denyD := dec("route", 5, 0, SourceGlobalRedis)
	localD := dec("tenant", 3, 1, SourceLocalEmergency)
	localD.ResetAt = time.Time{}
	pol := policy.RatePolicy{ID: "tenant", Revision: "r1"}
	cases := []struct {
		name       string
		o          Outcome
		legacy     []string // nil: none
		policyList []sfMember
		limitList  []sfMember
	}{
		{"one policy", Outcome{kind: Evaluated, decision: tenantD}, []string{"10", "7", "3"},
			[]sfMember{{"tenant", map[string]int64{"q": 10, "w": 60}}}, []sfMember{{"tenant", map[string]int64{"r": 7, "t": 3}}}},
		{"shadow shows nothing", Outcome{kind: Evaluated, decision: shadowD}, nil, nil, nil},
		{"hierarchy allowed: legacy shows the most restrictive, the draft every enforced level",
			Outcome{kind: Evaluated, decision: routeD, chain: []Decision{tenantD, shadowD, routeD}}, []string{"5", "2", "3"},
			[]sfMember{{"tenant", map[string]int64{"q": 10, "w": 60}}, {"route", map[string]int64{"q": 5, "w": 60}}},
			[]sfMember{{"tenant", map[string]int64{"r": 7, "t": 3}}, {"route", map[string]int64{"r": 2, "t": 3}}}},
		{"hierarchy denied: the denying level, after the levels it passed",
			Outcome{kind: Evaluated, decision: denyD, chain: []Decision{tenantD, denyD}}, []string{"5", "0", "3"},
			[]sfMember{{"tenant", map[string]int64{"q": 10, "w": 60}}, {"route", map[string]int64{"q": 5, "w": 60}}},
			[]sfMember{{"tenant", map[string]int64{"r": 7, "t": 3}}, {"route", map[string]int64{"r": 0, "t": 3}}}},
		{"local emergency: its per-pod numbers, no reset", degraded(pol, localD, CategoryRedisUnavailable, ReasonRedisUnavailable), []string{"3", "1", "0"},
			[]sfMember{{"tenant", map[string]int64{"q": 3, "w": 60}}}, []sfMember{{"tenant", map[string]int64{"r": 1}}}},
		{"fail-open: legacy as before, no draft numbers", degraded(pol, Decision{Allowed: true, Limit: 10, Policy: "tenant", Source: SourceFailOpen},
			CategoryRedisUnavailable, ReasonRedisUnavailable), []string{"10", "0", "0"}, nil, nil},
		{"unavailable", unavailable(pol, CategoryRedisUnavailable), nil, nil, nil},
		{"not limited", Outcome{kind: NotLimited}, nil, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, mode := range []HeaderMode{HeadersLegacy, HeadersDraft, HeadersBoth, ""} {
				h := http.Header{}
				WriteHeaders(h, mode, c.o, now)
				wantLegacy := c.legacy
				if mode == HeadersDraft || wantLegacy == nil {
					wantLegacy = []string{"", "", ""}
				}
				assert.Equal(t, wantLegacy, legacy(h), "mode %q", mode)
				var wantPol, wantLim []sfMember
				if mode == HeadersDraft || mode == HeadersBoth {
					wantPol, wantLim = c.policyList, c.limitList
				}
				assert.Equal(t, wantPol, parseField(t, h, "RateLimit-Policy"), "mode %q", mode)
				assert.Equal(t, wantLim, parseField(t, h, "RateLimit"), "mode %q", mode)
			}
		})
	}
	h := http.Header{}
	WriteHeaders(h, HeadersDraft, Outcome{kind: Evaluated, decision: tenantD}, now)
	assert.Equal(t, `"tenant";q=10;w=60`, h.Get("RateLimit-Policy"), "the draft's own example shape")
	assert.Equal(t, `"tenant";r=7;t=3`, h.Get("RateLimit"))

	// Bounds: w rounds a sub-second window up to 1 s; numbers beyond an SF
	// Integer are capped, never an unparsable field.
	big := dec("big", 1<<62, 1<<62, SourceGlobalRedis)
	big.Window = 250 * time.Millisecond
	h = http.Header{}
	WriteHeaders(h, HeadersDraft, Outcome{kind: Evaluated, decision: big}, now)
	assert.Equal(t, []sfMember{{"big", map[string]int64{"q": maxSFInteger, "w": 1}}}, parseField(t, h, "RateLimit-Policy"))
	assert.Equal(t, []sfMember{{"big", map[string]int64{"r": maxSFInteger, "t": 3}}}, parseField(t, h, "RateLimit"))
}

func TestQuotaWindow(t *testing.T) {
	tb := func(capacity, refill int64, period time.Duration) policy.RatePolicy {
		return policy.RatePolicy{Algorithm: policy.RateTokenBucket,
			Parameters: policy.RateParameters{Capacity: capacity, RefillTokens: refill, RefillPeriod: period}}
	}
	assert.Equal(t, time.Minute, quotaWindow(tb(10, 10, time.Minute)))
	assert.Equal(t, 100*time.Hour, quotaWindow(tb(100, 1, time.Hour)), "capacity / refill rate")
	assert.Equal(t, 30*time.Second, quotaWindow(policy.RatePolicy{Algorithm: policy.RateGCRA, Parameters: policy.RateParameters{Window: 30 * time.Second}}))
	assert.Zero(t, quotaWindow(policy.RatePolicy{Algorithm: policy.RateConcurrency, Parameters: policy.RateParameters{PermitTTL: time.Second}}))
}

// TestMiddlewareHeaderModes: against Redis, a hierarchy of a tenant
// window, a shadow policy and a route window. The draft fields list the
// two enforced levels (never the shadow one) with the numbers Redis
// answered; legacy shows the most restrictive level, then the denying one.
// The zero option takes the limiter's configured mode.
func TestMiddlewareHeaderModes(t *testing.T) {
	s := redistest.StartStandalone(t)
	byTenant := fixedWindow("tenant", 5)
	byRoute := routeWindow("route", "r1", 2)
	shadow := fixedWindow("shadow", 1)
	shadow.Shadow = true
	cfg := Config{Provider: ProviderRedis, Headers: HeadersDraft}
	f := newFixture(t, s.Addr(), s, cfg, nil, byTenant, shadow, byRoute)
	sel := NewStaticSelector([]RouteRule{{Route: "/orders", Selections: []Selection{
		{Policy: "tenant", Cost: 1}, {Policy: "shadow", Cost: 1}, {Policy: "route", Cost: 1}}}})
	ex := &HeaderExtractor{TenantHeader: "X-Tenant"}
	do := func(mode HeaderMode, tenant string) *httptest.ResponseRecorder {
		h := Middleware(f.l, sel, ex, MiddlewareOptions{Headers: mode})(okHandler)
		r := httptest.NewRequest(http.MethodGet, "/orders", nil)
		r.Header.Set("X-Tenant", tenant)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := do(HeadersBoth, "acme")
	require.Equal(t, http.StatusTeapot, w.Code)
	assert.Equal(t, []string{"2", "1"}, legacy(w.Header())[:2], "legacy: the most restrictive level (route)")
	pols, lims := parseField(t, w.Header(), "RateLimit-Policy"), parseField(t, w.Header(), "RateLimit")
	require.Len(t, pols, 2, "the shadow policy is never shown")
	assert.Equal(t, sfMember{"tenant", map[string]int64{"q": 5, "w": 720 * 3600}}, pols[0])
	assert.Equal(t, sfMember{"route", map[string]int64{"q": 2, "w": 720 * 3600}}, pols[1])
	require.Len(t, lims, 2)
	assert.Equal(t, []string{"tenant", "route"}, []string{lims[0].name, lims[1].name})
	assert.Equal(t, []int64{4, 1}, []int64{lims[0].params["r"], lims[1].params["r"]})
	for _, l := range lims {
		assert.True(t, l.params["t"] >= 0 && l.params["t"] <= 720*3600, "t is seconds until the window resets: %d", l.params["t"])
	}

	w = do(HeadersLegacy, "acme")
	assert.Equal(t, "0", w.Header().Get("RateLimit-Remaining"))
	assert.Empty(t, w.Header().Values("RateLimit-Policy"), "legacy only")
	assert.Empty(t, w.Header().Values("RateLimit"))

	// The third request passes tenant and is denied by route.
	w = do("", "acme")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Empty(t, w.Header().Get("RateLimit-Limit"), "the zero option is the limiter's draft mode")
	lims = parseField(t, w.Header(), "RateLimit")
	require.Len(t, lims, 2)
	assert.Equal(t, int64(2), lims[0].params["r"], "tenant: consumed (conservative consumption)")
	assert.Equal(t, sfMember{"route", lims[1].params}, lims[1])
	assert.Equal(t, int64(0), lims[1].params["r"], "route denied")
	assert.NotEmpty(t, w.Header().Get("Retry-After"))
	assert.False(t, strings.Contains(w.Header().Get("RateLimit"), "acme"))
}

func TestDecodeHeaders(t *testing.T) {
	raw := loadRaw(t, "rate-limit.yaml")
	cfg, err := Decode(ProviderRedis, "", raw)
	require.NoError(t, err)
	assert.Equal(t, HeadersLegacy, cfg.Headers, "the default")
	for _, m := range []HeaderMode{HeadersLegacy, HeadersDraft, HeadersBoth} {
		raw["headers"] = string(m)
		cfg, err := Decode(ProviderRedis, "", raw)
		require.NoError(t, err)
		assert.Equal(t, m, cfg.Headers)
	}
	for v, rule := range map[any]policy.Rule{"ietf": RuleHeaders, "": RuleHeaders, "Draft": RuleHeaders, 3: policy.RuleType, true: policy.RuleType} {
		raw["headers"] = v
		_, err := Decode(ProviderRedis, "", raw)
		require.ErrorIs(t, err, policy.ErrInvalid, "%v", v)
		assert.Contains(t, err.Error(), "capabilities.rate-limit.headers", "%v", v)
		assert.Contains(t, err.Error(), string(rule), "%v", v)
	}
}

// TestSidecarHeaders: the daemon's evaluate answers carry the configured
// RateLimit fields next to the JSON body (both here); an answer without a
// decision carries none.
func TestSidecarHeaders(t *testing.T) {
	h := newSidecarHost(t, sidecarPolicies+"headers: both\n", nil)
	rec, m := h.post(t, "/v1/ratelimit/evaluate", `{"attributes":{"route":"/orders"},"subject":{"api-key":"k"}}`)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, true, m["allowed"])
	assert.Equal(t, []string{"3", "2"}, legacy(rec.Header())[:2], "legacy: the most restrictive level (per-key)")
	pols := parseField(t, rec.Header(), "RateLimit-Policy")
	assert.Equal(t, []sfMember{{"edge", map[string]int64{"q": 1000, "w": 1}}, {"per-key", map[string]int64{"q": 3, "w": 720 * 3600}}}, pols)
	lims := parseField(t, rec.Header(), "RateLimit")
	require.Len(t, lims, 2)
	assert.Equal(t, int64(2), lims[1].params["r"])
	assert.Equal(t, int64(999), lims[0].params["r"])

	rec, m = h.post(t, "/v1/ratelimit/evaluate", `{"attributes":{"route":"/elsewhere"}}`)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "not-limited", m["kind"])
	assert.Empty(t, rec.Header().Get("RateLimit-Limit"))
	assert.Empty(t, rec.Header().Values("RateLimit"))

	// An explicit option wins over the configuration.
	sc := NewSidecar(h.l, h.sc.sel, nil, SidecarOptions{Headers: HeadersLegacy})
	assert.Equal(t, HeadersLegacy, sc.headers)
	assert.Equal(t, HeadersBoth, NewSidecar(h.l, nil, nil, SidecarOptions{}).headers)
	assert.Equal(t, HeadersLegacy, NewSidecar(nil, nil, nil, SidecarOptions{}).headers)
}
