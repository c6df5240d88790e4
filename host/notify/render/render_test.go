package render

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

func welcome(locale string, ch Channel, params ...Param) Request {
	if params == nil {
		params = []Param{String("name", "Ada"), String("account", "A-1")}
	}
	return Request{Template: "welcome", Version: 1, Locale: locale, Channel: ch, Params: params}
}

func TestRenderRecordsWhatProducedIt(t *testing.T) {
	r, _ := newRenderer(t, Options{})
	res, err := r.Render(context.Background(), welcome("en", Email))
	require.NoError(t, err)
	assert.Equal(t, "renderer", res.Module)
	assert.Equal(t, sha256.Sum256(th.Wasm("renderer")), res.ModuleSHA256, "digest of the wasm that rendered")
	assert.Equal(t, "welcome", res.Template)
	assert.Equal(t, uint32(1), res.Version)
	assert.Equal(t, "en", res.Locale)
	assert.Equal(t, Email, res.Channel)
	assert.Equal(t, testNow, res.Now)
	require.Len(t, res.Parts, 3)
	subject, _ := res.Part("subject")
	assert.Equal(t, "Welcome, Ada", string(subject.Body))
	html, _ := res.Part("html")
	assert.Equal(t, ctHTML, html.ContentType)
	assert.Contains(t, string(html.Body), "<p>Hello Ada,</p>")
	assert.NotContains(t, res.String(), "Ada", "String never shows content")

	// Parameters in another order are the same intent: same bytes.
	again, err := r.Render(context.Background(), welcome("en", Email, String("account", "A-1"), String("name", "Ada")))
	require.NoError(t, err)
	assert.Equal(t, res, again)

	// An explicit now wins over the clock, at millisecond precision.
	req := welcome("de", Text)
	req.Now = testNow.Add(24*time.Hour + 1500*time.Microsecond)
	res, err = r.Render(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, testNow.Add(24*time.Hour+time.Millisecond), res.Now)
	assert.Equal(t, "Hallo Ada,\n\nIhr Konto A-1 ist bereit.\n\nGesendet am 30.11.2026\n", string(res.Parts[0].Body))
}

func TestLocaleFallback(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r, mgr := newRenderer(t, Options{Registerer: reg})
	ctx := context.Background()
	for _, c := range []struct{ asked, used string }{
		{"de", "de"}, {"de-AT", "de"}, {"DE-at-1996", "de"}, {"EN", "en"}, {"en-GB", "en"},
	} {
		res, err := r.Render(ctx, welcome(c.asked, Text))
		require.NoError(t, err, c.asked)
		assert.Equal(t, c.used, res.Locale, c.asked)
		assert.Equal(t, c.asked, res.RequestedLocale, c.asked)
	}
	assert.Equal(t, 3.0, counter(t, r.metrics.fallback.WithLabelValues("text")), "de-AT, DE-at-1996, en-GB fell back")

	_, err := r.Render(ctx, welcome("fr-CA", Text))
	require.ErrorIs(t, err, ErrLocaleNotFound)

	// With a default locale the chain ends there.
	withDefault, err := New(Options{Guests: mgr, Modules: []string{"renderer"}, DefaultLocale: "en", Clock: r.clock})
	require.NoError(t, err)
	res, err := withDefault.Render(ctx, welcome("fr-CA", Text))
	require.NoError(t, err)
	assert.Equal(t, "en", res.Locale)
	assert.Equal(t, "fr-CA", res.RequestedLocale)
	assert.Equal(t, "Hello Ada,\n\nyour account A-1 is ready.\n\nSent 2026-11-29\n", string(res.Parts[0].Body))
}

