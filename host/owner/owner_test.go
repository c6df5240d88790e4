package owner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewIsRandomAndParses(t *testing.T) {
	a, b := New(), New()
	assert.NotEqual(t, a.Reveal(), b.Reveal())
	assert.Len(t, a.Reveal(), 2*Bytes)
	p, err := Parse(a.Reveal())
	require.NoError(t, err)
	assert.True(t, a.Equal(p))
	assert.False(t, a.Equal(b))
	assert.False(t, a.IsZero())
	assert.True(t, Token{}.IsZero())
}

func TestParseRejectsAnythingElse(t *testing.T) {
	good := New().Reveal()
	for _, bad := range []string{"", good[:31], good + "0", strings.ToUpper(good), " " + good[1:], good[:31] + "g", good[:31] + "\x00"} {
		_, err := Parse(bad)
		assert.ErrorIs(t, err, ErrMalformed, "%q", bad)
	}
}

// TestRedaction: no formatting path prints the token.
func TestRedaction(t *testing.T) {
	tok := New()
	secret := tok.Reveal()
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "token", tok)
	js, err := json.Marshal(struct{ T Token }{tok})
	require.NoError(t, err)
	type holder struct {
		hidden Token
		op     string
	}
	h := holder{tok, "op"}
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s %q %x", tok, tok, tok, tok, tok, tok),
		fmt.Sprintf("%v", struct{ T Token }{tok}), logged.String(), string(js),
		fmt.Sprintf("%v %+v %#v", h, h, &h)} {
		assert.NotContains(t, s, secret)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(New().Reveal())
	f.Add("0123456789abcdef0123456789abcdeF")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			require.True(t, tok.IsZero())
			return
		}
		require.Equal(t, s, tok.Reveal(), "a parsed token is the text it came from")
	})
}

func ExampleNew() {
	tok := New()
	fmt.Println(tok, len(tok.Reveal()))
	// Output: owner.Token(***) 32
}

func TestAttempt(t *testing.T) {
	a, err := NewAttempt("op-1")
	require.NoError(t, err)
	assert.False(t, a.IsZero())
	assert.Equal(t, "op-1", a.OperationID())
	b, err := ResumeAttempt(a.Owner(), "op-1")
	require.NoError(t, err)
	assert.True(t, a.Owner().Equal(b.Owner()))
	assert.Equal(t, a.OperationID(), b.OperationID())
	for _, op := range []string{"", strings.Repeat("x", MaxOperationIDBytes+1), "\xff"} {
		_, err := NewAttempt(op)
		assert.ErrorIs(t, err, ErrInvalidAttempt, "%q", op)
	}
	_, err = ResumeAttempt(Token{}, "op")
	assert.ErrorIs(t, err, ErrInvalidAttempt)
	assert.True(t, Attempt{}.IsZero())
	assert.NotContains(t, fmt.Sprintf("%v %+v", a, a), a.Owner().Reveal())
}
