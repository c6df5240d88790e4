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
// accepted is ok with a sandbox level its ABI can have, or a bounded key
// and code without one.
func FuzzDecodeConfigured(f *testing.F) {
	for _, s := range []string{`{"ok":true}`, `{"key":"dir","code":"not-a-directory"}`, `{"ok":true,"key":"x"}`,
		`{"ok":false}`, `{"key":"Dir","code":"x"}`,
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_tcp":true}`, `{"ok":true,"landlock_abi":3,"sandbox_tcp":true}`,
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_tcp":true,"sandbox_sockets":true}`,
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_tcp":true,"sandbox_sockets":true,"sandbox_hosts":true,"dial":["hooks.example:443"]}`,
		`{"ok":true,"dial":["[::1]:25","a:1"]}`,
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_tcp":true,"sandbox_sockets":true,"sandbox_paths":true}`,
		`{"ok":true,"sandbox_paths":true}`, `{"ok":true,"sandbox_sockets":true,"sandbox_paths":1}`} {
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
			require.True(t, w.level().valid())
			require.LessOrEqual(t, len(w.Dial), MaxDialTargets)
			for _, d := range w.Dial {
				require.True(t, ValidDialTarget(d))
			}
			return
		}
		require.Empty(t, w.Dial)
		require.True(t, validToken(w.Key, MaxSettingKeyBytes, true))
		require.True(t, ValidCode(w.Code))
		require.Zero(t, w.level())
	})
}

// TestDecodeConfiguredSandbox: the reply's sandbox members are optional
// (an unconfined plugin, or one built before them, omits them), and a
// level claiming more than its ABI restricts is refused.
func TestDecodeConfiguredSandbox(t *testing.T) {
	for doc, want := range map[string]SandboxLevel{
		`{"ok":true}`: {},
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_tcp":true}`:                                                                  {LandlockABI: 7, FS: true, TCP: true},
		`{"ok":true,"landlock_abi":3,"sandbox_fs":true}`:                                                                                     {LandlockABI: 3, FS: true},
		`{"ok":true,"landlock_abi":10,"sandbox_fs":true,"sandbox_tcp":true,"sandbox_udp":true}`:                                              {LandlockABI: 10, FS: true, TCP: true, UDP: true},
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_tcp":true,"sandbox_sockets":true}`:                                           {LandlockABI: 7, FS: true, TCP: true, Sockets: true},
		`{"ok":true,"sandbox_sockets":true}`:                                                                                                 {Sockets: true},
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_tcp":true,"sandbox_sockets":true,"sandbox_hosts":true}`:                      {LandlockABI: 7, FS: true, TCP: true, Sockets: true, Hosts: true},
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_tcp":true,"sandbox_sockets":true,"sandbox_hosts":true,"sandbox_paths":true}`: {LandlockABI: 7, FS: true, TCP: true, Sockets: true, Hosts: true, Paths: true},
		`{"ok":true,"sandbox_sockets":true,"sandbox_paths":true}`:                                                                            {Sockets: true, Paths: true},
	} {
		w, err := decodeConfigured([]byte(doc))
		require.NoError(t, err, doc)
		require.Equal(t, want, w.level(), doc)
		b, err := jsonMarshal(configuredOK(want, nil))
		require.NoError(t, err)
		require.JSONEq(t, doc, string(b), "what the plugin side writes")
	}
	for _, doc := range []string{
		`{"ok":true,"sandbox_fs":true}`,
		`{"ok":true,"landlock_abi":3,"sandbox_tcp":true}`,
		`{"ok":true,"landlock_abi":7,"sandbox_udp":true}`,
		`{"ok":true,"landlock_abi":256}`,
		`{"ok":true,"landlock_abi":-1}`,
		`{"ok":true,"landlock_abi":7.5}`,
		`{"ok":true,"landlock_abi":"7"}`,
		`{"key":"dir","code":"x","landlock_abi":7}`,
		`{"key":"dir","code":"x","sandbox_sockets":true}`,
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_fs":true}`,
		`{"ok":true,"landlock_abi":7,"sandbox_hosts":true}`,
		`{"ok":true,"landlock_abi":7,"sandbox_fs":true,"sandbox_paths":true}`,
		`{"ok":true,"sandbox_sockets":true,"sandbox_paths":1}`,
		`{"ok":true,"sandbox_sockets":true,"sandbox_paths":true,"sandbox_paths":true}`,
		`{"ok":true,"sandbox_sockets":true,"sandbox_path":true}`,
		`{"ok":true,"sandbox_sockets":true,"Sandbox_Paths":true}`,
		`{"key":"dir","code":"x","sandbox_paths":true}`,
		`{"ok":true,"dial":["example.com"]}`,
		`{"ok":true,"dial":["example.com:443","example.com:443"]}`,
		`{"ok":true,"dial":["a:1","b:1","c:1","d:1","e:1","f:1","g:1","h:1","i:1"]}`,
		`{"ok":true,"dial":["example.com:0443"]}`,
		`{"ok":true,"dial":["exa mple.com:443"]}`,
		`{"ok":true,"dial":[null]}`,
		`{"key":"dir","code":"x","dial":["example.com:443"]}`,
	} {
		_, err := decodeConfigured([]byte(doc))
		require.ErrorIs(t, err, ErrInvalidReply, doc)
	}
	w, err := decodeConfigured([]byte(`{"ok":true,"dial":["example.com:443","[::1]:25"]}`))
	require.NoError(t, err)
	require.Equal(t, []string{"example.com:443", "[::1]:25"}, w.Dial)
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

// TestSandboxLevelLabels: Restricted names what is restricted in its
// documented order (a closed set of metric label values), and a level
// claiming hidden paths without the seccomp filter that keeps them
// hidden is not one a plugin can have.
func TestSandboxLevelLabels(t *testing.T) {
	require.Equal(t, "none", SandboxLevel{}.Restricted())
	require.Equal(t, "fs,tcp,udp,sockets,hosts,paths",
		SandboxLevel{LandlockABI: 10, FS: true, TCP: true, UDP: true, Sockets: true, Hosts: true, Paths: true}.Restricted())
	require.Equal(t, "fs,tcp,sockets,paths", SandboxLevel{LandlockABI: 6, FS: true, TCP: true, Sockets: true, Paths: true}.Restricted())
	require.Equal(t, "landlock-v6:fs,tcp,sockets,paths", SandboxLevel{LandlockABI: 6, FS: true, TCP: true, Sockets: true, Paths: true}.String())
	require.True(t, SandboxLevel{Sockets: true, Paths: true}.valid())
	require.False(t, SandboxLevel{Paths: true}.valid())
	require.False(t, SandboxLevel{LandlockABI: 6, FS: true, TCP: true, Paths: true}.valid())
}
