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