func TestLookupErrors(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r, _ := newRenderer(t, Options{Registerer: reg})
	ctx := context.Background()
	req := func(mut func(*Request)) Request {
		q := welcome("en", Email)
		mut(&q)
		return q
	}
	for name, c := range map[string]struct {
		req  Request
		want error
	}{
		"unknown template":       {req(func(q *Request) { q.Template = "goodbye" }), ErrTemplateNotFound},
		"other version":          {req(func(q *Request) { q.Version = 2 }), ErrVersionNotFound},
		"undeclared channel":     {req(func(q *Request) { q.Channel = CSV }), ErrChannelNotFound},
		"unknown locale":         {req(func(q *Request) { q.Locale = "ja" }), ErrLocaleNotFound},
		"template not an id":     {req(func(q *Request) { q.Template = "Welcome!" }), ErrInvalidRequest},
		"version 0":              {req(func(q *Request) { q.Version = 0 }), ErrInvalidRequest},
		"locale not a tag":       {req(func(q *Request) { q.Locale = "en_US" }), ErrInvalidRequest},
		"locale too long":        {req(func(q *Request) { q.Locale = "en-" + strings.Repeat("a-", 20) + "a" }), ErrInvalidRequest},
		"channel host can't see": {req(func(q *Request) { q.Channel = "fax" }), ErrInvalidRequest},
	} {
		res, err := r.Render(ctx, c.req)
		assert.ErrorIs(t, err, c.want, name)
		assert.Nil(t, res, name)
	}
	assert.Equal(t, 3.0, counter(t, r.metrics.renders.WithLabelValues("email", "not_found")))
	assert.Equal(t, 1.0, counter(t, r.metrics.renders.WithLabelValues("csv", "not_found")))
	assert.Equal(t, 4.0, counter(t, r.metrics.renders.WithLabelValues("email", "invalid_request")))
	assert.Equal(t, 1.0, counter(t, r.metrics.renders.WithLabelValues("other", "invalid_request")))
}

func TestParamsValidatedBeforeTheCall(t *testing.T) {
	r, _ := newRenderer(t, Options{Limits: Limits{ParamBytes: 16, ParamsBytes: 24}})
	ctx := context.Background()
	for name, c := range map[string]struct {
		params []Param
		param  string
		rule   ParamRule
	}{
		"unknown name":        {[]Param{String("name", "val-a"), String("account", "val-b"), String("email", "val-c")}, "email", ParamUnknown},
		"unknown non-id name": {[]Param{String("name", "val-a"), String("ada@example.com", "val-c")}, "", ParamUnknown},
		"missing":             {[]Param{String("name", "val-a")}, "account", ParamMissing},
		"duplicate":           {[]Param{String("name", "val-a"), String("name", "val-b"), String("account", "val-c")}, "name", ParamDuplicate},
		"name not UTF-8":      {[]Param{String("na\xffme", "val-a")}, "", ParamInvalidUTF8},
		"value not UTF-8":     {[]Param{String("name", "val\xc3("), String("account", "val-b")}, "name", ParamInvalidUTF8},
		"NUL":                 {[]Param{String("name", "Ada\x00"), String("account", "val-b")}, "name", ParamNUL},
		"value too long":      {[]Param{String("name", strings.Repeat("v", 17)), String("account", "val-b")}, "name", ParamTooLong},
		"values too long":     {[]Param{String("name", strings.Repeat("v", 16)), String("account", strings.Repeat("w", 9))}, "", ParamsTooLong},
	} {
		_, err := r.Render(ctx, welcome("en", Email, c.params...))
		require.ErrorIs(t, err, ErrInvalidParams, name)
		var pe *ParamError
		require.ErrorAs(t, err, &pe, name)
		assert.Equal(t, c.rule, pe.Rule, name)
		assert.Equal(t, c.param, pe.Param, name)
		for _, p := range c.params {
			if p.Value != "" {
				assert.NotContains(t, err.Error(), p.Value, "%s: error text shows a value", name)
			}
		}
		assert.NotContains(t, err.Error(), "ada@example.com", name)
	}
	// Exactly at the bounds renders.
	_, err := r.Render(ctx, welcome("en", Email, String("name", strings.Repeat("a", 16)), String("account", strings.Repeat("b", 8))))
	require.NoError(t, err)
	// Typed constructors give one text form per value.
	assert.Equal(t, Param{"n", "-42"}, Int("n", -42))
	assert.Equal(t, Param{"t", "2026-11-29T09:00:00.000Z"}, Time("t", testNow.In(time.FixedZone("x", 3600))))
}

