// Command renderer is the reference renderer guest: template "welcome" v1 in
// English and German, for the email channel (subject, text/plain and
// text/html parts, parameters HTML-escaped in the HTML part) and the text
// channel (one plain-text part). Rendering is pure: the host passes now.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o renderer.wasm ./guests/renderer
package main

import (
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

// Module returns the guest's declarations and handlers.
func Module() *guest.Module {
	return &guest.Module{Name: "renderer", Renderer: &guest.Renderer{
		Templates: []abi.TemplateDecl{{ID: "welcome", Version: 1, Locales: []string{"en", "de"},
			Channels: []string{"email", "text"}, Params: []string{"name", "account"}}},
		Render: Render,
	}}
}

// Render renders a declared template; the SDK has already checked the id,
// version, locale and channel.
func Render(req *abi.RenderRequest) ([]abi.MessagePart, error) {
	params := map[string]string{}
	for _, p := range req.Params {
		params[p.Name] = p.Value
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
	t := welcome[req.Locale]
	plain := func(s string) string { return fill(s, params, false) }
	text := plain(t.greeting) + "\n\n" + plain(t.body) + "\n\n" + plain(t.sent) + "\n"
	if req.Channel == "text" {
		return []abi.MessagePart{{Name: "body", ContentType: "text/plain; charset=utf-8", Body: []byte(text)}}, nil
	}
	h := func(s string) string { return fill(html.EscapeString(s), params, true) }
	page := "<p>" + h(t.greeting) + "</p>\n<p>" + h(t.body) + "</p>\n<p><small>" + h(t.sent) + "</small></p>\n"
	return []abi.MessagePart{
		{Name: "subject", ContentType: "text/plain; charset=utf-8", Body: []byte(oneLine(plain(t.subject)))},
		{Name: "text", ContentType: "text/plain; charset=utf-8", Body: []byte(text)},
		{Name: "html", ContentType: "text/html; charset=utf-8", Body: []byte(page)},
	}, nil
}

// fill replaces {param} placeholders; values are escaped for HTML output.
func fill(s string, params map[string]string, escape bool) string {
	pairs := make([]string, 0, 2*len(params))
	for k, v := range params {
		if escape {
			v = html.EscapeString(v)
		}
		pairs = append(pairs, "{"+k+"}", v)
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// oneLine keeps header-bound text (the subject) on one line, so a parameter
// cannot inject extra mail headers.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}
