package render

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/abi"
)

// Channel is a delivery medium whose output rules the host knows. A
// template declared for any other channel cannot be rendered: the host
// would not know how to verify what it sends.
type Channel string

// Channels and the exact parts each must render, in this order:
//
//	email  subject  text/plain; charset=utf-8   one line, at most Limits.SubjectBytes
//	       text     text/plain; charset=utf-8
//	       html     text/html; charset=utf-8    optional; parameters HTML-escaped
//	text   body     text/plain; charset=utf-8   (SMS, push, chat as plain text)
//	slack  text     text/x-slack-mrkdwn; charset=utf-8   parameters' < > & escaped
//	csv    csv      text/csv; charset=utf-8     no field starts with = + - @ TAB CR
const (
	Email Channel = "email"
	Text  Channel = "text"
	Slack Channel = "slack"
	CSV   Channel = "csv"
)

// Channels lists every channel the host can verify.
func Channels() []Channel { return []Channel{Email, Text, Slack, CSV} }

// Valid reports whether the host has output rules for c.
func (c Channel) Valid() bool { return slices.Contains(Channels(), c) }

// Param is one template parameter. Values travel to the guest as UTF-8
// text; the constructors give each Go type one canonical text form, so
// the same intent always renders the same bytes.
type Param struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// String is a text parameter.
func String(name, v string) Param { return Param{Name: name, Value: v} }

// Int is an integer parameter in base 10 (abi.ParamInteger).
func Int(name string, v int64) Param { return Param{Name: name, Value: strconv.FormatInt(v, 10)} }

// timestampLayout is abi.ParamTimestamp's form.
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// Time is an instant as RFC 3339 in UTC with milliseconds
// ("2026-11-29T09:00:00.000Z", abi.ParamTimestamp); the template formats
// it for its locale.
func Time(name string, t time.Time) Param {
	return Param{Name: name, Value: t.UTC().Format(timestampLayout)}
}

// validValue reports whether v is the canonical text of typ.
func validValue(typ abi.ParamType, v string) bool {
	switch typ {
	case abi.ParamInteger:
		n, err := strconv.ParseInt(v, 10, 64)
		return err == nil && strconv.FormatInt(n, 10) == v
	case abi.ParamTimestamp:
		t, err := time.Parse(timestampLayout, v)
		return err == nil && t.UTC().Format(timestampLayout) == v
	}
	return true
}

// Request asks for one rendered message.
type Request struct {
	// Template and Version name the declared template exactly; there is
	// no "latest": a frozen intent names the version it was written for.
	Template string
	Version  uint32
	// Locale is a BCP 47 tag ("de-AT"); see Renderer.Render for the
	// fallback rule.
	Locale  string
	Channel Channel
	Params  []Param
	// Now is passed to the guest (rendering is pure); zero means the
	// Renderer's clock.
	Now time.Time
}

// maxLocaleBytes bounds a locale tag (BCP 47's longest common form is 35).
const maxLocaleBytes = 35

// ValidLocale reports whether s is a language tag of the plain form
// lang(-subtag)*: 2–8 letters, then 1–8 letters or digits per subtag.
func ValidLocale(s string) bool {
	if len(s) == 0 || len(s) > maxLocaleBytes {
		return false
	}
	for i, sub := range strings.Split(s, "-") {
		if len(sub) == 0 || len(sub) > 8 || (i == 0 && len(sub) < 2) {
			return false
		}
		for j := 0; j < len(sub); j++ {
			c := sub[j] | 0x20 // ASCII lower case
			letter := c >= 'a' && c <= 'z'
			if !letter && (i == 0 || sub[j] < '0' || sub[j] > '9') {
				return false
			}
		}
	}
	return true
}

// checkRequest checks what needs no declaration.
func checkRequest(r *Request) error {
	switch {
	case !abi.ValidID(r.Template):
		return fmt.Errorf("%w: template is not an id", ErrInvalidRequest)
	case r.Version == 0:
		return fmt.Errorf("%w: template %s: version 0", ErrInvalidRequest, r.Template)
	case !ValidLocale(r.Locale):
		return fmt.Errorf("%w: template %s: locale is not a language tag", ErrInvalidRequest, r.Template)
	case !r.Channel.Valid():
		return fmt.Errorf("%w: template %s: channel is not one the host verifies", ErrInvalidRequest, r.Template)
	}
	return nil
}

// resolveLocale picks the declared locale that serves want: the tag
// itself, then the tag with its last subtag dropped, repeatedly ("de-AT-x"
// → "de-AT" → "de"), then def (the operator's default, "" for none).
// Matching ignores ASCII case; the declared spelling is returned, and is
// what the guest is asked for, so the guest never falls back on its own
// and the locale recorded is the locale rendered.
func resolveLocale(declared []string, want, def string) (string, bool) {
	find := func(tag string) (string, bool) {
		for _, d := range declared {
			if strings.EqualFold(d, tag) {
				return d, true
			}
		}
		return "", false
	}
	for tag := want; tag != ""; {
		if d, ok := find(tag); ok {
			return d, true
		}
		i := strings.LastIndexByte(tag, '-')
		if i < 0 {
			break
		}
		tag = tag[:i]
	}
	if def != "" {
		return find(def)
	}
	return "", false
}

// checkParams validates params against a template's declaration and the
// limits: every declared name exactly once, no other name, UTF-8 names
// and values without NUL, each value within its spec's max_bytes and
// Limits.ParamBytes (the smaller), of its spec's type, and all values
// within Limits.ParamsBytes. The
// returned attributes are in declaration order, so one intent has one
// request encoding whatever order the caller listed them in.
func checkParams(t *abi.TemplateDecl, params []Param, lim Limits) ([]abi.Attr, error) {
	bad := func(name string, rule ParamRule) error {
		return &ParamError{Template: t.ID, Param: shownName(name), Rule: rule}
	}
	vals := make([]string, len(t.Params))
	seen := make([]bool, len(t.Params))
	total := 0
	for _, p := range params {
		if !utf8.ValidString(p.Name) {
			return nil, bad("", ParamInvalidUTF8)
		}
		i := slices.Index(t.Params, p.Name)
		switch {
		case i < 0:
			return nil, bad(p.Name, ParamUnknown)
		case seen[i]:
			return nil, bad(p.Name, ParamDuplicate)
		case !utf8.ValidString(p.Value):
			return nil, bad(p.Name, ParamInvalidUTF8)
		case strings.IndexByte(p.Value, 0) >= 0:
			return nil, bad(p.Name, ParamNUL)
		case len(p.Value) > maxBytes(t, i, lim):
			return nil, bad(p.Name, ParamTooLong)
		case len(t.ParamSpecs) > i && !validValue(t.ParamSpecs[i].Type, p.Value):
			return nil, bad(p.Name, ParamWrongType)
		}
		total += len(p.Value)
		if total > lim.ParamsBytes {
			return nil, bad("", ParamsTooLong)
		}
		seen[i], vals[i] = true, p.Value
	}
	attrs := make([]abi.Attr, len(t.Params))
	for i, name := range t.Params {
		if !seen[i] {
			return nil, bad(name, ParamMissing)
		}
		attrs[i] = abi.Attr{Name: name, Value: vals[i]}
	}
	return attrs, nil
}

// maxBytes is the bound on parameter i of t.
func maxBytes(t *abi.TemplateDecl, i int, lim Limits) int {
	if len(t.ParamSpecs) > i && t.ParamSpecs[i].MaxBytes > 0 {
		return min(int(t.ParamSpecs[i].MaxBytes), lim.ParamBytes)
	}
	return lim.ParamBytes
}
