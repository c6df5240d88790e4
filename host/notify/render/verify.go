package render

import (
	"bytes"
	"encoding/csv"
	"errors"
	"html"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/caphost/caphost/abi"
)

// partKind is how the host checks a part's bytes.
type partKind uint8

const (
	kindHeader partKind = iota // one line: a subject, a header value
	kindPlain                  // plain text: parameters shown as they are
	kindHTML                   // parameters must be HTML-escaped
	kindSlack                  // Slack mrkdwn: parameters' < > & must be escaped
	kindCSV                    // RFC 4180 text, formula-neutralised fields
)

// partRule is one part a channel renders.
type partRule struct {
	name, contentType string
	kind              partKind
	optional          bool
}

// Content types the host accepts, exactly as written (the frozen plan
// stores them, and a transport sends them).
const (
	ctPlain = "text/plain; charset=utf-8"
	ctHTML  = "text/html; charset=utf-8"
	ctSlack = "text/x-slack-mrkdwn; charset=utf-8"
	ctCSV   = "text/csv; charset=utf-8"
)

// channelParts is the exact part list of c, in order; nil for a channel
// the host does not know.
func channelParts(c Channel) []partRule {
	switch c {
	case Email:
		return []partRule{{"subject", ctPlain, kindHeader, false}, {"text", ctPlain, kindPlain, false}, {"html", ctHTML, kindHTML, true}}
	case Text:
		return []partRule{{"body", ctPlain, kindPlain, false}}
	case Slack:
		return []partRule{{"text", ctSlack, kindSlack, false}}
	case CSV:
		return []partRule{{"csv", ctCSV, kindCSV, false}}
	}
	return nil
}

// Verify checks a renderer's answer for channel c against the host's rules
// (see Channel and the package documentation) and lim, with the
// parameters the guest was given (for the escaping checks). It never
// changes the output: a violation is an *OutputError and nothing is sent.
// Module and template only label the error.
func Verify(c Channel, params []abi.Attr, parts []abi.MessagePart, lim Limits) error {
	lim = lim.withDefaults()
	rules := channelParts(c)
	if rules == nil {
		return &OutputError{Channel: c, Part: -1, Rule: RuleParts}
	}
	matched, err := matchParts(c, rules, parts)
	if err != nil {
		return err
	}
	total := 0
	for i, p := range parts {
		r := matched[i]
		fail := func(rule OutputRule) error {
			return &OutputError{Channel: c, Part: i, PartName: r.name, Rule: rule}
		}
		total += len(p.Body)
		switch {
		case len(p.Body) == 0:
			return fail(RuleEmptyPart)
		case len(p.Body) > lim.PartBytes:
			return fail(RulePartTooLarge)
		case total > lim.TotalBytes:
			return &OutputError{Channel: c, Part: -1, Rule: RuleTotalTooLarge}
		case r.kind == kindHeader && len(p.Body) > lim.SubjectBytes:
			return fail(RuleSubjectTooLong)
		}
		if rule := checkText(p.Body, r.kind == kindHeader); rule != "" {
			return fail(rule)
		}
		var rule OutputRule
		switch r.kind {
		case kindHTML:
			rule = checkEscaped(p.Body, params, `<>&"`, html.EscapeString)
		case kindSlack:
			rule = checkEscaped(p.Body, params, `<>&`, slackEscape)
		case kindCSV:
			rule = checkCSV(p.Body)
		}
		if rule != "" {
			return fail(rule)
		}
	}
	return nil
}

// matchParts pairs every part with its rule: names and content types
// exactly, in the channel's order, optional parts may be left out.
func matchParts(c Channel, rules []partRule, parts []abi.MessagePart) ([]partRule, error) {
	if len(parts) > len(rules) {
		return nil, &OutputError{Channel: c, Part: -1, Rule: RuleParts}
	}
	matched := make([]partRule, len(parts))
	i := 0
	for _, r := range rules {
		if i < len(parts) && parts[i].Name == r.name && parts[i].ContentType == r.contentType {
			matched[i] = r
			i++
			continue
		}
		if !r.optional {
			return nil, &OutputError{Channel: c, Part: min(i, len(parts)-1), Rule: RuleParts}
		}
	}
	if i != len(parts) {
		return nil, &OutputError{Channel: c, Part: i, Rule: RuleParts}
	}
	return matched, nil
}

