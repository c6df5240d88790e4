package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors/vectorstest"
)

// TestSelfTestVectors checks the vectors `make guests` bundles into this
// guest: the guest answers every one byte for byte, and every recorded
// message is the expected text (written out here by hand, so a wrongly
// recorded answer — an unescaped parameter, a header break in the subject,
// a wrong date — fails).
func TestSelfTestVectors(t *testing.T) {
	f := vectorstest.Load(t, "selftest.json", "renderer", Module())

	const plain, html = "text/plain; charset=utf-8", "text/html; charset=utf-8"
	// now_unix_milli 1795942800000 is 2026-11-29T09:00:00Z.
	want := map[string][]abi.MessagePart{
		"welcome en email: subject on one line, parameters escaped in the HTML part only": {
			{Name: "subject", ContentType: plain, Body: []byte(`Welcome, <b>Ada</b> & "co"  Bcc: x@example.com`)},
			{Name: "text", ContentType: plain, Body: []byte("Hello <b>Ada</b> & \"co\"\r\nBcc: x@example.com,\n\nyour account A-1001 is ready.\n\nSent 2026-11-29\n")},
			{Name: "html", ContentType: html, Body: []byte("<p>Hello &lt;b&gt;Ada&lt;/b&gt; &amp; &#34;co&#34;\r\nBcc: x@example.com,</p>\n" +
				"<p>your account A-1001 is ready.</p>\n<p><small>Sent 2026-11-29</small></p>\n")},
		},
		"welcome de text: German wording and date format, one plain-text part": {
			{Name: "body", ContentType: plain, Body: []byte("Hallo Jörg,\n\nIhr Konto A-1002 ist bereit.\n\nGesendet am 29.11.2026\n")},
		},
		"welcome refuses a missing required parameter": nil,
	}
	require.Len(t, f.Vectors, len(want), "every vector has a hand-written expectation")
	for _, v := range f.Vectors {
		exp, ok := want[v.Name]
		require.True(t, ok, "no expectation for vector %q", v.Name)
		if exp == nil {
			assert.Equal(t, abi.CodeInvalidRequest, v.Status, v.Name)
			assert.Equal(t, `parameter "account" is required`, v.Detail, v.Name)
			continue
		}
		require.Equal(t, abi.CodeOK, v.Status, v.Name)
		assert.Equal(t, exp, v.Response.(*abi.RenderResponse).Parts, v.Name)
	}
}
