package envoycompat

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	upstream "github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
)

// trailingWildcards is README Example 9's first snippet: the released
// envoyproxy/ratelimit module (v1.4.1-0.20260122083618) matches `*` only
// at the end of a value; its later middle and multiple wildcards are
// covered by rlsconfig's own tests.
const trailingWildcards = `domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key1
    value: v*
    descriptors:
      - key: k2
        rate_limit: {unit: hour, requests_per_unit: 7}
`

type file struct{ name, body string }

func examples(t *testing.T) []file {
	t.Helper()
	dir := filepath.Join("..", "..", "host", "ratelimit", "envoyrls", "rlsconfig", "testdata", "upstream")
	names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	var out []file
	for _, n := range names {
		if filepath.Base(n) == "example9.yaml" {
			continue
		}
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		out = append(out, file{filepath.Base(n), string(b)})
	}
	require.GreaterOrEqual(t, len(out), 7)
	return append(out, file{"example9-trailing.yaml", trailingWildcards})
}

// TestSameLimitAsEnvoyproxyRatelimit: for every request descriptor of
// depth 1..3 built from the keys and values the files use (plus values
// that only a wildcard or a value-less key matches, and one nothing
// matches), caphost and envoyproxy/ratelimit select the same limit:
// requests_per_unit, unit, unlimited and shadow_mode, or none.
func TestSameLimitAsEnvoyproxyRatelimit(t *testing.T) {
	files := examples(t)
	var (
		loads   []upstream.RateLimitConfigToLoad
		domains []*rlsconfig.Domain
	)
	for _, f := range files {
		loads = append(loads, upstream.RateLimitConfigToLoad{Name: f.name, ConfigYaml: upstream.ConfigFileContentToYaml(f.name, f.body)})
		d, err := rlsconfig.Parse(f.name, []byte(f.body))
		require.NoError(t, err, f.name)
		domains = append(domains, d)
	}
	theirs := upstream.NewRateLimitConfigImpl(loads, stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), settings.Settings{}), false)
	ours, err := rlsconfig.New(domains...)
	require.NoError(t, err)

	compared, limited := 0, 0
	for _, d := range domains {
		entries := vocabulary(d)
		var walk func(prefix []rlsconfig.Entry)
		walk = func(prefix []rlsconfig.Entry) {
			if len(prefix) > 0 {
				compared++
				if compare(t, theirs, ours, d.Name(), prefix) {
					limited++
				}
			}
			if len(prefix) == 3 {
				return
			}
			for _, e := range entries {
				walk(append(append([]rlsconfig.Entry(nil), prefix...), e))
			}
		}
		walk(nil)
	}
	t.Logf("%d descriptors compared, %d of them limited", compared, limited)
	require.Greater(t, limited, 50)
}

// vocabulary lists request entries for a domain: every configured key
// with every configured value, a wildcard pattern's prefix plus "x", the
// pattern text itself, and a value nothing configures.
func vocabulary(d *rlsconfig.Domain) []rlsconfig.Entry {
	keys := map[string]bool{}
	values := map[string]bool{"unconfigured": true}
	for _, r := range d.Rules() {
		for _, e := range r.Path {
			keys[e.Key] = true
			if e.Value != "" {
				values[e.Value] = true
				if p, ok := strings.CutSuffix(e.Value, "*"); ok {
					values[p+"x"] = true
				}
			}
		}
	}
	var out []rlsconfig.Entry
	for k := range keys {
		for v := range values {
			out = append(out, rlsconfig.Entry{Key: k, Value: v})
		}
	}
	return out
}

// compare checks one descriptor and reports whether it was limited.
func compare(t *testing.T, theirs upstream.RateLimitConfig, ours *rlsconfig.Config, domain string, es []rlsconfig.Entry) bool {
	t.Helper()
	pd := &commonv3.RateLimitDescriptor{}
	for _, e := range es {
		pd.Entries = append(pd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	want := theirs.GetLimit(context.Background(), domain, pd)
	got := ours.Match(domain, es)
	if want == nil {
		require.Nil(t, got, "%s %v: envoyproxy/ratelimit has no limit", domain, es)
		return false
	}
	require.NotNil(t, got, "%s %v: envoyproxy/ratelimit limits it", domain, es)
	require.Equal(t, want.Unlimited, got.Unlimited, "%s %v", domain, es)
	require.Equal(t, want.ShadowMode, got.Shadow, "%s %v", domain, es)
	if !want.Unlimited {
		require.Equal(t, want.Limit.RequestsPerUnit, got.RequestsPerUnit, "%s %v", domain, es)
		require.Equal(t, strings.ToLower(want.Limit.Unit.String()), got.Unit.String(), "%s %v", domain, es)
	}
	return true
}
