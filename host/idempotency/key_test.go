package idempotency

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseKey(t *testing.T) {
	ok := map[string]string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`: "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`"a"`:                                    "a",
		`"with \"quote\""`:                       `with "quote"`,
		`"k";version=2`:                          "k", // parameters are ignored (RFC 9651)
		` "spaced" `:                             "spaced",
		`"` + strings.Repeat("x", MaxKeyBytes) + `"`: strings.Repeat("x", MaxKeyBytes),
	}
	for raw, want := range ok {
		h := http.Header{}
		h.Set(HeaderKey, raw)
		got, err := ParseKey(h)
		require.NoError(t, err, raw)
		assert.Equal(t, want, got)
	}
	bad := []string{``, `""`, `token`, `42`, `?1`, `"a", "b"`, `"unterminated`, `"é"`, `"a"x`,
		`"` + strings.Repeat("x", MaxKeyBytes+1) + `"`, `:YWJj:`, `"tab	"`}
	for _, raw := range bad {
		h := http.Header{}
		h.Set(HeaderKey, raw)
		_, err := ParseKey(h)
		assert.ErrorIs(t, err, ErrMalformedKey, "%q", raw)
	}
	_, err := ParseKey(http.Header{})
	assert.ErrorIs(t, err, ErrMissingKey)
	two := http.Header{}
	two.Add(HeaderKey, `"a"`)
	two.Add(HeaderKey, `"a"`)
	_, err = ParseKey(two)
	assert.ErrorIs(t, err, ErrMalformedKey, "two field lines")
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"k"`, `"k";p=1`, `token`, `"\\"`, `""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		h := http.Header{HeaderKey: {raw}}
		k, err := ParseKey(h)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformedKey)
			return
		}
		require.NotEmpty(t, k)
		require.LessOrEqual(t, len(k), MaxKeyBytes)
		for i := 0; i < len(k); i++ {
			require.True(t, k[i] >= ' ' && k[i] <= '~', "an sf-string is printable ASCII")
		}
	})
}

func TestFingerprintSeparatesParts(t *testing.T) {
	base := FingerprintOf("POST", "/v1/pay", "a=1", []byte("{}"))
	assert.Equal(t, base, FingerprintOf("POST", "/v1/pay", "a=1", []byte("{}")))
	for name, other := range map[string]Fingerprint{
		"method": FingerprintOf("PUT", "/v1/pay", "a=1", []byte("{}")),
		"path":   FingerprintOf("POST", "/v1/pay2", "a=1", []byte("{}")),
		"query":  FingerprintOf("POST", "/v1/pay", "a=2", []byte("{}")),
		"body":   FingerprintOf("POST", "/v1/pay", "a=1", []byte("{ }")),
		"shift":  FingerprintOf("POST", "/v1/pay?a=1", "", []byte("{}")),
	} {
		assert.NotEqual(t, base, other, name)
	}
	assert.Len(t, base.String(), 64)
}
