package notify

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/notify/render"
)

const goodBody = `{"idempotency-key":"welcome-ada-1","channel":"slack","recipient":"ada@example.com",` +
	`"template":"welcome","version":1,"locale":"de-AT","params":{"name":"Ada","account":"A-1"}}`

// TestDecodeSubmitRefusesHostileBodies: duplicate and case-variant
// members (also inside params), invalid UTF-8, lone surrogates, null,
// unknown members, out-of-bounds fields and a key on a best-effort send
// are refused with 400, and no message repeats a value.
func TestDecodeSubmitRefusesHostileBodies(t *testing.T) {
	req, mode, err := DecodeSubmit([]byte(goodBody))
	require.NoError(t, err)
	assert.Equal(t, ModeDurable, mode)
	assert.Equal(t, Request{IdempotencyKey: "welcome-ada-1", Channel: render.Slack, Recipient: "ada@example.com",
		Template: "welcome", Version: 1, Locale: "de-AT",
		Params: []render.Param{{Name: "account", Value: "A-1"}, {Name: "name", Value: "Ada"}}}, req, "params sorted by name")

	_, mode, err = DecodeSubmit([]byte(`{"mode":"best-effort","channel":"slack","route":"alerts","recipient":"r","template":"t","version":1,"locale":"en"}`))
	require.NoError(t, err)
	assert.Equal(t, ModeBestEffort, mode)

	sub := func(old, new string) string { return strings.Replace(goodBody, old, new, 1) }
	manyParams := `{"idempotency-key":"k","channel":"slack","recipient":"r","template":"t","version":1,"locale":"en","params":{`
	for i := range MaxParams + 1 {
		if i > 0 {
			manyParams += ","
		}
		manyParams += `"p` + strings.Repeat("x", i) + `":"v"`
	}
	manyParams += `}}`
	for name, body := range map[string]string{
		"duplicate member":       sub(`"channel":"slack"`, `"channel":"slack","channel":"email"`),
		"case variant":           sub(`"channel"`, `"Channel"`),
		"duplicate param":        sub(`"name":"Ada"`, `"name":"Ada","name":"Eve"`),
		"unknown member":         sub(`"version":1`, `"version":1,"priority":"high"`),
		"invalid utf-8":          sub(`ada@example.com`, "ada\xff@example.com"),
		"lone surrogate":         sub(`"Ada"`, `"\ud800"`),
		"null":                   sub(`"locale":"de-AT"`, `"locale":null`),
		"trailing data":          goodBody + `{}`,
		"no key":                 sub(`"idempotency-key":"welcome-ada-1",`, ``),
		"key too long":           sub(`welcome-ada-1`, strings.Repeat("k", 257)),
		"key on best-effort":     sub(`"version":1`, `"version":1,"mode":"best-effort"`),
		"unknown mode":           sub(`"version":1`, `"version":1,"mode":"exactly-once"`),
		"unknown channel":        sub(`"slack"`, `"sms"`),
		"bad route":              sub(`"version":1`, `"version":1,"route":"Default Route"`),
		"no recipient":           sub(`"ada@example.com"`, `""`),
		"long recipient":         sub(`ada@example.com`, strings.Repeat("a", 513)),
		"version 0":              sub(`"version":1`, `"version":0`),
		"negative version":       sub(`"version":1`, `"version":-1`),
		"bad locale":             sub(`de-AT`, `de_AT`),
		"too many params":        manyParams,
		"not an object":          `[]`,
		"empty":                  ``,
		"number for string":      sub(`"Ada"`, `7`),
		"template too long":      sub(`"welcome"`, `"`+strings.Repeat("w", 65)+`"`),
		"body over the max size": sub(`"Ada"`, `"`+strings.Repeat("a", MaxBodyBytes)+`"`),
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := DecodeSubmit([]byte(body))
			var he *httpjson.Error
			require.True(t, errors.As(err, &he), "want a refusal, got %v", err)
			assert.Contains(t, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, he.Status)
			for _, v := range []string{"ada", "Ada", "Eve", "welcome-ada", "high", "sms"} {
				assert.NotContains(t, he.Body.Message, v, "no value is echoed")
			}
		})
	}
}

// FuzzDecodeSubmit: whatever the body, DecodeSubmit either refuses it with
// a 400/413 that echoes nothing of it, or returns a request whose fields
// are within their bounds and valid UTF-8, with sorted unique params.
func FuzzDecodeSubmit(f *testing.F) {
	for _, s := range []string{
		goodBody,
		`{"mode":"best-effort","channel":"email","recipient":"r","template":"t","version":1,"locale":"en"}`,
		`{"channel":"slack","channel":"email"}`,
		`{"params":{"a":"1","a":"2"}}`,
		"{\"recipient\":\"\xff\"}",
		`{"locale":"\ud800"}`,
		`null`, `[]`, `{}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, mode, err := DecodeSubmit(body)
		if err != nil {
			var he *httpjson.Error
			require.True(t, errors.As(err, &he))
			require.Contains(t, []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge}, he.Status)
			require.True(t, utf8.ValidString(he.Body.Message))
			return
		}
		require.Contains(t, []string{ModeDurable, ModeBestEffort}, mode)
		require.True(t, req.Channel.Valid())
		require.True(t, render.ValidLocale(req.Locale))
		require.NotZero(t, req.Version)
		require.LessOrEqual(t, len(req.Params), MaxParams)
		for _, s := range []string{req.IdempotencyKey, req.Recipient, req.Template, req.Route} {
			require.True(t, utf8.ValidString(s))
		}
		if mode == ModeDurable {
			require.NotEmpty(t, req.IdempotencyKey)
		} else {
			require.Empty(t, req.IdempotencyKey)
		}
		for i := 1; i < len(req.Params); i++ {
			require.Less(t, req.Params[i-1].Name, req.Params[i].Name, "sorted, unique")
		}
	})
}

// TestFingerprint: the fingerprint ignores the key and the order of the
// parameters and separates every other field, including boundaries
// between adjacent fields.
func TestFingerprint(t *testing.T) {
	base := Request{IdempotencyKey: "k", Channel: render.Email, Recipient: "a@example.com", Template: "welcome", Version: 1,
		Locale: "en", Params: []render.Param{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}}}
	fp := fingerprint(base)
	same := base
	same.IdempotencyKey = "other"
	same.Params = []render.Param{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}}
	same.Route = DefaultRoute
	assert.Equal(t, fp, fingerprint(same), "key, param order and the explicit default route do not matter")
	for name, mut := range map[string]func(*Request){
		"channel":   func(r *Request) { r.Channel = render.Text },
		"route":     func(r *Request) { r.Route = "other" },
		"recipient": func(r *Request) { r.Recipient = "b@example.com" },
		"template":  func(r *Request) { r.Template = "welcome2" },
		"version":   func(r *Request) { r.Version = 2 },
		"locale":    func(r *Request) { r.Locale = "de" },
		"value":     func(r *Request) { r.Params = []render.Param{{Name: "a", Value: "12"}, {Name: "b", Value: ""}} },
		"boundary":  func(r *Request) { r.Params = []render.Param{{Name: "a1", Value: ""}, {Name: "b", Value: "2"}} },
		"extra":     func(r *Request) { r.Params = append(r.Params, render.Param{Name: "c", Value: ""}) },
	} {
		r := base
		r.Params = append([]render.Param(nil), base.Params...)
		mut(&r)
		assert.NotEqual(t, fp, fingerprint(r), name)
	}
}
