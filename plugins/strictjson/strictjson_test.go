package strictjson

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type inner struct {
	D bool `json:"d"`
}

type doc struct {
	Name  string   `json:"name"`
	Count uint16   `json:"count,omitempty"`
	List  []string `json:"list,omitempty"`
	Inner *inner   `json:"inner,omitempty"`
}

func TestUnmarshalAccepts(t *testing.T) {
	var d doc
	require.NoError(t, Unmarshal([]byte(" {\"name\":\"é\\u00e9\",\"count\":7,\"list\":[\"a\"],\"inner\":{\"d\":true}}\n"), &d))
	assert.Equal(t, doc{Name: "éé", Count: 7, List: []string{"a"}, Inner: &inner{D: true}}, d)
	// Optional members may be left out.
	d = doc{}
	require.NoError(t, Unmarshal([]byte(`{"name":""}`), &d))
	assert.Equal(t, doc{}, d)
}

// Every input here is accepted by encoding/json (with unknown fields
// disallowed), which is the leniency this package exists to remove; the
// refusal names the member or the byte, never the value.
func TestUnmarshalRefuses(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"upper-case name":   {`{"NAME":"x"}`, "unknown member /NAME"},
		"mixed-case nested": {`{"name":"x","inner":{"D":true}}`, "unknown member /inner/D"},
		"duplicate name":    {`{"name":"x","name":"y"}`, "duplicate member /name"},
		"duplicate nested":  {`{"name":"x","inner":{"d":true,"d":false}}`, "duplicate member /inner/d"},
		"lone surrogate":    {`{"name":"\ud800"}`, "malformed JSON at byte"},
		"reversed pair":     {`{"name":"\udc00\ud800"}`, "malformed JSON at byte"},
		"invalid utf-8":     {"{\"name\":\"\xff\"}", "malformed JSON at byte"},
		"invalid utf-8 key": {"{\"nam\xe9\":\"x\"}", "malformed JSON at byte"},
		"null member":       {`{"name":"x","list":null}`, "null (omit the member instead) at /list"},
		"null in list":      {`{"name":"x","list":[null]}`, "null (omit the member instead) at /list/0"},
		"null document":     {`null`, "the document must be a JSON object"},
		"array document":    {`["name"]`, "the document must be a JSON object"},
		"trailing object":   {`{"name":"x"} {}`, "trailing data after the JSON object"},
		"trailing garbage":  {`{"name":"x"}x`, "trailing data after the JSON object"},
		"truncated":         {`{"name":"x"`, "truncated document"},
		"empty":             {``, "empty document"},
		"unknown member":    {`{"name":"x","extra":1}`, "unknown member /extra"},
		"wrong type":        {`{"name":1}`, "must be a string: /name"},
		"out of range":      {`{"name":"x","count":70000}`, "must be an integer in range: /count"},
		"fraction":          {`{"name":"x","count":1.5}`, "must be an integer in range: /count"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var d doc
			err := Unmarshal([]byte(c.in), &d)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrRefused)
			var se *Error
			require.ErrorAs(t, err, &se)
			assert.Contains(t, err.Error(), c.want)
			assert.NotContains(t, err.Error(), `"x"`, "no value is repeated")
		})
	}
}

// A member name the writer chose is bounded and sanitised in the error.
func TestUnmarshalPointerSanitised(t *testing.T) {
	var d doc
	err := Unmarshal([]byte(`{"name":"x","`+strings.Repeat("\\u001b", 400)+`":1}`), &d)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "\x1b")
	assert.LessOrEqual(t, len(err.Error()), 200)
}

// FuzzUnmarshal: no input panics, every refusal is an *Error, and whatever
// is accepted is valid UTF-8, reads the same with encoding/json (this
// package only removes leniency, it never adds meaning) and survives a
// round trip.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"name":"x","count":7,"list":["a","b"],"inner":{"d":true}}`))
	f.Add([]byte(`{"name":"x","NAME":"y"}`))
	f.Add([]byte(`{"name":"\ud800"}`))
	f.Add([]byte(`{"name":"x","list":null}`))
	f.Add([]byte(`{"name":"x"} {}`))
	f.Add([]byte("{\"name\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d doc
		err := Unmarshal(b, &d)
		if err != nil {
			var se *Error
			if !errors.As(err, &se) || !errors.Is(err, ErrRefused) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if !utf8.Valid(b) {
			t.Fatalf("accepted invalid UTF-8 %q", b)
		}
		var lenient doc
		dec := stdjson.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&lenient); err != nil {
			t.Fatalf("encoding/json refuses what strictjson accepted (%q): %v", b, err)
		}
		if !reflect.DeepEqual(normal(d), normal(lenient)) {
			t.Fatalf("the two decoders disagree on %q: %+v vs %+v", b, d, lenient)
		}
		js, err := stdjson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var again doc
		if err := Unmarshal(js, &again); err != nil {
			t.Fatalf("re-decoding %s: %v", js, err)
		}
		if !reflect.DeepEqual(normal(d), normal(again)) {
			t.Fatalf("round trip changed %+v into %+v", d, again)
		}
	})
}

// normal maps an empty list to nil: "list":[] and an omitted list mean the
// same.
func normal(d doc) doc {
	if len(d.List) == 0 {
		d.List = nil
	}
	return d
}
