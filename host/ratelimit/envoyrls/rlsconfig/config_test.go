package rlsconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadUpstream loads every documentation example of envoyproxy/ratelimit
// under testdata/upstream.
func loadUpstream(t testing.TB) *Config {
	t.Helper()
	files, err := filepath.Glob("testdata/upstream/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var ds []*Domain
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		d, err := Parse(f, b)
		require.NoError(t, err, f)
		ds = append(ds, d)
	}
	c, err := New(ds...)
	require.NoError(t, err)
	return c
}

func es(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

// TestMatchUpstreamExamples checks every matching statement the
// envoyproxy/ratelimit README makes about its examples.
func TestMatchUpstreamExamples(t *testing.T) {
	c := loadUpstream(t)
	type want struct {
		rpu       uint32
		unit      Unit
		unlimited bool
		shadow    bool
		none      bool
	}
	cases := []struct {
		name   string
		domain string
		in     []Entry
		want   want
	}{
		{"ex1 users", "mongo_cps", es("database", "users"), want{rpu: 500, unit: Second}},
		{"ex1 default", "mongo_cps", es("database", "default"), want{rpu: 500, unit: Second}},
		{"ex1 other value", "mongo_cps", es("database", "other"), want{none: true}},
		{"ex2 nested marketing", "messaging", es("message_type", "marketing", "to_number", "2061111111"), want{rpu: 5, unit: Day}},
		{"ex2 any number", "messaging", es("to_number", "2061111111"), want{rpu: 100, unit: Day}},
		{"ex2 placeholder has no limit", "messaging", es("message_type", "marketing"), want{none: true}},
		{"ex2 other type", "messaging", es("message_type", "transactional", "to_number", "1"), want{none: true}},
		{"ex3 generic ip", "edge_proxy_per_ip", es("remote_address", "50.0.0.1"), want{rpu: 10, unit: Second}},
		{"ex3 most specific wins", "edge_proxy_per_ip", es("remote_address", "50.0.0.5"), want{rpu: 0, unit: Second}},
		{"ex4 two levels", "example4", es("key", "value", "subkey", "subvalue"), want{rpu: 300, unit: Second}},
		{"ex4 shallower than the rule", "example4", es("key", "value"), want{none: true}},
		{"ex4 deeper than the rule", "example4", es("key", "value", "subkey", "x", "more", "y"), want{none: true}},
		{"ex5 unlimited", "internal", es("ldap", "anything"), want{unlimited: true}},
		{"ex5 limited", "internal", es("azure", "x"), want{rpu: 100, unit: Minute}},
		{"ex6 shadow user-a", "example6", es("service", "auth-service", "user", "user-a"), want{rpu: 10, unit: Second, shadow: true}},
		{"ex6 user-b", "example6", es("service", "auth-service", "user", "user-b"), want{rpu: 20, unit: Second}},
		{"ex6 user-c", "example6", es("service", "auth-service", "user", "user-c"), want{none: true}},
		{"ex8 unspecified value", "example8", es("key1", "unspecified_value"), want{rpu: 10, unit: Minute}},
		{"ex8 value1", "example8", es("key1", "value1"), want{rpu: 20, unit: Minute}},
		{"ex9 trailing", "example9", es("key1", "valueXYZ"), want{rpu: 20, unit: Minute}},
		{"ex9 trailing empty rest", "example9", es("key1", "value"), want{rpu: 20, unit: Minute}},
		{"ex9 trailing no", "example9", es("key1", "valu"), want{none: true}},
		{"ex9 middle", "example9", es("path", "/api/123/action"), want{rpu: 20, unit: Minute}},
		{"ex9 middle no", "example9", es("path", "/api/123/other"), want{none: true}},
		{"ex9 multiple", "example9", es("route", "/api/v1/resource/123/action"), want{rpu: 20, unit: Minute}},
		{"ex9 multiple no", "example9", es("route", "/api/v1/other/123/action"), want{none: true}},
		{"config foo", "rl", es("foo", "x"), want{rpu: 2, unit: Minute}},
		{"config foo bar", "rl", es("foo", "x", "bar", "y"), want{rpu: 3, unit: Minute}},
		{"config foo baz shady", "rl", es("foo", "x", "baz", "shady"), want{rpu: 3, unit: Minute, shadow: true}},
		{"config foo bay", "rl", es("foo", "x", "bay", "y"), want{unlimited: true}},
		{"unknown domain", "nope", es("database", "users"), want{none: true}},
		{"no entries", "mongo_cps", nil, want{none: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Match(tc.domain, tc.in)
			if tc.want.none {
				assert.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			assert.Equal(t, tc.want.unlimited, r.Unlimited)
			assert.Equal(t, tc.want.shadow, r.Shadow)
			if !tc.want.unlimited {
				assert.Equal(t, tc.want.rpu, r.RequestsPerUnit)
				assert.Equal(t, tc.want.unit, r.Unit)
			}
			assert.Equal(t, tc.domain, r.Domain)
		})
	}
}

// TestMatchWildcardOrder: an exact value beats a pattern, the first
// matching pattern in file order beats later ones, and a pattern beats the
// value-less entry.
func TestMatchWildcardOrder(t *testing.T) {
	d, err := Parse("w.yaml", []byte(`
domain: w
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: ab*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: a*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: abc
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: a
    value: b_c
    rate_limit: {unit: second, requests_per_unit: 5}
`))
	require.NoError(t, err)
	c, err := New(d)
	require.NoError(t, err)
	for in, rpu := range map[string]uint32{"abc": 4, "abd": 2, "ax": 3, "zz": 1, "ab*": 2, "a*": 3} {
		r := c.Match("w", es("k", in))
		require.NotNil(t, r, in)
		assert.Equal(t, rpu, r.RequestsPerUnit, in)
	}
	assert.Nil(t, c.Match("w", es("a_b", "c")), "pairs are compared, never joined strings")
	assert.NotNil(t, c.Match("w", es("a", "b_c")))
}

func TestRuleIDStable(t *testing.T) {
	c := loadUpstream(t)
	a := c.Match("messaging", es("message_type", "marketing", "to_number", "1"))
	b := c.Match("messaging", es("message_type", "marketing", "to_number", "2"))
	require.NotNil(t, a)
	assert.Same(t, a, b, "one rule for every value of a value-less key")
	other := c.Match("messaging", es("to_number", "1"))
	assert.NotEqual(t, a.ID(), other.ID())
	assert.Len(t, a.ID(), 64)
	assert.Equal(t, es("message_type", "marketing", "to_number", ""), a.Path)
}

// TestParseProblems: every problem is reported with its path and line.
func TestParseProblems(t *testing.T) {
	cases := map[string]struct {
		yaml string
		want []string
	}{
		"unknown field": {"domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n",
			[]string{"x.yaml:4: descriptors[0].rate_limt: unknown field \"rate_limt\""}},
		"duplicate field": {"domain: d\ndomain: e\n", []string{"x.yaml:2: domain: duplicate field"}},
		"invalid unit": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
			[]string{"x.yaml:5: descriptors[0].rate_limit.unit: invalid unit \"fortnight\""}},
		"year with gcra": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: YEAR, requests_per_unit: 1}\n    caphost: {algorithm: gcra}\n",
			[]string{"x.yaml:4: descriptors[0].rate_limit.unit: year needs algorithm fixed-window: a year is 365 days, and gcra (from its caphost block) takes windows of at most 30 days"}},
		"year with token-bucket": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n    caphost:\n      algorithm: token-bucket\n",
			[]string{"x.yaml:5: descriptors[0].rate_limit.unit: year needs algorithm fixed-window"}},
		"duplicate descriptor": {"domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
			[]string{"x.yaml:5: descriptors[1]: duplicate descriptor"}},
		"duplicate value-less": {"domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
			[]string{"descriptors[1]: duplicate descriptor"}},
		"empty key":      {"domain: d\ndescriptors:\n  - key: \"\"\n", []string{"descriptors[0].key: must not be empty"}},
		"missing domain": {"descriptors: []\n", []string{"domain: required"}},
		"empty domain":   {"domain: \"\"\n", []string{"domain: must not be empty"}},
		"unit with unlimited": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
			[]string{"descriptors[0].rate_limit.unit: not allowed with unlimited"}},
		"missing rpu": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n",
			[]string{"descriptors[0].rate_limit.requests_per_unit: required"}},
		"negative rpu": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			[]string{"requests_per_unit: want a decimal integer"}},
		"rpu string": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: \"5\"}\n",
			[]string{"requests_per_unit: want an integer, got str"}},
		"bool type": {"domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes\n",
			[]string{"descriptors[0].shadow_mode: want true or false"}},
		"replaces": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: x}]}\n",
			[]string{"rate_limit.replaces: envoyproxy/ratelimit's replaces is not supported"}},
		"quota_mode": {"domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n",
			[]string{"descriptors[0].quota_mode: envoyproxy/ratelimit's quota_mode is not supported"}},
		"star key":           {"domain: d\ndescriptors:\n  - key: k*\n", []string{"descriptors[0].key: a key may not contain *"}},
		"alias":              {"domain: d\ndescriptors:\n  - &a {key: k}\n  - *a\n", []string{"anchors are not allowed", "aliases are not allowed"}},
		"two documents":      {"domain: d\n---\ndomain: e\n", []string{"more than one YAML document"}},
		"not a mapping":      {"- a\n", []string{"want a mapping, got a list"}},
		"descriptors scalar": {"domain: d\ndescriptors: 3\n", []string{"descriptors: want a list of descriptors, got int"}},
		"bad utf8":           {"domain: \"\xff\"\n", []string{"not valid UTF-8"}},
		"long key": {"domain: d\ndescriptors:\n  - key: " + strings.Repeat("k", MaxKeyBytes+1) + "\n",
			[]string{"descriptors[0].key: 257 bytes, at most 256"}},
		"several at once": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon, requests_per_unit: 1}\n  - key: j\n    nope: 1\n",
			[]string{"descriptors[0].rate_limit.unit: invalid unit", "descriptors[1].nope: unknown field"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.yaml))
			require.ErrorIs(t, err, ErrInvalid)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseDepthAndDuplicateDomain(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\n")
	indent := ""
	for i := 0; i <= MaxDepth; i++ {
		b.WriteString(indent + "descriptors:\n" + indent + "  - key: k\n")
		indent += "    "
	}
	_, err := Parse("deep.yaml", []byte(b.String()))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "nested deeper than 16 levels")

	a, err := Parse("a.yaml", []byte("domain: d\n"))
	require.NoError(t, err)
	b2, err := Parse("b.yaml", []byte("domain: d\n"))
	require.NoError(t, err)
	_, err = New(a, b2)
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), `b.yaml: domain: duplicate domain "d" (first in a.yaml)`)

	_, err = Parse("big.yaml", make([]byte, MaxFileBytes+1))
	assert.ErrorContains(t, err, "at most 1048576")
}

