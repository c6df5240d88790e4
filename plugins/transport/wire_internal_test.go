package transport

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeConfigured: the plugin's Configure reply is untrusted like any
// other reply: never a panic, every refusal ErrInvalidReply, and what is
// accepted is ok, or a bounded key and code.
func FuzzDecodeConfigured(f *testing.F) {
	for _, s := range []string{`{"ok":true}`, `{"key":"dir","code":"not-a-directory"}`, `{"ok":true,"key":"x"}`,
		`{"ok":false}`, `{"key":"Dir","code":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := decodeConfigured(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidReply)
			return
		}
		if w.OK {
			require.Empty(t, w.Key+w.Code)
			return
		}
		require.True(t, validToken(w.Key, MaxSettingKeyBytes, true))
		require.True(t, ValidCode(w.Code))
	})
}

// FuzzLogBridge: whatever a plugin writes to stderr, the host logs at
// most one bounded line per write, valid UTF-8, without the plugin's
// sensitive-looking attributes.
func FuzzLogBridge(f *testing.F) {
	for _, s := range []string{
		`{"@level":"info","@message":"plugin started","@module":"plugin","path":"/x","pid":7}`,
		`{"@level":"error","@message":"x","secret":"hunter2","to":"ada@example.com"}`,
		"not json \x00\xff",
		`{"@message":"` + strings.Repeat("é", 300) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		w := &logWriter{log: slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})), name: "t"}
		n, err := w.Write(b)
		require.NoError(t, err)
		require.Equal(t, len(b), n)
		line := out.String()
		require.Equal(t, 1, strings.Count(line, "\n"))
		require.True(t, utf8.ValidString(line))
		// message ≤ 256 bytes and ≤ 8 attributes of ≤ 128 bytes, each
		// escaped at most 6× by JSON, plus the envelope.
		require.Less(t, len(line), 6*(maxLogMessageBytes+maxLogAttrs*(maxLogValueBytes+48))+512)
		require.NotContains(t, line, `"plugin_secret"`)
		require.NotContains(t, line, `"plugin_to"`)
	})
}
