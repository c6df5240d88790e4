package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"html"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/caphost/caphost/abi"
)

// FuzzVerify drives the output validator with arbitrary guest answers (a
// channel, three parts and one parameter value). It never panics, every
// refusal is an *OutputError, and whatever it accepts satisfies, checked
// here independently of verify.go: the channel's exact parts, bounds,
// valid UTF-8, no CR anywhere, nothing but printable text in the subject,
// no bidi control, the parameter's markup not raw in an HTML or Slack
// part, and CSV that parses without a formula-like field.
func FuzzVerify(f *testing.F) {
	f.Add(uint8(0), "Welcome, Ada", "Hello Ada\n", "<p>Hello &lt;Ada&gt;</p>", "<Ada>")
	f.Add(uint8(0), "Hi\r\nBcc: x", "t", "<p><script>", "<script>")
	f.Add(uint8(1), "body\tline\n", "", "", "x")
	f.Add(uint8(2), "*hi* &lt;!channel&gt;", "", "", "<!channel>")
	f.Add(uint8(3), "a,b\n'=1,\"x\"\"y\"\n", "", "", "=1")
	f.Add(uint8(3), "a,b\n=1,2\n", "", "", "")
	f.Add(uint8(1), "\u202eevil", "", "", "")
	f.Fuzz(func(t *testing.T, ch uint8, a, b, c, param string) {
		channel := Channels()[int(ch)%len(Channels())]
		rules := channelParts(channel)
		bodies := []string{a, b, c}
		var parts []abi.MessagePart
		for i, r := range rules {
			parts = append(parts, abi.MessagePart{Name: r.name, ContentType: r.contentType, Body: []byte(bodies[i])})
		}
		if ch >= 128 && len(parts) > 1 { // also: a part left out
			parts = parts[1:]
		}
		params := []abi.Attr{{Name: "p", Value: param}}
		lim := Limits{PartBytes: 512, TotalBytes: 1024, SubjectBytes: 64}
		err := Verify(channel, params, parts, lim)
		if err != nil {
			var oe *OutputError
			if !errors.As(err, &oe) {
				t.Fatalf("error %v is not an *OutputError", err)
			}
			return
		}
		total := 0
		for i, p := range parts {
			body := string(p.Body)
			total += len(body)
			r := rules[i]
			if ch >= 128 && len(rules) > 1 {
				r = rules[i+1]
			}
			switch {
			case p.Name != r.name || p.ContentType != r.contentType:
				t.Fatalf("part %d %q accepted for %s", i, p.Name, channel)
			case body == "" || len(body) > lim.PartBytes || !utf8.ValidString(body):
				t.Fatalf("part %d: empty, oversize or not UTF-8 accepted", i)
			case strings.ContainsAny(body, "\r\x00\x7f\u0085\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"):
				t.Fatalf("part %d: CR, NUL, DEL, NEL or bidi control accepted: %q", i, body)
			}
			if r.kind == kindHeader {
				if len(body) > lim.SubjectBytes || strings.ContainsAny(body, "\n\t\u2028\u2029") {
					t.Fatalf("subject %q accepted", body)
				}
				for _, c := range body {
					if c < 0x20 {
						t.Fatalf("control in subject %q accepted", body)
					}
				}
			}
			if len(param) >= 2 && strings.ContainsAny(param, `<>`) {
				switch {
				case r.kind == kindHTML && html.EscapeString(param) != param && strings.Contains(body, param):
					t.Fatalf("raw parameter %q in HTML %q accepted", param, body)
				case r.kind == kindSlack && strings.Contains(body, param):
					t.Fatalf("raw parameter %q in Slack %q accepted", param, body)
				}
			}
			if r.kind == kindCSV {
				recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
				if err != nil {
					t.Fatalf("unparsable CSV %q accepted", body)
				}
				for _, rec := range recs {
					for _, f := range rec {
						if f != "" && strings.ContainsRune("=+-@\t\r", rune(f[0])) {
							t.Fatalf("formula field %q accepted", f)
						}
					}
				}
			}
		}
		if total > lim.TotalBytes {
			t.Fatalf("total %d accepted", total)
		}
	})
}