func TestWildcardMatch(t *testing.T) {
	cases := []struct {
		pat, v string
		ok     bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"*", "", true}, {"*", "anything", true},
		{"a*c", "ac", true}, {"a*c", "abc", true}, {"a*c", "ab", false},
		{"a*a", "a", false}, {"a*b*c", "abc", true}, {"a*b*c", "axbyc", true}, {"a*b*c", "acb", false},
		{"*x*", "x", true}, {"*x*", "y", false}, {"ab*ba", "aba", false},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.ok, wildcardMatch(strings.Split(tc.pat, "*"), tc.v), "%q ~ %q", tc.pat, tc.v)
	}
}

// TestUpstreamFeaturesCaphostRefuses: envoyproxy/ratelimit's own example
// configuration uses replaces, quota_mode and metadata; caphost cannot act
// on them and says so for each, instead of loading a different meaning.
func TestUpstreamFeaturesCaphostRefuses(t *testing.T) {
	b, err := os.ReadFile("testdata/unsupported/examples-config.yaml")
	require.NoError(t, err)
	_, err = Parse("config.yaml", b)
	require.ErrorIs(t, err, ErrInvalid)
	for _, w := range []string{
		"config.yaml:9: descriptors[0].rate_limit.replaces: envoyproxy/ratelimit's replaces is not supported by caphost",
		"config.yaml:90: descriptors[5].quota_mode: envoyproxy/ratelimit's quota_mode is not supported by caphost",
		"config.yaml:104: descriptors[6].metadata: envoyproxy/ratelimit's metadata is not supported by caphost",
	} {
		assert.Contains(t, err.Error(), w)
	}
}

