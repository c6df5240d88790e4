package envoyrls_test

import (
	"context"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestSelectorMapping: a selector-mapped domain is answered by the
// capability's selector (here the static route selector; a rate-policy
// guest is another Selector): entries become attributes and identity, the
// selected policy counts per api-key, other domains keep the static file.
// hits_addend scales the selector's cost. A descriptor with an unknown or
// repeated key or a hits_addend of 0 is refused on its own (OVER_LIMIT, nothing counted) while the valid descriptor
// beside it is decided; a missing identity fails closed.
func TestSelectorMapping(t *testing.T) {
	srv := redistest.StartStandalone(t)
	rt := newRuntime(t, srv.Addr())
	rc := ratelimit.Config{Provider: ratelimit.ProviderRedis, DegradedProvider: ratelimit.DegradedDisabled,
		Policies: []policy.RatePolicyDecl{{ID: "per-key", Revision: "r1", Algorithm: policy.RateFixedWindow,
			Parameters: policy.RateParameters{Limit: 2, Window: 720 * time.Hour}, MaxCost: 2, Dimensions: []policy.RateDimension{policy.DimAPIKey}},
			{ID: "shadow-key", Revision: "r1", Algorithm: policy.RateFixedWindow, Shadow: true,
				Parameters: policy.RateParameters{Limit: 1, Window: 720 * time.Hour}, Dimensions: []policy.RateDimension{policy.DimAPIKey}}}}
	set, err := rc.CompilePolicies()
	require.NoError(t, err)
	lim, err := ratelimit.New(rt, rc, set)
	require.NoError(t, err)
	sel := ratelimit.NewStaticSelector([]ratelimit.RouteRule{{Route: "/api", Selections: []ratelimit.Selection{{Policy: "per-key", Cost: 1}}},
		{Route: "/shadow", Selections: []ratelimit.Selection{{Policy: "shadow-key", Cost: 1}}}})

	m := &envoyrls.SelectorMapping{Limiter: lim, Selector: sel, Domains: []string{"edge"}}
	f := serve(t, srv, envoyrls.Options{Selector: m}, loadFiles(t, "example2.yaml"))
	call := func(ds ...*commonv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
		return f.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
	}
	for _, want := range []struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{{rlsv3.RateLimitResponse_OK, 1}, {rlsv3.RateLimitResponse_OK, 0}, {rlsv3.RateLimitResponse_OVER_LIMIT, 0}} {
		r, err := call(desc("route", "/api", "api-key", "k1"))
		require.NoError(t, err)
		assert.Equal(t, want.code, r.Statuses[0].Code)
		assert.Equal(t, want.remaining, r.Statuses[0].LimitRemaining)
		require.NotNil(t, r.Statuses[0].CurrentLimit)
		assert.Equal(t, "per-key", r.Statuses[0].CurrentLimit.Name)
		assert.Equal(t, uint32(2), r.Statuses[0].CurrentLimit.RequestsPerUnit)
		assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_MONTH, r.Statuses[0].CurrentLimit.Unit, "30 days: a month, as the descriptor files count it")
	}
	r, err := call(desc("route", "/api", "api-key", "k2"))
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode, "each api-key has its own counter")

	// A shadow policy never limits; the descriptor it would have limited
	// counts as shadow_over_limit.
	for _, want := range []float64{0, 1} {
		r, err := call(desc("route", "/shadow", "api-key", "k1"))
		require.NoError(t, err)
		assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode)
		assert.Equal(t, 1.0, f.count(t, "shadow"))
		assert.Equal(t, want, f.count(t, "shadow_over_limit"))
	}

	// The static file still answers its own domain.
	status1(t, f.call(t, "messaging", 0, desc("to_number", "1")), 0, rlsv3.RateLimitResponse_OK, 100, rlsv3.RateLimitResponse_RateLimit_DAY, 99)

	// No api-key for a policy keyed on it: fails closed, nothing counted.
	r, err = call(desc("route", "/api"))
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode)
	assert.Equal(t, 1.0, f.count(t, "selector_error"))

	for _, tc := range []struct {
		name   string
		d      *commonv3.RateLimitDescriptor
		reason envoyrls.Reason
	}{
		{"unknown key", desc("route", "/api", "remote_address", "1.2.3.4"), envoyrls.ReasonSelectorKey},
		{"repeated key", desc("route", "/api", "api-key", "a", "api-key", "b"), envoyrls.ReasonSelectorKey},
		{"check", hits(desc("route", "/api", "api-key", "k4"), 0), envoyrls.ReasonCheckOnly},
	} {
		before := f.refused(t, tc.reason)
		r, err := call(desc("route", "/api", "api-key", "k3-"+tc.name), tc.d)
		require.NoError(t, err, tc.name)
		assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode, tc.name)
		assert.Equal(t, rlsv3.RateLimitResponse_OK, r.Statuses[0].Code, tc.name)
		assert.Equal(t, uint32(1), r.Statuses[0].LimitRemaining, "%s: the valid descriptor is decided", tc.name)
		assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.Statuses[1].Code, tc.name)
		assert.Nil(t, r.Statuses[1].CurrentLimit, tc.name)
		assert.Equal(t, before+1, f.refused(t, tc.reason), tc.name)
	}
	r, err = call(desc("route", "/api", "api-key", "k4"))
	require.NoError(t, err)
	assert.Equal(t, uint32(1), r.Statuses[0].LimitRemaining, "a refused descriptor counted nothing")

	// hits_addend scales the selector's cost (1 per request here, up to
	// the policy's max cost of 2): the descriptor's own, else the
	// request's; over the max cost it counts nothing.
	r, err = call(hits(desc("route", "/api", "api-key", "k5"), 2))
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, r.Statuses[0].Code)
	assert.Equal(t, uint32(0), r.Statuses[0].LimitRemaining, "2 of 2 taken at once")
	r, err = f.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2,
		Descriptors: []*commonv3.RateLimitDescriptor{desc("route", "/api", "api-key", "k6")}})
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, r.Statuses[0].Code)
	assert.Equal(t, uint32(0), r.Statuses[0].LimitRemaining, "the request's hits_addend")
	r, err = call(hits(desc("route", "/api", "api-key", "k7"), 3))
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.Statuses[0].Code, "3 is over the max cost")
	r, err = call(desc("route", "/api", "api-key", "k7"))
	require.NoError(t, err)
	assert.Equal(t, uint32(1), r.Statuses[0].LimitRemaining, "the refused 3 counted nothing")

	// A domain in both the file and the selector is a configuration error.
	_, err = envoyrls.New(rt, loadFiles(t, "example2.yaml"), envoyrls.Options{Selector: &envoyrls.SelectorMapping{Limiter: lim, Selector: sel, Domains: []string{"messaging"}}})
	assert.ErrorIs(t, err, ratelimit.ErrConfig)
	require.NoError(t, f.svc.Reload(loadFiles(t, "example2.yaml", "example3.yaml")))
	edge, err := rlsconfig.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	require.NoError(t, err)
	clash, err := rlsconfig.New(edge)
	require.NoError(t, err)
	assert.ErrorIs(t, f.svc.Reload(clash), ratelimit.ErrConfig, "a reload cannot take a selector's domain")
}

// TestWindowUnit: a policy window that is exactly an Envoy unit (a month
// being 30 days, as envoyproxy/ratelimit counts it) is shown as that
// unit; any other, UNKNOWN rather than a misstated rate.
func TestWindowUnit(t *testing.T) {
	for w, want := range map[time.Duration]rlsv3.RateLimitResponse_RateLimit_Unit{
		time.Second: rlsv3.RateLimitResponse_RateLimit_SECOND, time.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
		time.Hour: rlsv3.RateLimitResponse_RateLimit_HOUR, 24 * time.Hour: rlsv3.RateLimitResponse_RateLimit_DAY,
		0: rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 15 * time.Second: rlsv3.RateLimitResponse_RateLimit_UNKNOWN,
		90 * time.Second: rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 48 * time.Hour: rlsv3.RateLimitResponse_RateLimit_UNKNOWN,
		7 * 24 * time.Hour: rlsv3.RateLimitResponse_RateLimit_WEEK, 720 * time.Hour: rlsv3.RateLimitResponse_RateLimit_MONTH,
	} {
		assert.Equal(t, want, envoyrls.WindowUnit(w), "%v", w)
	}
}
