package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func render(t *testing.T, req *abi.RenderRequest) (map[string]string, error) {
	t.Helper()
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	body, err := abi.ParseFrame(d.Handle(abi.ExportRender, req.AppendTo(nil), nil))
	if err != nil {
		return nil, err
	}
	var resp abi.RenderResponse
	require.NoError(t, resp.Unmarshal(body))
	out := map[string]string{}
	for _, p := range resp.Parts {
		out[p.Name] = p.ContentType + "|" + string(p.Body)
	}
	return out, nil
}

func TestRender(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC).UnixMilli()
	params := []abi.Attr{{Name: "name", Value: `<b>Ada</b> & "co"` + "\r\nBcc: x@evil"}, {Name: "account", Value: "A-1"}}
	parts, err := render(t, &abi.RenderRequest{Template: "welcome", Version: 1, Locale: "en", Channel: "email", Params: params, NowUnixMilli: now})
	require.NoError(t, err)
	assert.Equal(t, "text/plain; charset=utf-8|Welcome, <b>Ada</b> & \"co\" Bcc: x@evil", parts["subject"])
	assert.Contains(t, parts["html"], "<p>Hello &lt;b&gt;Ada&lt;/b&gt; &amp; &#34;co&#34;")
	assert.NotContains(t, parts["html"], "<b>")
	assert.Contains(t, parts["html"], "Sent 2026-11-30")
	assert.Contains(t, parts["text"], "Hello <b>Ada</b>")

	parts, err = render(t, &abi.RenderRequest{Template: "welcome", Version: 1, Locale: "de", Channel: "text", Params: params, NowUnixMilli: now})
	require.NoError(t, err)
	require.Len(t, parts, 1)
	assert.Contains(t, parts["body"], "Ihr Konto A-1 ist bereit.")
	assert.Contains(t, parts["body"], "Gesendet am 30.11.2026")

	_, err = render(t, &abi.RenderRequest{Template: "welcome", Version: 1, Locale: "fr", Channel: "text", Params: params})
	require.ErrorIs(t, err, abi.CodeNotFound)
	_, err = render(t, &abi.RenderRequest{Template: "welcome", Version: 1, Locale: "en", Channel: "text"})
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
}
