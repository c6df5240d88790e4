package transport_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins/transport"
)

func TestOutcomeStrings(t *testing.T) {
	assert.Equal(t, "ACCEPTED", transport.Accepted.String())
	assert.Equal(t, "REJECTED_DEFINITE", transport.RejectedDefinite.String())
	assert.Equal(t, "INDETERMINATE", transport.Indeterminate.String())
	assert.Equal(t, "OUTCOME(0)", transport.Outcome(0).String())
	assert.False(t, transport.Outcome(4).Valid())
}

func TestRecipientIsRedacted(t *testing.T) {
	r, err := transport.NewRecipient("ada@example.com")
	require.NoError(t, err)
	assert.Equal(t, "ada@example.com", r.Value())
	for _, s := range []string{fmt.Sprint(r), fmt.Sprintf("%v %+v %#v %s", r, r, r, r), r.LogValue().String()} {
		assert.NotContains(t, s, "ada")
	}
	var b strings.Builder
	slog.New(slog.NewJSONHandler(&b, nil)).Info("x", "to", r, "msg", transport.Message{Recipient: r})
	assert.NotContains(t, b.String(), "ada@")

	for _, bad := range []string{"", strings.Repeat("a", transport.MaxRecipientBytes+1), "a\nb", "a\x00b", "\xff", "a\u0085b"} {
		_, err := transport.NewRecipient(bad)
		assert.ErrorIs(t, err, transport.ErrInvalidRecipient, "%q", bad)
	}
}

func TestValidateMessage(t *testing.T) {
	require.NoError(t, transport.ValidateMessage(message(t, "a.b_c:d-1")))
	for name, mod := range map[string]func(*transport.Message){
		"id slash":     func(m *transport.Message) { m.IntentID = "a/b" },
		"id dot start": func(m *transport.Message) { m.IntentID = ".hidden" },
		"id long":      func(m *transport.Message) { m.IntentID = strings.Repeat("a", transport.MaxIntentIDBytes+1) },
		"attempt 0":    func(m *transport.Message) { m.Attempt = 0 },
		"channel":      func(m *transport.Message) { m.Channel = "E-mail" },
		"recipient":    func(m *transport.Message) { m.Recipient = transport.Recipient{} },
		"no parts":     func(m *transport.Message) { m.Parts = nil },
		"dup part":     func(m *transport.Message) { m.Parts[1].Name = m.Parts[0].Name },
		"ctype crlf":   func(m *transport.Message) { m.Parts[0].ContentType = "text/plain\r\nX: y" },
		"too big":      func(m *transport.Message) { m.Parts[0].Body = make([]byte, transport.MaxMessageBytes+1) },
	} {
		m := message(t, "intent")
		mod(&m)
		assert.ErrorIs(t, transport.ValidateMessage(m), transport.ErrInvalidMessage, name)
	}
}

func TestDecodeReceipt(t *testing.T) {
	r, err := transport.DecodeReceipt([]byte(`{"outcome":"REJECTED_DEFINITE","code":"http-429","retry_after_ms":7000}`))
	require.NoError(t, err)
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-429", RetryAfter: 7 * time.Second}, r)
	r, err = transport.DecodeReceipt([]byte(`{"outcome":"ACCEPTED","code":"http-200","provider_ref":"req-1"}`))
	require.NoError(t, err)
	assert.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "http-200", ProviderRef: "req-1"}, r)
	for _, bad := range []string{
		`{"outcome":"accepted","code":"x"}`,
		`{"outcome":"ACCEPTED"}`,
		`{"outcome":"ACCEPTED","code":"HTTP-200"}`,
		`{"outcome":"ACCEPTED","code":"x","code":"y"}`,
		`{"outcome":"ACCEPTED","code":"x","extra":1}`,
		`{"outcome":"ACCEPTED","code":"x","provider_ref":null}`,
		`{"outcome":"ACCEPTED","code":"x","retry_after_ms":5}`,
		`{"outcome":"REJECTED_DEFINITE","code":"x","retry_after_ms":-1}`,
		`{"outcome":"ACCEPTED","code":"x","provider_ref":"a\nb"}`,
		`{"outcome":"ACCEPTED","code":"x"} {}`,
		`{"Outcome":"ACCEPTED","code":"x"}`,
		"{\"outcome\":\"ACCEPTED\",\"code\":\"x\xff\"}",
		`{"outcome":"ACCEPTED","code":"` + strings.Repeat("a", transport.MaxCodeBytes+1) + `"}`,
		`{"outcome":"ACCEPTED","code":"x","provider_ref":"` + strings.Repeat("a", transport.MaxReplyBytes) + `"}`,
	} {
		_, err := transport.DecodeReceipt([]byte(bad))
		assert.ErrorIs(t, err, transport.ErrInvalidReply, bad)
	}
}

// FuzzDecodeReceipt: a plugin reply never panics the host, every refusal
// is ErrInvalidReply, and what is accepted is in the closed set, bounded,
// and would pass ValidateReceipt — a malformed reply can never become
// Accepted.
func FuzzDecodeReceipt(f *testing.F) {
	for _, s := range []string{
		`{"outcome":"ACCEPTED","code":"http-200","provider_ref":"req-1"}`,
		`{"outcome":"REJECTED_DEFINITE","code":"http-503","retry_after_ms":1000}`,
		`{"outcome":"INDETERMINATE","code":"timeout-after-send"}`,
		`{"outcome":"ACCEPTED","code":"x","code":"y"}`,
		`{"outcome":"ACCEPTED","code":"x","retry_after_ms":5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := transport.DecodeReceipt(b)
		if err != nil {
			require.ErrorIs(t, err, transport.ErrInvalidReply)
			require.Equal(t, transport.Receipt{}, r)
			return
		}
		require.True(t, r.Outcome.Valid())
		require.NoError(t, transport.ValidateReceipt(r))
		require.True(t, transport.ValidCode(r.Code))
		require.LessOrEqual(t, len(r.ProviderRef), transport.MaxProviderRefBytes)
		require.True(t, utf8.ValidString(r.ProviderRef))
		if r.RetryAfter != 0 {
			require.Equal(t, transport.RejectedDefinite, r.Outcome)
		}
		require.LessOrEqual(t, len(b), transport.MaxReplyBytes)
	})
}