// TestKeyPath: a rule's key path is its domain, keys and configured values
// as written (a wildcard as its pattern); quoting keeps distinct rules
// apart even where upstream's joined key_value names would collide.
func TestKeyPath(t *testing.T) {
	c := loadUpstream(t)
	for _, tc := range []struct {
		domain string
		req    []Entry
		want   string
	}{
		{"messaging", es("message_type", "marketing", "to_number", "2061111111"), `messaging message_type="marketing" to_number`},
		{"messaging", es("to_number", "2061111111"), `messaging to_number`},
		{"edge_proxy_per_ip", es("remote_address", "50.0.0.5"), `edge_proxy_per_ip remote_address="50.0.0.5"`},
		{"example9", es("key1", "value1-x"), `example9 key1="value*"`},
	} {
		r := c.Match(tc.domain, tc.req)
		require.NotNil(t, r, tc.want)
		assert.Equal(t, tc.want, r.KeyPath())
	}

	d, err := Parse("q.yaml", []byte("domain: \"a b\"\ndescriptors:\n"+
		"  - {key: a_b, value: c, rate_limit: {unit: second, requests_per_unit: 1}}\n"+
		"  - {key: a, value: b_c, rate_limit: {unit: second, requests_per_unit: 1}}\n"+
		"  - {key: \"k=v\", rate_limit: {unit: second, requests_per_unit: 1}}\n"+
		"  - {key: k, value: \"v\\\" x\", rate_limit: {unit: second, requests_per_unit: 1}}\n"))
	require.NoError(t, err)
	var got []string
	for _, r := range d.Rules() {
		got = append(got, r.KeyPath())
	}
	assert.Equal(t, []string{`"a b" a_b="c"`, `"a b" a="b_c"`, `"a b" "k=v"`, `"a b" k="v\" x"`}, got)
}

