package rlsconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

// FuzzParse: the loader never panics; what it accepts is within its bounds
// (valid UTF-8, bounded keys and values and depth, known units, a caphost
// block only on a counted rule with known algorithm and mode, a year rule's
// only fixed-window) and a
// parse is deterministic; what it refuses carries at least one problem.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, name := range files {
		b, err := os.ReadFile(name)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: a*b\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	f.Add([]byte("domain: d\ndescriptors: [{key: k, descriptors: [{key: j, rate_limit: {unlimited: true}}]}]\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: YEAR, requests_per_unit: 1}\n    caphost: {algorithm: fixed-window}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse("f.yaml", data)
		if err != nil {
			var e *Error
			require.ErrorAs(t, err, &e)
			require.NotEmpty(t, e.Problems)
			require.Nil(t, d)
			return
		}
		require.True(t, utf8.Valid(data))
		require.NotEmpty(t, d.Name())
		require.LessOrEqual(t, len(d.Name()), MaxDomainBytes)
		for _, r := range d.Rules() {
			require.LessOrEqual(t, len(r.Path), MaxDepth)
			for _, e := range r.Path {
				require.NotEmpty(t, e.Key)
				require.False(t, strings.Contains(e.Key, "*"))
				require.LessOrEqual(t, len(e.Key), MaxKeyBytes)
				require.LessOrEqual(t, len(e.Value), MaxValueBytes)
			}
			if x := r.Caphost; x != nil {
				require.False(t, r.Unlimited, "an unlimited rule takes no caphost block")
				require.True(t, x.Algorithm == "" || slices.Contains(Algorithms(), x.Algorithm))
				require.True(t, x.FailureMode == "" || slices.Contains(policy.RateFailureModes(), x.FailureMode))
				if x.PerPodShare != 0 {
					require.Equal(t, policy.FailLocal, x.FailureMode)
					require.True(t, x.PerPodShare > 0 && x.PerPodShare <= 1)
				}
				if r.Unit == Year {
					require.True(t, x.Algorithm == "" || x.Algorithm == policy.RateFixedWindow, "a year rule's algorithm is the fixed window")
				}
				if x.Dedup != nil {
					require.True(t, x.Dedup.Enabled)
					require.GreaterOrEqual(t, x.Dedup.TTL, time.Duration(0))
					require.GreaterOrEqual(t, x.Dedup.MaxEntries, 0)
				}
			}
			if r.Unlimited {
				require.Zero(t, r.Unit)
			} else {
				require.NotZero(t, r.Unit.Duration())
			}
		}
		again, err := Parse("f.yaml", data)
		require.NoError(t, err)
		require.Equal(t, len(d.Rules()), len(again.Rules()))
		c, err := New(d)
		require.NoError(t, err)
		for _, r := range d.Rules() {
			// A rule's own path (patterns taken literally) finds a rule of the
			// same depth: never a panic, never a deeper one.
			if m := c.Match(d.Name(), r.Path); m != nil {
				require.Len(t, m.Path, len(r.Path))
			}
		}
	})
}
