package render

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileValues are the parameter values every channel is rendered with.
var hostileValues = []struct{ name, value string }{
	{"script", `<script>alert("x")</script>`},
	{"attribute breakout", `"><img src=x onerror=alert(1)>`},
	{"crlf header injection", "Ada\r\nBcc: victim@example.com"},
	{"formula", `=cmd|' /C calc'!A0`},
	{"bidi override", "Ada \u202egnp.exe"},
	{"slack mention", "<!channel> <https://evil.example|bank>"},
	{"nul", "Ada\x00"},
}

// goldenCase is one rendering of testdata/golden/hostile.json.
type goldenCase struct {
	Name     string       `json:"name"`
	Template string       `json:"template"`
	Locale   string       `json:"locale"`
	Channel  Channel      `json:"channel"`
	Params   []Param      `json:"params"`
	Error    string       `json:"error,omitempty"`
	Parts    []goldenPart `json:"parts,omitempty"`
}

type goldenPart struct {
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Body        string `json:"body"`
}

// TestHostileParamsGolden renders every hostile value in every parameter
// position of the reference templates, on every channel, and compares
// with testdata/golden/hostile.json (rewrite with -update, then read the
// diff). Independently of the file, it asserts what must hold of any
// accepted output.
func TestHostileParamsGolden(t *testing.T) {
	r, _ := newRenderer(t, Options{Modules: []string{"renderer"}})
	ctx := context.Background()
	var got []goldenCase
	targets := []struct {
		template string
		locale   string
		channel  Channel
		params   []string
	}{
		{"welcome", "en", Email, []string{"name", "account"}},
		{"welcome", "de", Text, []string{"name", "account"}},
		{"welcome", "en", Slack, []string{"name", "account"}},
		{"export-row", "en", CSV, []string{"name", "account", "note"}},
		{"export-row", "de", Text, []string{"name", "account", "note"}},
	}
	for _, tg := range targets {
		for _, hv := range hostileValues {
			params := []Param{String(tg.params[0], hv.value)}
			for _, p := range tg.params[1:] {
				params = append(params, String(p, "A-1"))
			}
			c := goldenCase{Name: tg.template + " " + string(tg.channel) + ": " + hv.name, Template: tg.template,
				Locale: tg.locale, Channel: tg.channel, Params: params}
			res, err := r.Render(ctx, Request{Template: tg.template, Version: 1, Locale: tg.locale, Channel: tg.channel, Params: params})
			if err != nil {
				c.Error = err.Error()
				assert.NotContains(t, c.Error, hv.value, c.Name)
			} else {
				for _, p := range res.Parts {
					c.Parts = append(c.Parts, goldenPart{p.Name, p.ContentType, string(p.Body)})
				}
				checkInvariants(t, c.Name, res)
			}
			got = append(got, c)
		}
	}
	path := filepath.Join("testdata", "golden", "hostile.json")
	if *update {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // the file is read by people
		enc.SetIndent("", "  ")
		require.NoError(t, enc.Encode(got))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var want []goldenCase
	require.NoError(t, json.Unmarshal(b, &want))
	assert.Equal(t, want, got)
}

// checkInvariants asserts what holds of every accepted output whatever
// the golden file says.
func checkInvariants(t *testing.T, name string, res *Result) {
	t.Helper()
	for _, p := range res.Parts {
		body := string(p.Body)
		assert.NotContains(t, body, "\r", "%s: CR in %s", name, p.Name)
		assert.NotContains(t, body, "\x00", "%s: NUL in %s", name, p.Name)
		assert.NotContains(t, body, "\u202e", "%s: bidi override in %s", name, p.Name)
		switch p.Name {
		case "subject":
			assert.NotContains(t, body, "\n", "%s: line break in the subject", name)
		case "html":
			assert.NotContains(t, body, "<script", name)
			assert.NotContains(t, body, "<img", name)
		}
		if res.Channel == Slack {
			assert.NotContains(t, body, "<!channel>", name)
			assert.NotContains(t, body, "<https:", name)
		}
		if res.Channel == CSV {
			for _, line := range strings.Split(body, "\n") {
				for _, f := range strings.Split(line, ",") {
					f = strings.TrimPrefix(f, `"`)
					if f != "" {
						assert.NotContains(t, "=+-@", f[:1], "%s: formula field %q", name, f)
					}
				}
			}
		}
	}
}