// TestShadowModeNeedsARule: shadow_mode belongs to the rule of its own
// descriptor (upstream reads it only there): on a descriptor without a
// rate_limit it would change nothing, so the file is refused.
func TestShadowModeNeedsARule(t *testing.T) {
	_, err := Parse("x.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    descriptors:\n      - key: j\n        rate_limit: {unit: second, requests_per_unit: 1}\n"))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "x.yaml:4: descriptors[0].shadow_mode: needs a rate_limit on the same descriptor")
	_, err = Parse("x.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: false\n    descriptors:\n      - key: j\n        rate_limit: {unit: second, requests_per_unit: 1}\n"))
	require.NoError(t, err, "false asks for nothing")
}

// TestDetailedMetricBounds: detailed_metric needs a rate_limit on its
// descriptor, and at most MaxDetailedRules rules (of all files) may ask
// for it.
func TestDetailedMetricBounds(t *testing.T) {
	_, err := Parse("x.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    descriptors:\n      - key: j\n        rate_limit: {unit: second, requests_per_unit: 1}\n"))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "x.yaml:4: descriptors[0].detailed_metric: needs a rate_limit on the same descriptor")

	file := func(name string, n int) *Domain {
		var b strings.Builder
		b.WriteString("domain: " + name + "\ndescriptors:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - key: k%d\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", i)
		}
		d, err := Parse(name+".yaml", []byte(b.String()))
		require.NoError(t, err)
		return d
	}
	_, err = New(file("a", MaxDetailedRules/2), file("b", MaxDetailedRules/2))
	require.NoError(t, err)
	_, err = New(file("a", MaxDetailedRules/2), file("b", MaxDetailedRules/2+1))
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "b.yaml:387: descriptors[128].detailed_metric: more than 256 rules with detailed_metric: true")
}
