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
		"welcome en email: subject on one line, CRLF made LF, parameters escaped in the HTML part only": {
			{Name: "subject", ContentType: plain, Body: []byte(`Welcome, <b>Ada</b> & "co" Bcc: x@example.com`)},
			{Name: "text", ContentType: plain, Body: []byte("Hello <b>Ada</b> & \"co\"\nBcc: x@example.com,\n\nyour account A-1001 is ready.\n\nSent 2026-11-29\n")},
			{Name: "html", ContentType: html, Body: []byte("<p>Hello &lt;b&gt;Ada&lt;/b&gt; &amp; &#34;co&#34;\nBcc: x@example.com,</p>\n" +
				"<p>your account A-1001 is ready.</p>\n<p><small>Sent 2026-11-29</small></p>\n")},
		},
		"welcome de text: German wording and date format, one plain-text part": {
			{Name: "body", ContentType: plain, Body: []byte("Hallo Jörg,\n\nIhr Konto A-1002 ist bereit.\n\nGesendet am 29.11.2026\n")},
		},
		"welcome en slack: a mention and a link in a parameter are escaped, a bidi override removed": {
			{Name: "text", ContentType: "text/x-slack-mrkdwn; charset=utf-8",
				Body: []byte("*Hello &lt;!channel&gt; Ada,*\nyour account &lt;https://evil.example|A-1&gt; is ready.\n_Sent 2026-11-29_\n")},
		},
		"export-row en csv: formula-like fields get a leading quote": {
			{Name: "csv", ContentType: "text/csv; charset=utf-8",
				Body: []byte("Name,Account,Note,Exported\n'=cmd|' /C calc'!A0,'@SUM(A1),\"'-1+1, \"\"quoted\"\"\",2026-11-29\n")},
		},
		"export-row de text: a formula is plain text on the text channel": {
			{Name: "body", ContentType: plain, Body: []byte("Name: =cmd|' /C calc'!A0\nKonto: A-1003\nNotiz: ok\nExportiert: 29.11.2026\n")},
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
