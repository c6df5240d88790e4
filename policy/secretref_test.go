package policy

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSecretRef(t *testing.T) {
	ok := []struct {
		in   string
		want SecretRef
	}{
		{"secret://env/CACHE_PASS", SecretRef{Source: SecretFromEnv, Name: "CACHE_PASS"}},
		{"secret://cache-runtime@env/CACHE_PASS", SecretRef{User: "cache-runtime", Source: SecretFromEnv, Name: "CACHE_PASS"}},
		{"secret://file//run/secrets/cache-admin", SecretRef{Source: SecretFromFile, Name: "/run/secrets/cache-admin"}},
		{"secret://cache-admin@file//run/secrets/x", SecretRef{User: "cache-admin", Source: SecretFromFile, Name: "/run/secrets/x"}},
		{"secret://file/relative/key", SecretRef{Source: SecretFromFile, Name: "relative/key"}},
		{"secret://file/../secrets/./k", SecretRef{Source: SecretFromFile, Name: "../secrets/k"}},
		{"secret://env/_x1", SecretRef{Source: SecretFromEnv, Name: "_x1"}},
	}
	for _, c := range ok {
		got, err := ParseSecretRef(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
		again, err := ParseSecretRef(got.String())
		require.NoError(t, err)
		assert.Equal(t, got, again, "String round-trips")
	}
	literal := []string{"", "hunter2", "env/CACHE_PASS", "SECRET://env/X", "secret:/env/X", " secret://env/X"}
	for _, in := range literal {
		_, err := ParseSecretRef(in)
		assert.ErrorIs(t, err, ErrSecretLiteral, in)
	}
	malformed := []string{
		"secret://", "secret://env", "secret://env/", "secret://vault/X", "secret://env/1X", "secret://env/A-B",
		"secret://@env/X", "secret://a b@env/X", "secret://file/", "secret://file//", "secret://u@v@env/X",
		"secret://env/" + strings.Repeat("A", MaxSecretEnvBytes+1), "secret://" + strings.Repeat("u", MaxSecretUserBytes+1) + "@env/X",
		"secret://file/a\x00b", "secret://file//.", "secret://file/a/..", "secret://file/.", "secret://file/" + strings.Repeat("a", MaxSecretRefBytes),
	}
	for _, in := range malformed {
		_, err := ParseSecretRef(in)
		assert.ErrorIs(t, err, ErrSecretMalformed, "%q", in)
		if err != nil && len(in) > 12 {
			assert.NotContains(t, err.Error(), in[9:], "the value is never echoed")
		}
	}
}

func FuzzParseSecretRef(f *testing.F) {
	for _, s := range []string{"secret://env/X", "secret://u@file//a/b", "secret://file/../x", "hunter2", "secret://", "secret://@/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseSecretRef(s)
		if err != nil {
			if strings.HasPrefix(s, SecretScheme) {
				require.ErrorIs(t, err, ErrSecretMalformed)
			} else {
				require.ErrorIs(t, err, ErrSecretLiteral)
			}
			return
		}
		require.False(t, ref.IsZero())
		again, err := ParseSecretRef(ref.String())
		require.NoError(t, err, "re-parse of %q", ref.String())
		require.Equal(t, ref, again)
	})
}

func TestSecretNeverPrints(t *testing.T) {
	const material = "s3cr3t-material-value"
	s := NewSecret([]byte(material))
	c := Credential{User: "u", Password: s}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%T"} {
		out := fmt.Sprintf(verb, s) + fmt.Sprintf(verb, c) + fmt.Sprintf(verb, &c) + fmt.Sprintf(verb, []Secret{s})
		assert.NotContains(t, out, material, verb)
		assert.NotContains(t, out, fmt.Sprintf("%x", material), verb)
	}
	assert.Equal(t, "***", s.String())
	assert.Equal(t, "***", s.GoString())
	assert.Equal(t, "***", fmt.Sprintf("%v", s))

	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(h(&buf))
		log.Info("m", "secret", s, "cred", c, slog.Any("any", s), slog.Group("g", "s", s))
		assert.NotContains(t, buf.String(), material, name)
		assert.Contains(t, buf.String(), "***", name)
	}
	assert.Equal(t, material, string(s.Reveal()))
}
