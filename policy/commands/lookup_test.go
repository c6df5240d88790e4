package commands

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The exact-token index is only a shortcut: every spelling of every entry
// must resolve to the same entry whether it hits the index (lower/upper
// case strings) or the folding path ([]byte, mixed case).
func TestLookupIndexAgreesWithFolding(t *testing.T) {
	c, err := Default()
	require.NoError(t, err)
	mixed := func(s string) string {
		b := []byte(strings.ToLower(s))
		for i := 0; i < len(b); i += 2 {
			if 'a' <= b[i] && b[i] <= 'z' {
				b[i] -= 'a' - 'A'
			}
		}
		return string(b)
	}
	for _, n := range c.Names() {
		parent, sub, hasSub := strings.Cut(n, "|")
		want, ok := c.Entry(n)
		require.True(t, ok)
		for _, spell := range []func(string) any{
			func(s string) any { return s },
			func(s string) any { return strings.ToLower(s) },
			func(s string) any { return mixed(s) },
			func(s string) any { return []byte(strings.ToLower(s)) },
		} {
			args := []any{spell(parent)}
			if hasSub {
				args = append(args, spell(sub))
			}
			got, ok := c.Lookup(append(args, "k"))
			require.True(t, ok, "%v", args)
			require.Equal(t, want, *got, "%v", args)
		}
		if hasSub {
			// A parent alone is never an entry, on either path.
			_, ok := c.Lookup([]any{strings.ToLower(parent)})
			assert.False(t, ok, parent)
			_, ok = c.Lookup([]any{parent})
			assert.False(t, ok, parent)
		}
	}
	for _, args := range [][]any{{"config|get"}, {"CONFIG|GET"}, {"get "}, {" get"}, {"gett"}} {
		_, ok := c.Lookup(args)
		assert.False(t, ok, "%v", args)
	}
}

// The hot path (go-redis' lower-case "get") must not allocate either.
func TestLookupPlainCommandDoesNotAllocate(t *testing.T) {
	c, err := Default()
	require.NoError(t, err)
	args := []any{"get", "ca:demo:test:k"}
	var name string
	allocs := testing.AllocsPerRun(100, func() {
		e, _ := c.Lookup(args)
		name = e.Name
	})
	assert.Zero(t, allocs)
	assert.Equal(t, "GET", name)
}

func BenchmarkLookupGet(b *testing.B) {
	c, err := Default()
	require.NoError(b, err)
	args := []any{"get", "ca:demo:test:k"}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Lookup(args); !ok {
			b.Fatal("GET unknown")
		}
	}
}
