package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func concurrencyDecl() RatePolicyDecl {
	return RatePolicyDecl{ID: "jobs", Revision: "r1", Algorithm: RateConcurrency,
		Parameters: RateParameters{Limit: 4, PermitTTL: 30 * time.Second}, Dimensions: []RateDimension{DimTenant}}
}

// TestConcurrencyPolicyAlwaysFailsClosed: §21 defines the local emergency
// limiter, fail-open and shadow for rates only, so a concurrency policy
// declaring any of them is refused (with the exact path), while the plain
// declaration compiles to fail-closed.
func TestConcurrencyPolicyAlwaysFailsClosed(t *testing.T) {
	set, err := CompileRatePolicies([]RatePolicyDecl{concurrencyDecl()}, RateCompileOptions{})
	require.NoError(t, err)
	p, ok := set.Policy("jobs")
	require.True(t, ok)
	assert.Equal(t, FailClosed, p.FailureMode)
	assert.Equal(t, int64(4), p.Limit())
	assert.Equal(t, 30*time.Second, p.Parameters.PermitTTL)

	cases := map[string]struct {
		mut  func(*RatePolicyDecl)
		path string
		rule Rule
	}{
		"local":         {func(d *RatePolicyDecl) { d.FailureMode = FailLocal }, "p.jobs.failure-mode", RuleRateFailureMode},
		"open":          {func(d *RatePolicyDecl) { d.FailureMode = FailOpenPolicy }, "p.jobs.failure-mode", RuleRateFailureMode},
		"shadow":        {func(d *RatePolicyDecl) { d.Shadow = true }, "p.jobs.shadow", RuleRateParameters},
		"ttl-too-short": {func(d *RatePolicyDecl) { d.Parameters.PermitTTL = 9 * time.Millisecond }, "p.jobs.permit-ttl", RuleRateParameters},
		"ttl-too-long":  {func(d *RatePolicyDecl) { d.Parameters.PermitTTL = RateMaxPermitTTL + time.Millisecond }, "p.jobs.permit-ttl", RuleRateParameters},
		"ttl-sub-ms":    {func(d *RatePolicyDecl) { d.Parameters.PermitTTL = 20*time.Millisecond + time.Microsecond }, "p.jobs.permit-ttl", RuleRateParameters},
		"ttl-missing":   {func(d *RatePolicyDecl) { d.Parameters.PermitTTL = 0 }, "p.jobs.permit-ttl", RuleRateParameters},
		"window":        {func(d *RatePolicyDecl) { d.Parameters.Window = time.Second }, "p.jobs.window", RuleRateParameters},
		"cost":          {func(d *RatePolicyDecl) { d.MaxCost = 2 }, "p.jobs.max-cost", RuleRateCost},
		"dedup":         {func(d *RatePolicyDecl) { d.Dedup.Enabled = true }, "p.jobs.dedup", RuleRateDedup},
		"hierarchy":     {func(d *RatePolicyDecl) { d.Hierarchy = "edge" }, "p.jobs.hierarchy", RuleRateHierarchy},
		"limit":         {func(d *RatePolicyDecl) { d.Parameters.Limit = RateMaxLogLimit + 1 }, "p.jobs.limit", RuleRateParameters},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d := concurrencyDecl()
			c.mut(&d)
			_, err := CompileRatePolicies([]RatePolicyDecl{d}, RateCompileOptions{PathPrefix: "p",
				LocalEmergency: &RateLocalEmergency{AssumedMaxPods: 10, PerPodShare: 0.1}})
			var verr *ValidationError
			require.ErrorAs(t, err, &verr)
			found := false
			for _, pr := range verr.Problems {
				if pr.Path == c.path && pr.Rule == c.rule {
					found = true
				}
			}
			assert.True(t, found, "want %s at %s in:\n%v", c.rule, c.path, err)
		})
	}
	for _, ttl := range []time.Duration{RateMinPermitTTL, RateMaxPermitTTL} {
		d := concurrencyDecl()
		d.Parameters.PermitTTL = ttl
		_, err := CompileRatePolicies([]RatePolicyDecl{d}, RateCompileOptions{})
		assert.NoError(t, err, "bound %s is inclusive", ttl)
	}
}