func bad(ch Channel, mode, value string) Request {
	return Request{Template: "bad", Version: 1, Locale: "en", Channel: ch,
		Params: []Param{String("mode", mode), String("value", value)}}
}

// TestHostileOutputIsRefused drives the hostile guest through every rule:
// each answer is refused with its rule, nothing is returned, and the
// refusal is counted under the rule.
func TestHostileOutputIsRefused(t *testing.T) {
	r, _ := newRenderer(t, Options{})
	ctx := context.Background()
	cases := []struct {
		ch          Channel
		mode, value string
		part        int
		rule        OutputRule
	}{
		{Email, "raw-html", `<script>alert(1)</script>`, 2, RuleUnescaped},
		{Email, "raw-html", `"><img src=x onerror=alert(1)>`, 2, RuleUnescaped},
		{Email, "raw-html", `AT&T`, 2, RuleUnescaped},
		{Email, "partial-html", `x<script>alert(1)</script>`, 2, RuleUnescaped},
		{Slack, "raw-slack", `<!channel> ping`, 0, RuleUnescaped},
		{Slack, "raw-slack", `<https://evil.example|bank>`, 0, RuleUnescaped},
		{Email, "crlf-subject", "x\r\nBcc: victim@example.com", 0, RuleLineBreak},
		{Email, "crlf-subject", "x\nBcc: victim@example.com", 0, RuleLineBreak},
		{Email, "tab-subject", "", 0, RuleControl},
		{Email, "nel-subject", "", 0, RuleLineBreak},
		{Email, "ls-subject", "", 0, RuleLineBreak},
		{Email, "long-subject", "", 0, RuleSubjectTooLong},
		{Email, "crlf-subject", "\u202egnp.exe", 0, RuleBidi},
		{Text, "raw-body", "a\rb", 0, RuleControl},
		{Text, "raw-body", "a\x1b[31mred", 0, RuleControl},
		{Text, "raw-body", "\u2067isolate", 0, RuleBidi},
		{Text, "c1", "", 0, RuleControl},
		{Text, "del", "", 0, RuleControl},
		{Text, "bad-utf8", "", 0, RuleInvalidUTF8},
		{Text, "empty", "", 0, RuleEmptyPart},
		{Text, "big-part", "", 0, RulePartTooLarge},
		{Text, "extra-part", "", 1, RuleParts},
		{Email, "missing-part", "", 0, RuleParts},
		{Email, "swapped-parts", "", 0, RuleParts},
		{Email, "wrong-type", "", 2, RuleParts},
		{CSV, "raw-csv", `=cmd|' /C calc'!A0`, 0, RuleCSVFormula},
		{CSV, "raw-csv", `+1`, 0, RuleCSVFormula},
		{CSV, "raw-csv", `-1`, 0, RuleCSVFormula},
		{CSV, "raw-csv", `@SUM(A1)`, 0, RuleCSVFormula},
		{CSV, "raw-csv", `"=1+1"`, 0, RuleCSVFormula},
		{CSV, "bare-quote", "", 0, RuleCSVMalformed},
		{CSV, "ragged-csv", "", 0, RuleCSVMalformed},
	}
	for _, c := range cases {
		name := string(c.ch) + "/" + c.mode + "/" + c.value
		res, err := r.Render(ctx, bad(c.ch, c.mode, c.value))
		require.ErrorIs(t, err, ErrInvalidOutput, name)
		assert.Nil(t, res, name)
		var oe *OutputError
		require.ErrorAs(t, err, &oe, name)
		assert.Equal(t, c.rule, oe.Rule, name)
		if oe.Part >= 0 {
			assert.Equal(t, c.part, oe.Part, name)
		}
		assert.Equal(t, "bad", oe.Module, name)
		if c.value != "" {
			assert.NotContains(t, err.Error(), c.value, name)
		}
	}
	// The same guest answering within the rules renders.
	for _, ch := range []Channel{Email, Text, Slack, CSV} {
		_, err := r.Render(ctx, bad(ch, "none", `<b>&"x"</b>`))
		require.NoError(t, err, ch)
	}
	want := map[OutputRule]float64{}
	for _, c := range cases {
		want[c.rule]++
	}
	for rule, n := range want {
		assert.Equal(t, n, counter(t, r.metrics.rejected.WithLabelValues(string(rule))), rule)
	}
}

