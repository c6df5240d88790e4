package rlsconfig

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

const extFile = `domain: ext
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 10}
    caphost:
      algorithm: gcra
      failure_mode: local-emergency
      per_pod_share: 0.25
      dedup: {ttl: 45s, max_entries: 16}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 100}
    caphost: {failure_mode: fail-open, dedup: true}
`

func load(t *testing.T, yaml string) *Config {
	t.Helper()
	d, err := Parse("ext.yaml", []byte(yaml))
	require.NoError(t, err)
	c, err := New(d)
	require.NoError(t, err)
	return c
}

// TestExtensionPerRule: a rule's caphost block sets its algorithm, failure
// mode, per-pod share and dedup; a rule without one inherits the service's
// options and keeps the revision it had before the extension existed.
func TestExtensionPerRule(t *testing.T) {
	c := load(t, extFile)
	le := &policy.RateLocalEmergency{AssumedMaxPods: 4, PerPodShare: 0.25}
	decls, ids, err := Policies(c, PolicyOptions{Algorithm: policy.RateSlidingCounter, LocalEmergency: le})
	require.NoError(t, err)
	by := map[string]policy.RatePolicyDecl{}
	for _, d := range decls {
		by[d.ID] = d
	}
	plain := by[ids[c.Match("ext", es("plain", "x"))]]
	assert.Equal(t, policy.RateSlidingCounter, plain.Algorithm)
	assert.Equal(t, policy.FailClosed, plain.FailureMode)
	assert.False(t, plain.Dedup.Enabled)

	g := by[ids[c.Match("ext", es("gcra", "x"))]]
	assert.Equal(t, policy.RateGCRA, g.Algorithm)
	assert.Equal(t, policy.FailLocal, g.FailureMode)
	assert.Equal(t, 0.25, g.PerPodShare)
	assert.Equal(t, policy.RateDedup{Enabled: true, TTL: 45 * time.Second, MaxEntries: 16}, g.Dedup)

	o := by[ids[c.Match("ext", es("open", "x"))]]
	assert.Equal(t, policy.RateSlidingCounter, o.Algorithm)
	assert.Equal(t, policy.FailOpenPolicy, o.FailureMode)
	assert.Equal(t, policy.RateDedup{Enabled: true}, o.Dedup)

	// The same rule without a caphost block has the revision of a file
	// that never had one; adding dedup changes it (new state).
	noExt := load(t, "domain: ext\ndescriptors:\n  - key: open\n    rate_limit: {unit: hour, requests_per_unit: 100}\n    caphost: {failure_mode: fail-open}\n")
	d2, ids2, err := Policies(noExt, PolicyOptions{Algorithm: policy.RateSlidingCounter})
	require.NoError(t, err)
	up := load(t, "domain: ext\ndescriptors:\n  - key: open\n    rate_limit: {unit: hour, requests_per_unit: 100}\n")
	d3, _, err := Policies(up, PolicyOptions{Algorithm: policy.RateSlidingCounter, FailureMode: policy.FailOpenPolicy})
	require.NoError(t, err)
	assert.Equal(t, ids[c.Match("ext", es("open", "x"))], ids2[noExt.Match("ext", es("open", "x"))], "the id is the rule's place")
	assert.Equal(t, d3[0].Revision, d2[0].Revision, "a block that only restates the defaults keeps the revision")
	assert.NotEqual(t, d2[0].Revision, o.Revision, "dedup is new behaviour: a new revision")
}

// TestExtensionNeedsLocalEmergency: a local-emergency rule without the
// service's local limiter is a problem located at the rule.
func TestExtensionNeedsLocalEmergency(t *testing.T) {
	c := load(t, extFile)
	_, _, err := Policies(c, PolicyOptions{})
	var verr *policy.ValidationError
	require.ErrorAs(t, err, &verr)
	assert.Contains(t, err.Error(), "ext.yaml:5: descriptors[1]: local-emergency needs degraded-provider: local-emergency")
	// A share beyond what the assumed pods allow is located too.
	_, _, err = Policies(c, PolicyOptions{LocalEmergency: &policy.RateLocalEmergency{AssumedMaxPods: 8, PerPodShare: 0.1}})
	require.ErrorAs(t, err, &verr)
	assert.Contains(t, err.Error(), "ext.yaml:5: descriptors[1]: per-pod share 0.25 × assumed maximum pods 8 exceeds 1")
}

// TestExtensionProblems: the block is decoded as strictly as the rest of
// the file, every problem located.
func TestExtensionProblems(t *testing.T) {
	cases := map[string]struct{ body, want string }{
		"unknown field":      {"caphost: {algorithm: gcra, burst: 3}", `descriptors[0].caphost.burst: unknown field "burst"`},
		"bad algorithm":      {"caphost: {algorithm: leaky-bucket}", `caphost.algorithm: invalid algorithm "leaky-bucket"`},
		"concurrency":        {"caphost: {algorithm: concurrency}", `invalid algorithm "concurrency"`},
		"bad mode":           {"caphost: {failure_mode: retry}", `caphost.failure_mode: invalid failure mode "retry"`},
		"share without mode": {"caphost: {per_pod_share: 0.5}", "caphost.per_pod_share: applies only with failure_mode: local-emergency"},
		"share range":        {"caphost: {failure_mode: local-emergency, per_pod_share: 1.5}", "per_pod_share: must be within (0, 1]"},
		"share type":         {"caphost: {failure_mode: local-emergency, per_pod_share: half}", "per_pod_share: want a number"},
		"dedup ttl":          {"caphost: {dedup: {ttl: 30}}", "dedup.ttl: want a duration"},
		"dedup negative":     {"caphost: {dedup: {ttl: -1s}}", "dedup.ttl: must be positive"},
		"dedup entries":      {"caphost: {dedup: {max_entries: 0}}", "dedup.max_entries: want a positive integer"},
		"dedup field":        {"caphost: {dedup: {window: 1s}}", `dedup.window: unknown field`},
		"dup field":          {"caphost: {algorithm: gcra, algorithm: gcra}", "caphost.algorithm: duplicate field"},
		"not a mapping":      {"caphost: gcra", "caphost: want a mapping"},
		"anchor":             {"caphost: &a {algorithm: gcra}", "caphost: anchors are not allowed"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    " + tc.body + "\n"
			_, err := Parse("x.yaml", []byte(src))
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "x.yaml:5")
		})
	}
	for name, tc := range map[string]struct{ src, want string }{
		"no rate_limit": {"domain: d\ndescriptors:\n  - key: k\n    caphost: {algorithm: gcra}\n", "descriptors[0].caphost: needs a rate_limit on the same descriptor"},
		"unlimited":     {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n    caphost: {algorithm: gcra}\n", "an unlimited rule is never counted"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.src))
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
