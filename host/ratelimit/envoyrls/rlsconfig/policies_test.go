package rlsconfig

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

func TestPolicies(t *testing.T) {
	c := loadUpstream(t)
	decls, ids, err := Policies(c, PolicyOptions{})
	require.NoError(t, err)
	require.Len(t, ids, len(decls))
	// Unlimited rules and limits of 0 need no state.
	for _, r := range c.Rules() {
		_, counted := ids[r]
		assert.Equal(t, !r.Unlimited && r.RequestsPerUnit > 0, counted)
	}
	_, err = policy.CompileRatePolicies(decls, policy.RateCompileOptions{})
	require.NoError(t, err)
	r := c.Match("messaging", es("message_type", "marketing", "to_number", "1"))
	var d policy.RatePolicyDecl
	for _, x := range decls {
		if x.ID == ids[r] {
			d = x
		}
	}
	assert.Equal(t, policy.RateFixedWindow, d.Algorithm)
	assert.Equal(t, policy.RateParameters{Limit: 5, Window: 24 * time.Hour}, d.Parameters)
	assert.Equal(t, int64(5), d.MaxCost)
	assert.Equal(t, policy.FailClosed, d.FailureMode)
	assert.Equal(t, []policy.RateDimension{Dimension}, d.Dimensions)

	// The id is the rule's place; the revision changes with the behaviour.
	sc, scIDs, err := Policies(c, PolicyOptions{Algorithm: policy.RateSlidingCounter, FailureMode: policy.FailOpenPolicy})
	require.NoError(t, err)
	assert.Equal(t, ids[r], scIDs[r])
	for _, x := range sc {
		if x.ID == ids[r] {
			assert.NotEqual(t, d.Revision, x.Revision)
			assert.Equal(t, policy.RateParameters{Limit: 5, Window: 24 * time.Hour}, x.Parameters)
		}
	}

	one, err := Parse("tb.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 60}\n"))
	require.NoError(t, err)
	c1, err := New(one)
	require.NoError(t, err)
	tb, _, err := Policies(c1, PolicyOptions{Algorithm: policy.RateTokenBucket})
	require.NoError(t, err)
	require.Len(t, tb, 1)
	assert.Equal(t, policy.RateParameters{Capacity: 60, RefillTokens: 60, RefillPeriod: time.Minute}, tb[0].Parameters)
}

func TestPoliciesBeyondBounds(t *testing.T) {
	d, err := Parse("big.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n"))
	require.NoError(t, err)
	c, err := New(d)
	require.NoError(t, err)
	_, _, err = Policies(c, PolicyOptions{})
	var verr *policy.ValidationError
	require.ErrorAs(t, err, &verr)
	assert.Contains(t, err.Error(), "big.yaml:3: descriptors[0]: must be within 1..1000000000")
	assert.Contains(t, err.Error(), "envoy-rate-limit.limit")
}

// A year (any case, as upstream) is 365 days, one fixed window aligned to
// the epoch: the rule becomes a fixed-window policy of 365 days, which
// compiles. Mapped to any other algorithm — the service's or the rule's
// caphost block's — it is a problem at the rule: the parser reports the
// block's, Policies the service's.
func TestPoliciesYear(t *testing.T) {
	const year = 365 * 24 * time.Hour
	assert.Equal(t, year, Year.Duration())
	assert.Equal(t, "year", Year.String())
	load := func(yaml string) *Config {
		t.Helper()
		d, err := Parse("y.yaml", []byte(yaml))
		require.NoError(t, err)
		c, err := New(d)
		require.NoError(t, err)
		return c
	}
	for _, unit := range []string{"year", "YEAR", "Year"} {
		c := load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: " + unit + ", requests_per_unit: 100}\n")
		r := c.Match("d", es("k", "v"))
		require.NotNil(t, r, unit)
		assert.Equal(t, Year, r.Unit, unit)
		decls, ids, err := Policies(c, PolicyOptions{})
		require.NoError(t, err, unit)
		require.Len(t, decls, 1)
		assert.Equal(t, ids[r], decls[0].ID)
		assert.Equal(t, policy.RateFixedWindow, decls[0].Algorithm)
		assert.Equal(t, policy.RateParameters{Limit: 100, Window: year}, decls[0].Parameters)
		_, err = policy.CompileRatePolicies(decls, policy.RateCompileOptions{})
		require.NoError(t, err)
	}

	yearly := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 100}\n" +
		"  - key: j\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	c := load(yearly)
	for _, a := range []policy.RateAlgorithm{policy.RateSlidingCounter, policy.RateGCRA, policy.RateTokenBucket} {
		_, _, err := Policies(c, PolicyOptions{Algorithm: a, PathPrefix: "server.envoy-rate-limit.rules"})
		var verr *policy.ValidationError
		require.ErrorAs(t, err, &verr, a)
		require.Len(t, verr.Problems, 1, "only the year rule: %v", err)
		assert.Equal(t, "server.envoy-rate-limit.rules.window", verr.Problems[0].Path)
		assert.Equal(t, policy.RuleRateParameters, verr.Problems[0].Rule)
		assert.Equal(t, "y.yaml:3: descriptors[0]: year needs algorithm fixed-window: a year is 365 days, and "+string(a)+
			" (from the service's algorithm) takes windows of at most 30 days", verr.Problems[0].Message)
	}

	// The rule's own block may choose the fixed window under a service
	// default that cannot take a year.
	c = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 100}\n    caphost: {algorithm: fixed-window}\n")
	decls, _, err := Policies(c, PolicyOptions{Algorithm: policy.RateGCRA})
	require.NoError(t, err)
	assert.Equal(t, policy.RateFixedWindow, decls[0].Algorithm)

	// Reported together with the compiler's problems of other rules.
	c = load(yearly + "  - key: big\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n")
	_, _, err = Policies(c, PolicyOptions{Algorithm: policy.RateSlidingCounter})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "y.yaml:3: descriptors[0]: year needs algorithm fixed-window")
	assert.Contains(t, err.Error(), "y.yaml:7: descriptors[2]: must be within 1..1000000000")
}