func TestGuestFailuresAreTypedAndNeverRender(t *testing.T) {
	r, _ := newRenderer(t, Options{})
	ctx := context.Background()

	_, err := r.Render(ctx, bad(Text, "trap", "boom"))
	var fe *FailureError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "trap", fe.Class)
	assert.ErrorIs(t, err, ErrRenderFailed)
	assert.ErrorIs(t, err, plugins.ClassTrap)

	_, err = r.Render(ctx, bad(Text, "internal", "secret-detail"))
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "internal", fe.Class)
	assert.ErrorIs(t, err, abi.CodeInternal)
	assert.NotContains(t, err.Error(), "secret-detail", "the guest's detail is not shown")

	_, err = r.Render(ctx, bad(Text, "refuse", "secret-detail"))
	require.ErrorIs(t, err, ErrParamsRefused)
	assert.NotErrorIs(t, err, ErrRenderFailed)
	assert.NotContains(t, err.Error(), "secret-detail")

	// The module keeps serving after a trap.
	_, err = r.Render(ctx, bad(Text, "none", "fine"))
	require.NoError(t, err)
	assert.Equal(t, 1.0, counter(t, r.metrics.failures.WithLabelValues("trap")))
	assert.Equal(t, 1.0, counter(t, r.metrics.failures.WithLabelValues("internal")))

	// A module that is not loaded fails the render; it is not "not found",
	// since that module might declare the template.
	gone, err := New(Options{Guests: r.guests, Modules: []string{"nobody", "renderer"}})
	require.NoError(t, err)
	_, err = gone.Render(ctx, welcome("en", Text))
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "unavailable", fe.Class)
	assert.ErrorIs(t, err, plugins.ErrUnknownModule)
}

func TestGuestDeadlineIsARenderFailure(t *testing.T) {
	// The guest spins until the host stops it, whatever the deadline: no
	// timing is asserted, only the class.
	mgr := newManager(t, plugins.Limits{CallTimeout: 200 * time.Millisecond}, [2]string{"bad", "badrenderer"})
	r, err := New(Options{Guests: mgr, Modules: []string{"bad"}})
	require.NoError(t, err)
	_, err = r.Render(context.Background(), bad(Text, "spin", "forever"))
	var fe *FailureError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "deadline", fe.Class)
	assert.ErrorIs(t, err, plugins.ClassDeadline)

	// A caller's cancelled context is a failure too, before any call.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.Render(ctx, bad(Text, "none", "x"))
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "canceled", fe.Class)
	assert.True(t, errors.Is(err, context.Canceled))
}