// checkText applies the character rules every part shares: valid UTF-8;
// no C0 control but TAB and LF in a body and none at all in a header (CR
// is refused everywhere: transports write their own line endings); no DEL
// or C1 control; no Unicode line or paragraph separator in a header; no
// bidirectional embedding, override or isolate anywhere ("Trojan Source":
// text that displays otherwise than it reads). Guests neutralise these;
// the host refuses what they let through.
func checkText(b []byte, header bool) OutputRule {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return RuleInvalidUTF8
		}
		b = b[n:]
		switch {
		case r == '\r' || r == '\n' || r == 0x85 || r == 0x2028 || r == 0x2029:
			switch {
			case header:
				return RuleLineBreak
			case r == '\r' || r == 0x85:
				return RuleControl
			}
		case r == '\t':
			if header {
				return RuleControl
			}
		case r < 0x20 || (r >= 0x7f && r <= 0x9f):
			return RuleControl
		case (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			return RuleBidi
		}
	}
	return ""
}

// slackReplacer is Slack's escaping of its control characters; a
// Replacer is immutable once built.
var slackReplacer = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func slackEscape(s string) string { return slackReplacer.Replace(s) }

// checkEscaped is the host's backstop for context escaping: a parameter
// value containing one of special must not appear raw in body, and
// neither may any tag-like piece of it ("<" followed by a letter, "/", "!"
// or "?" and the run of letters and digits after it, e.g. "<script" of
// "x<script>y"), which catches a guest that escaped only some characters.
// A one-byte value ("<", "&") and a value whose escaped form contains the
// value itself ("&amp;") cannot be told from the template's own markup
// and are skipped: neither can open a tag. The check is a substring test,
// so a parameter that equals markup the template itself writes (a name
// "<p" in a template using <p>) fails closed. An apostrophe is not
// checked: it is harmless in text and in double-quoted attributes, and
// guests that escape only < > & " are common.
func checkEscaped(body []byte, params []abi.Attr, special string, escape func(string) string) OutputRule {
	for _, p := range params {
		v := p.Value
		if len(v) < 2 || !strings.ContainsAny(v, special) {
			continue
		}
		if !strings.Contains(escape(v), v) && bytes.Contains(body, []byte(v)) {
			return RuleUnescaped
		}
		if !strings.Contains(special, "<") {
			continue
		}
		for i := strings.IndexByte(v, '<'); i >= 0 && i < len(v)-1; {
			j := i + 1
			if c := v[j]; c == '/' || c == '!' || c == '?' || isLetter(c) {
				j++
				for j < len(v) && isAlnum(v[j]) {
					j++
				}
				if bytes.Contains(body, []byte(v[i:j])) {
					return RuleUnescaped
				}
			}
			k := strings.IndexByte(v[i+1:], '<')
			if k < 0 {
				break
			}
			i += 1 + k
		}
	}
	return ""
}

func isLetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isAlnum(c byte) bool  { return isLetter(c) || c >= '0' && c <= '9' }

// checkCSV parses b as RFC 4180 (same field count on every record, no bare
// quotes) and refuses a field a spreadsheet would run as a formula: one
// starting with = + - @ TAB or CR (OWASP's list). Guests neutralise such a
// field by prefixing a single quote.
func checkCSV(b []byte) OutputRule {
	r := csv.NewReader(bytes.NewReader(b))
	r.ReuseRecord = true
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return RuleCSVMalformed
		}
		for _, f := range rec {
			if f != "" && strings.IndexByte("=+-@\t\r", f[0]) >= 0 {
				return RuleCSVFormula
			}
		}
	}
}
