// Command badrenderer is a hostile test guest. It passes the host's
// renderer conformance suite (which sends the same hostile text in every
// parameter) and then breaks one host rule per value of its "mode"
// parameter, putting its "value" parameter where the rule forbids it.
// The host must refuse every such answer (host/notify/render).
package main

import (
	"html"
	"strings"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func init() {
	guest.Register(&guest.Module{Name: "badrenderer", Renderer: &guest.Renderer{
		Templates: []abi.TemplateDecl{{ID: "bad", Version: 1, Locales: []string{"en"},
			Channels: []string{"email", "text", "slack", "csv", "fax"}, Params: []string{"mode", "value"}},
			// typed shows every parameter type; it renders values as given
			// and relies on the host's checks.
			{ID: "typed", Version: 1, Locales: []string{"en"}, Channels: []string{"text"},
				Params: []string{"count", "due", "note"}, ParamSpecs: []abi.ParamSpec{
					{Name: "count", Type: abi.ParamInteger}, {Name: "due", Type: abi.ParamTimestamp},
					{Name: "note", Type: abi.ParamText, MaxBytes: 8}}}},
		Render: render,
	}})
}

func main() {}

const (
	plain = "text/plain; charset=utf-8"
	htm   = "text/html; charset=utf-8"
	slack = "text/x-slack-mrkdwn; charset=utf-8"
	csv   = "text/csv; charset=utf-8"
)

func part(name, ct, body string) abi.MessagePart {
	return abi.MessagePart{Name: name, ContentType: ct, Body: []byte(body)}
}

func render(req *abi.RenderRequest) ([]abi.MessagePart, error) {
	var mode, v string
	for _, p := range req.Params {
		switch p.Name {
		case "mode":
			mode = p.Value
		case "value":
			v = p.Value
		}
	}
	if req.Template == "typed" {
		body := ""
		for _, p := range req.Params {
			body += p.Name + "=" + strings.NewReplacer("\r", "", "\n", " ").Replace(p.Value) + "\n"
		}
		return []abi.MessagePart{part("body", plain, body)}, nil
	}
	// A correct answer for the channel, which each mode then spoils.
	safe := strings.NewReplacer("\r", "", "\n", " ").Replace(v)
	var parts []abi.MessagePart
	switch req.Channel {
	case "email":
		parts = []abi.MessagePart{part("subject", plain, "Note"), part("text", plain, "v: "+safe+"\n"),
			part("html", htm, "<p>v: "+html.EscapeString(safe)+"</p>\n")}
	case "slack":
		parts = []abi.MessagePart{part("text", slack, "v: "+strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(safe)+"\n")}
	case "csv":
		parts = []abi.MessagePart{part("csv", csv, "v\nok\n")}
	default:
		parts = []abi.MessagePart{part("body", plain, "v: "+safe+"\n")}
	}
	switch mode {
	case "raw-html":
		parts[2] = part("html", htm, "<p>v: "+v+"</p>\n")
	case "partial-html": // escapes only the closing bracket
		parts[2] = part("html", htm, "<p>v: "+strings.ReplaceAll(v, ">", "&gt;")+"</p>\n")
	case "raw-slack":
		parts[0] = part("text", slack, "v: "+v+"\n")
	case "crlf-subject":
		parts[0] = part("subject", plain, "Note "+v)
	case "long-subject":
		parts[0] = part("subject", plain, strings.Repeat("s", 300))
	case "tab-subject":
		parts[0] = part("subject", plain, "a\tb")
	case "nel-subject":
		parts[0] = part("subject", plain, "a\u0085b")
	case "ls-subject":
		parts[0] = part("subject", plain, "a\u2028b")
	case "raw-body": // the value with every control character kept
		parts[len(parts)-1].Body = []byte("v: " + v + "\n")
	case "c1":
		parts[len(parts)-1].Body = []byte("v: \u009b31m\n")
	case "del":
		parts[len(parts)-1].Body = []byte("v: \x7f\n")
	case "bad-utf8":
		parts[len(parts)-1].Body = []byte("v: \xff\n")
	case "empty":
		parts[len(parts)-1].Body = nil
	case "big-part":
		parts[len(parts)-1].Body = []byte(strings.Repeat("x", 70<<10))
	case "extra-part":
		parts = append(parts, part("attachment", plain, "x"))
	case "missing-part":
		parts = parts[1:]
	case "swapped-parts":
		parts[0], parts[1] = parts[1], parts[0]
	case "wrong-type":
		parts[len(parts)-1].ContentType = "text/html"
	case "raw-csv":
		parts[0] = part("csv", csv, "v\n"+v+"\n")
	case "bare-quote":
		parts[0] = part("csv", csv, "v\na\"b\n")
	case "ragged-csv":
		parts[0] = part("csv", csv, "a,b\nc\n")
	case "refuse":
		return nil, guest.Errorf(abi.CodeInvalidRequest, "refused %s", v)
	case "internal":
		return nil, guest.Errorf(abi.CodeInternal, "broken %s", v)
	case "trap":
		var m map[string]int
		m[v]++ // nil map write: a Go panic, a wasm trap
	case "spin":
		for spin(v) {
		}
	}
	return parts, nil
}

// spin is true for as long as the host lets the guest run; a call the
// compiler cannot prove constant keeps the loop in the module.
func spin(v string) bool { return len(v) > 0 }
