package render

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/caphost/caphost/abi"
)

func email(subject, text, html string) []abi.MessagePart {
	parts := []abi.MessagePart{{Name: "subject", ContentType: ctPlain, Body: []byte(subject)}, {Name: "text", ContentType: ctPlain, Body: []byte(text)}}
	if html != "" {
		parts = append(parts, abi.MessagePart{Name: "html", ContentType: ctHTML, Body: []byte(html)})
	}
	return parts
}

func one(ch Channel, body string) []abi.MessagePart {
	r := channelParts(ch)[0]
	return []abi.MessagePart{{Name: r.name, ContentType: r.contentType, Body: []byte(body)}}
}

// TestVerifyEdges pins the rules' edges, including the documented limits
// of the escaping backstop.
func TestVerifyEdges(t *testing.T) {
	p := func(v string) []abi.Attr { return []abi.Attr{{Name: "v", Value: v}} }
	for name, c := range map[string]struct {
		ch     Channel
		params []abi.Attr
		parts  []abi.MessagePart
		rule   OutputRule // "" accepts
	}{
		"html part is optional":                {Email, nil, email("s", "t\n", ""), ""},
		"subject at the bound":                 {Email, nil, email(strings.Repeat("s", 250), "t", ""), ""},
		"subject over the bound":               {Email, nil, email(strings.Repeat("s", 251), "t", ""), RuleSubjectTooLong},
		"part at the bound":                    {Text, nil, one(Text, strings.Repeat("x", 64<<10)), ""},
		"part over the bound":                  {Text, nil, one(Text, strings.Repeat("x", 64<<10+1)), RulePartTooLarge},
		"tab and LF in a body":                 {Text, nil, one(Text, "a\tb\nc"), ""},
		"U+2028 in a body":                     {Text, nil, one(Text, "a\u2028b"), ""},
		"LRM and RLM are not overrides":        {Email, nil, email("a\u200eb\u200f", "t", ""), ""},
		"one-byte value cannot be checked":     {Email, p("<"), email("s", "t", "<p>a < b</p>"), ""},
		"entity-looking value is skipped":      {Email, p("&amp;"), email("s", "t", "<p>&amp;</p>"), ""},
		"escaped value passes":                 {Email, p("<b>x</b>"), email("s", "t", "<p>&lt;b&gt;x&lt;/b&gt;</p>"), ""},
		"value equal to template markup fails": {Email, p("<p"), email("s", "t", "<p>&lt;p</p>"), RuleUnescaped},
		"apostrophe is not checked":            {Email, p("O'Brien & co"), email("s", "t", "<p>O'Brien &amp; co</p>"), ""},
		"ampersand value shown raw":            {Email, p("AT&T"), email("s", "t", "<p>AT&T</p>"), RuleUnescaped},
		"quote in slack is not special":        {Slack, p(`say "hi"`), one(Slack, `say "hi"`), ""},
		"defused formula passes":               {CSV, nil, one(CSV, "a,b\n'=1,'+2\n"), ""},
		"quoted field with a line break":       {CSV, nil, one(CSV, "a,\"b\nc\"\n"), ""},
		"formula behind a quote":               {CSV, nil, one(CSV, "a,\"=1\"\n"), RuleCSVFormula},
		"tab-led field":                        {CSV, nil, one(CSV, "a,\"\tb\"\n"), RuleCSVFormula},
		"text part for csv":                    {CSV, nil, one(Text, "a\n"), RuleParts},
		"no parts":                             {Text, nil, nil, RuleParts},
	} {
		err := Verify(c.ch, c.params, c.parts, Limits{})
		if c.rule == "" {
			assert.NoError(t, err, name)
			continue
		}
		var oe *OutputError
		if assert.ErrorAs(t, err, &oe, name) {
			assert.Equal(t, c.rule, oe.Rule, name)
		}
	}
}
