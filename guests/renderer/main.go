// Command renderer is the reference renderer guest. It declares two
// templates:
//
//   - "welcome" v1 in English and German for the email channel (subject,
//     text/plain and text/html parts, parameters HTML-escaped in the HTML
//     part), the text channel (one plain-text part) and the slack channel
//     (one mrkdwn part, parameters' < > & escaped);
//   - "export-row" v1 in English and German for the csv channel (a header
//     and one record, every field that a spreadsheet would run as a
//     formula prefixed with a single quote) and the text channel.
//
// Whatever the channel, parameter values are neutralised before they are
// placed: bidirectional embeddings, overrides and isolates are removed,
// CR and CRLF become LF, other control characters are removed, and the
// subject is kept on one line. The host verifies all of it again
// (host/notify/render); this guest is what passes. Rendering is pure:
// the host passes now and picks the locale.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o renderer.wasm ./guests/renderer
package main

import (
	"bytes"
	"encoding/csv"
	"html"
	"strings"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// c-shared modules have no main entry; the host runs _initialize, which runs
// init, so init is where a guest registers.
func init() { guest.Register(Module()) }

func main() {}

type texts struct{ subject, greeting, body, sent string }

var welcome = map[string]texts{
	"en": {"Welcome, {name}", "Hello {name},", "your account {account} is ready.", "Sent {date}"},
	"de": {"Willkommen, {name}", "Hallo {name},", "Ihr Konto {account} ist bereit.", "Gesendet am {date}"},
}

var exportHeader = map[string][]string{
	"en": {"Name", "Account", "Note", "Exported"},
	"de": {"Name", "Konto", "Notiz", "Exportiert"},
}

// Module returns the guest's declarations and handlers.
func Module() *guest.Module {
	return &guest.Module{Name: "renderer", Renderer: &guest.Renderer{
		Templates: []abi.TemplateDecl{
			{ID: "welcome", Version: 1, Locales: []string{"en", "de"},
				Channels: []string{"email", "text", "slack"}, Params: []string{"name", "account"},
				ParamSpecs: []abi.ParamSpec{{Name: "name", Type: abi.ParamText, MaxBytes: 128}, {Name: "account", Type: abi.ParamText, MaxBytes: 32}}},
			{ID: "export-row", Version: 1, Locales: []string{"en", "de"},
				Channels: []string{"csv", "text"}, Params: []string{"name", "account", "note"},
				ParamSpecs: []abi.ParamSpec{{Name: "name", Type: abi.ParamText, MaxBytes: 128}, {Name: "account", Type: abi.ParamText, MaxBytes: 32},
					{Name: "note", Type: abi.ParamText, MaxBytes: 256}}},
		},
		Render: Render,
	}}
}

const (
	plainType = "text/plain; charset=utf-8"
	htmlType  = "text/html; charset=utf-8"
	slackType = "text/x-slack-mrkdwn; charset=utf-8"
	csvType   = "text/csv; charset=utf-8"
)

// Render renders a declared template; the SDK has already checked the id,
// version, locale and channel.
func Render(req *abi.RenderRequest) ([]abi.MessagePart, error) {
	params := map[string]string{}
	for _, p := range req.Params {
		params[p.Name] = neutralise(p.Value)
	}
	for _, need := range []string{"name", "account"} {
		if params[need] == "" {
			return nil, guest.Errorf(abi.CodeInvalidRequest, "parameter %q is required", need)
		}
	}
	layout := "2006-01-02"
	if req.Locale == "de" {
		layout = "02.01.2006"
	}
	params["date"] = time.UnixMilli(req.NowUnixMilli).UTC().Format(layout)
	if req.Template == "export-row" {
		return exportRow(req, params)
	}
	t := welcome[req.Locale]
	plain := func(s string) string { return fill(s, params, nil) }
	text := plain(t.greeting) + "\n\n" + plain(t.body) + "\n\n" + plain(t.sent) + "\n"
	switch req.Channel {
	case "text":
		return []abi.MessagePart{{Name: "body", ContentType: plainType, Body: []byte(text)}}, nil
	case "slack":
		s := func(v string) string { return fill(v, params, slackEscape) }
		msg := "*" + s(t.greeting) + "*\n" + s(t.body) + "\n_" + s(t.sent) + "_\n"
		return []abi.MessagePart{{Name: "text", ContentType: slackType, Body: []byte(msg)}}, nil
	}
	h := func(s string) string { return fill(html.EscapeString(s), params, html.EscapeString) }
	page := "<p>" + h(t.greeting) + "</p>\n<p>" + h(t.body) + "</p>\n<p><small>" + h(t.sent) + "</small></p>\n"
	return []abi.MessagePart{
		{Name: "subject", ContentType: plainType, Body: []byte(oneLine(plain(t.subject)))},
		{Name: "text", ContentType: plainType, Body: []byte(text)},
		{Name: "html", ContentType: htmlType, Body: []byte(page)},
	}, nil
}

// exportRow renders one account as a CSV record under a header, or as
// plain text (where a formula is only text).
func exportRow(req *abi.RenderRequest, params map[string]string) ([]abi.MessagePart, error) {
	head := exportHeader[req.Locale]
	row := []string{params["name"], params["account"], params["note"], params["date"]}
	if req.Channel == "text" {
		var b strings.Builder
		for i, h := range head {
			b.WriteString(h + ": " + row[i] + "\n")
		}
		return []abi.MessagePart{{Name: "body", ContentType: plainType, Body: []byte(b.String())}}, nil
	}
	for i := range row {
		row[i] = defuseFormula(row[i])
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(head)
	_ = w.Write(row)
	w.Flush()
	return []abi.MessagePart{{Name: "csv", ContentType: csvType, Body: buf.Bytes()}}, nil
}

// defuseFormula prefixes a field a spreadsheet would evaluate (OWASP's
// list: = + - @ TAB CR) with a single quote, so it is shown as text.
func defuseFormula(s string) string {
	if s != "" && strings.IndexByte("=+-@\t\r", s[0]) >= 0 {
		return "'" + s
	}
	return s
}

// fill replaces {param} placeholders, passing values through escape when
// it is not nil.
func fill(s string, params map[string]string, escape func(string) string) string {
	pairs := make([]string, 0, 2*len(params))
	for k, v := range params {
		if escape != nil {
			v = escape(v)
		}
		pairs = append(pairs, "{"+k+"}", v)
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// slackEscape escapes Slack's control characters, so a parameter cannot
// write a mention (<!channel>) or a link.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// neutralise removes what no channel may show from a parameter value:
// bidirectional embeddings, overrides and isolates; control characters
// but TAB and LF (CRLF and a lone CR become LF).
func neutralise(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\r':
			return '\n'
		case r == '\t' || r == '\n':
			return r
		case r < 0x20 || (r >= 0x7f && r <= 0x9f), (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			return -1
		}
		return r
	}, s)
}

// oneLine keeps header-bound text (the subject) on one line, so a parameter
// cannot inject extra mail headers.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '\n', '\t', 0x2028, 0x2029:
			return ' '
		}
		return r
	}, s)
}
