package programs

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/runtime/programs/internal/rateref"
)

// TestFixedWindowV3IsV2WithALongerWindow pins what rate-fixed-window-v3
// may differ in from rate-fixed-window-v2: its code is v2's but for the
// window bound, and its manifest entry is v2's but for its identity, the
// window argument's maximum and the TTL's description. So v2 and v3 hosts
// interpret each other's state and dedup records identically.
func TestFixedWindowV3IsV2WithALongerWindow(t *testing.T) {
	c := mustCatalog(t)
	v2, ok := c.Program(fixedWindowV2)
	require.True(t, ok)
	v3, ok := c.Program(fixedWindowV3)
	require.True(t, ok)

	code := func(src string) string { return regexp.MustCompile(`(?m)^--[^\n]*\n`).ReplaceAllString(src, "") }
	const bound2, bound3 = "win <= 2592000000 ", "win <= 31622400000 "
	require.Equal(t, 1, strings.Count(v2.Source(), bound2))
	require.Equal(t, 1, strings.Count(v3.Source(), bound3))
	assert.Equal(t, strings.Replace(code(v2.Source()), bound2, bound3, 1), code(v3.Source()))

	s2, s3 := v2.Spec(), v3.Spec()
	window := func(s ProgramSpec) int64 {
		for _, a := range s.Arguments {
			if a.Name == "windowMillis" {
				return *a.Max
			}
		}
		t.Fatalf("%s has no windowMillis", s.ID)
		return 0
	}
	assert.Equal(t, int64(rateref.MaxWindowMillis), window(s2))
	assert.Equal(t, int64(rateref.MaxFixedWindowV3Millis), window(s3))
	assert.Equal(t, MaxFixedWindowV3.Milliseconds(), window(s3))
	assert.Equal(t, int64(366*24*3600*1000), window(s3))
	for _, s := range []*ProgramSpec{&s2, &s3} {
		s.ID, s.Function, s.Script, s.SHA256, s.SHA1, s.Summary, s.State.TTL = "", "", "", "", "", "", ""
		for i := range s.Arguments {
			if s.Arguments[i].Name == "windowMillis" {
				s.Arguments[i].Max = nil
			}
		}
	}
	assert.Equal(t, s2, s3)
}

// The anchor grammar of the vectors: {T/d*m+n} and {-T%d+n} name a long
// window's end and the time to it.
func TestExpandAnchor(t *testing.T) {
	const anchor = 1_796_000_000_123
	for in, want := range map[string]string{
		"{T}": "1796000000123", "{T+5}": "1796000000128", "{T-250}": "1795999999873",
		"{T/1000}": "1796000000", "{T/1000-1}": "1795999999",
		"{T/31536000000*31536000000+31536000000}": "1797552000000",
		"{-T%31536000000+31536000000}":            "1551999877",
		"f1:0:{T}:r1":                             "f1:0:1796000000123:r1",
	} {
		assert.Equal(t, want, expandAnchor(in, anchor), in)
	}
}