// FuzzResultDecode: stored plans are untrusted bytes (a store can be
// damaged or written by someone else). The fuzzer's input is sealed with
// its digest before decoding, so mutations reach the field decoders
// rather than stopping at the digest (TestResultDecodeRefuses covers a
// wrong digest). Decoding never panics, refusals are ErrCorruptResult,
// and what is accepted re-encodes to the same bytes.
func FuzzResultDecode(f *testing.F) {
	unsealed := func(r *Result) []byte {
		b, err := r.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		return b[:len(b)-sha256.Size]
	}
	f.Add(unsealed(goldenResult()))
	f.Add(unsealed(&Result{Module: "m", Template: "t", Version: 1, RequestedLocale: "en", Locale: "en", Channel: Text,
		Now: testNow, Parts: []Part{{Name: "body", ContentType: ctPlain, Body: []byte("hi\n")}}}))
	f.Add(unsealed(&Result{Module: "m", Template: "t", Version: 1, RequestedLocale: "en", Locale: "en", Channel: CSV,
		Now: testNow, Parts: []Part{{Name: "csv", ContentType: ctCSV, Body: []byte("a,'=b\n")}}}))
	f.Fuzz(func(t *testing.T, body []byte) {
		sum := sha256.Sum256(body)
		b := append(bytes.Clone(body), sum[:]...)
		var r Result
		if err := r.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrCorruptResult) {
				t.Fatalf("error %v is not ErrCorruptResult", err)
			}
			return
		}
		again, err := r.MarshalBinary()
		if err != nil {
			t.Fatalf("accepted result does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decode/encode not canonical:\n in %x\nout %x", b, again)
		}
	})
}

// FuzzRequest drives the checks on a caller's request (it will arrive as
// client JSON through the sidecar): locale syntax and fallback, and the
// parameters against a declaration with param_specs. Whatever is
// accepted has every declared name exactly once in declaration order,
// UTF-8 values without NUL within the bounds and of their types, and a
// locale that is one of the declared ones.
func FuzzRequest(f *testing.F) {
	f.Add("de-AT", "name", "Ada", "account", "A-1", "")
	f.Add("en", "account", "-12", "name", "Ada", "")
	f.Add("EN", "name", "a\x00", "name", "b", "en")
	f.Add("x-y-z", "nam\xffe", "v", "account", "", "de")
	f.Fuzz(func(t *testing.T, locale, n1, v1, n2, v2, def string) {
		decl := &abi.TemplateDecl{ID: "t", Version: 1, Locales: []string{"en", "de", "pt-BR"}, Channels: []string{"text"},
			Params: []string{"name", "account"}, ParamSpecs: []abi.ParamSpec{{Name: "name", Type: abi.ParamText, MaxBytes: 32},
				{Name: "account", Type: abi.ParamInteger}}}
		lim := Limits{ParamBytes: 64, ParamsBytes: 96}.withDefaults()
		if err := checkRequest(&Request{Template: "t", Version: 1, Locale: locale, Channel: Text}); err == nil {
			if !ValidLocale(locale) || len(locale) > maxLocaleBytes {
				t.Fatalf("locale %q accepted", locale)
			}
			if !ValidLocale(def) {
				def = ""
			}
			if got, ok := resolveLocale(decl.Locales, locale, def); ok {
				if !slices.Contains(decl.Locales, got) {
					t.Fatalf("resolved to undeclared %q", got)
				}
				if !strings.HasPrefix(strings.ToLower(locale)+"-", strings.ToLower(got)+"-") && !strings.EqualFold(got, def) {
					t.Fatalf("%q resolved to %q, neither a prefix nor the default", locale, got)
				}
			}
		} else if !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("error %v is not ErrInvalidRequest", err)
		}
		attrs, err := checkParams(decl, []Param{{n1, v1}, {n2, v2}}, lim)
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || (pe.Param != "" && !abi.ValidID(pe.Param)) {
				t.Fatalf("error %v is not a *ParamError with a safe name", err)
			}
			return
		}
		if len(attrs) != 2 || attrs[0].Name != "name" || attrs[1].Name != "account" {
			t.Fatalf("accepted %v", attrs)
		}
		total := 0
		for _, a := range attrs {
			total += len(a.Value)
			if !utf8.ValidString(a.Value) || strings.ContainsRune(a.Value, 0) || len(a.Value) > lim.ParamBytes {
				t.Fatalf("value %q accepted", a.Value)
			}
		}
		if len(attrs[0].Value) > 32 {
			t.Fatalf("name over its max_bytes accepted")
		}
		if n, err := strconv.ParseInt(attrs[1].Value, 10, 64); err != nil || strconv.FormatInt(n, 10) != attrs[1].Value {
			t.Fatalf("non-canonical integer %q accepted", attrs[1].Value)
		}
		if total > lim.ParamsBytes {
			t.Fatalf("total %d accepted", total)
		}
	})
}