func TestNewRefusesBadOptions(t *testing.T) {
	_, err := New(Options{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	mgr := newManager(t, generous)
	for _, o := range []Options{
		{Guests: mgr, Modules: []string{"r"}, DefaultLocale: "not a tag"},
		{Guests: mgr, Modules: []string{"r"}, Limits: Limits{PartBytes: HardMaxPartBytes + 1}},
		{Guests: mgr, Modules: []string{"r"}, Limits: Limits{SubjectBytes: -1}},
	} {
		_, err := New(o)
		require.ErrorIs(t, err, ErrInvalidConfig)
	}
}

// TestMetricLabelsStayBounded: whatever channels, templates and values
// callers send, the series are the pre-created closed sets.
func TestMetricLabelsStayBounded(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r, _ := newRenderer(t, Options{Registerer: reg})
	ctx := context.Background()
	count := func() int {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		n := 0
		for _, mf := range mfs {
			n += len(mf.GetMetric())
		}
		return n
	}
	before := count()
	for i := range 50 {
		v := fmt.Sprintf("user%d@example.com", i)
		_, _ = r.Render(ctx, Request{Template: fmt.Sprintf("t%d", i), Version: 1, Locale: "en", Channel: Channel(v), Params: []Param{String(v, v)}})
		_, _ = r.Render(ctx, welcome("en", Email, String("name", v), String("account", v)))
		_, _ = r.Render(ctx, bad(Text, "raw-body", v+"\r"))
	}
	assert.Equal(t, before, count(), "no series was added")
	assert.Equal(t, 50.0, counter(t, r.metrics.renders.WithLabelValues("other", "invalid_request")))
	assert.Equal(t, 50.0, counter(t, r.metrics.renders.WithLabelValues("email", "ok")))
	assert.Equal(t, 50.0, counter(t, r.metrics.rejected.WithLabelValues(string(RuleControl))))
}

// TestParamSpecsTypeAndBoundValues: a template's param_specs are checked
// before the guest is called.
func TestParamSpecsTypeAndBoundValues(t *testing.T) {
	r, _ := newRenderer(t, Options{})
	ctx := context.Background()
	typed := func(count, due, note string) Request {
		return Request{Template: "typed", Version: 1, Locale: "en", Channel: Text,
			Params: []Param{{"count", count}, {"due", due}, String("note", note)}}
	}
	res, err := r.Render(ctx, Request{Template: "typed", Version: 1, Locale: "en", Channel: Text,
		Params: []Param{Int("count", -42), Time("due", testNow), String("note", "8 bytes!")}})
	require.NoError(t, err)
	assert.Equal(t, "count=-42\ndue=2026-11-29T09:00:00.000Z\nnote=8 bytes!\n", string(res.Parts[0].Body))

	for name, c := range map[string]struct {
		req   Request
		param string
		rule  ParamRule
	}{
		"integer with a plus":        {typed("+1", "2026-11-29T09:00:00.000Z", "n"), "count", ParamWrongType},
		"integer with leading zero":  {typed("007", "2026-11-29T09:00:00.000Z", "n"), "count", ParamWrongType},
		"integer overflow":           {typed("9223372036854775808", "2026-11-29T09:00:00.000Z", "n"), "count", ParamWrongType},
		"integer as text":            {typed("<script>", "2026-11-29T09:00:00.000Z", "n"), "count", ParamWrongType},
		"timestamp with an offset":   {typed("1", "2026-11-29T10:00:00.000+01:00", "n"), "due", ParamWrongType},
		"timestamp without millis":   {typed("1", "2026-11-29T09:00:00Z", "n"), "due", ParamWrongType},
		"timestamp as a date":        {typed("1", "2026-11-29", "n"), "due", ParamWrongType},
		"text over its max_bytes":    {typed("1", "2026-11-29T09:00:00.000Z", "9 bytes!!"), "note", ParamTooLong},
		"reference name over bounds": {welcome("en", Email, String("name", strings.Repeat("n", 129)), String("account", "A-1")), "name", ParamTooLong},
	} {
		_, err := r.Render(ctx, c.req)
		var pe *ParamError
		require.ErrorAs(t, err, &pe, name)
		assert.Equal(t, c.rule, pe.Rule, name)
		assert.Equal(t, c.param, pe.Param, name)
	}
}
