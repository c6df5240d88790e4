package strict

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

func TestReader(t *testing.T) {
	var r Reader
	n, ok := r.Int("a", "42") // environment overrides arrive as strings
	assert.True(t, ok)
	assert.Equal(t, 42, n)
	_, ok = r.Int("b", int64(1)<<40) // over 32 bits
	assert.False(t, ok)
	i, ok := r.Int64In("c", 7.0, 1, 10)
	assert.True(t, ok)
	assert.Equal(t, int64(7), i)
	_, ok = r.Int64In("d", 11, 1, 10)
	assert.False(t, ok)
	d, ok := r.Duration("e", "250ms")
	assert.True(t, ok)
	assert.Equal(t, 250*time.Millisecond, d)
	_, ok = r.Duration("f", 5) // a bare number's unit would be a guess
	assert.False(t, ok)
	l, ok := r.StrList("g", "x, y,,z")
	assert.True(t, ok)
	assert.Equal(t, []string{"x", "y", "z"}, l)
	_, ok = r.StrList("h", []any{"x", 1, true})
	assert.False(t, ok)
	b, ok := r.Bool("i", "TRUE")
	assert.True(t, ok && b)
	_, ok = r.Str("j", nil) // absent: no problem
	assert.False(t, ok)
	_, ok = r.Str("k", "secret-looking-value")
	assert.True(t, ok)
	_, ok = r.Float("l", "NaN")
	assert.False(t, ok)
	r.Known("m", map[string]any{"ok": 1, "zz": 2, "aa": 3}, "ok")

	paths := map[string]policy.Rule{}
	for _, p := range r.Problems {
		paths[p.Path] = p.Rule
	}
	assert.Equal(t, map[string]policy.Rule{
		"b": policy.RuleType, "d": policy.RuleType, "f": policy.RuleType, "h.1": policy.RuleType, "h.2": policy.RuleType,
		"l": policy.RuleType, "m.aa": policy.RuleUnknownKey, "m.zz": policy.RuleUnknownKey,
	}, paths)
}

func TestMessagesNeverEchoValues(t *testing.T) {
	var r Reader
	_, _ = r.Int("p", "hunter2-password")
	_, _ = r.Duration("q", "hunter2-password")
	require.Len(t, r.Problems, 2)
	for _, p := range r.Problems {
		assert.NotContains(t, p.Message, "hunter2")
	}
}

func TestKnownBoundsEchoedKey(t *testing.T) {
	var r Reader
	long := string(make([]byte, 200))
	r.Known("x", map[string]any{long: 1})
	require.Len(t, r.Problems, 1)
	assert.LessOrEqual(t, len(r.Problems[0].Path), len("x.")+maxKeyEcho+3)
}

func TestSecret(t *testing.T) {
	var r Reader
	s, ok := r.Secret("a", policy.NewSecret([]byte("material")))
	assert.True(t, ok)
	assert.Equal(t, []byte("material"), s.Reveal())
	_, ok = r.Secret("b", nil)
	assert.False(t, ok)
	_, ok = r.Secret("c", "plain-text-password")
	assert.False(t, ok)
	_, ok = r.Secret("d", 42)
	assert.False(t, ok)
	require.Len(t, r.Problems, 2)
	assert.Equal(t, policy.RuleSecretLiteral, r.Problems[0].Rule)
	assert.NotContains(t, r.Problems[0].Message, "plain-text-password")
	assert.Equal(t, policy.RuleType, r.Problems[1].Rule)
}
