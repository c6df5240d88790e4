package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// codecOf returns the guest's codec of schema id.
func codecOf(t testing.TB, id string) guest.Codec {
	t.Helper()
	for _, c := range Module().Codecs {
		if c.Decl.SchemaID == id {
			return c
		}
	}
	t.Fatalf("no codec %q", id)
	return guest.Codec{}
}

// refusal returns the status code and detail of err, a codec's refusal.
func refusal(t *testing.T, err error) (abi.Code, string) {
	t.Helper()
	var se *abi.StatusError
	require.True(t, errors.As(err, &se), "%v is a status", err)
	return se.Code, se.Detail
}

// strictCase is a value read as the latest stored form of a schema: encode
// refuses it as invalid-request with "value: "+detail and decode as corrupt
// with "v<write> payload: "+detail, or both accept it and answer want.
type strictCase struct {
	name, value string
	detail      string // "" for accepted
	want        string // the canonical payload when accepted
}

func checkStrict(t *testing.T, schema string, cases []strictCase) {
	t.Helper()
	c := codecOf(t, schema)
	payload := map[uint32]string{1: "v1 payload: ", 2: "v2 payload: "}[c.Decl.WriteVersion]
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			enc, encErr := c.Encode([]byte(tc.value))
			dec, decErr := c.Decode(c.Decl.WriteVersion, []byte(tc.value))
			if tc.detail == "" {
				require.NoError(t, encErr)
				require.NoError(t, decErr)
				assert.Equal(t, tc.want, string(enc))
				assert.Equal(t, tc.want, string(dec))
				return
			}
			require.Error(t, encErr)
			code, detail := refusal(t, encErr)
			assert.Equal(t, abi.CodeInvalidRequest, code)
			assert.Equal(t, "value: "+tc.detail, detail)
			require.Error(t, decErr)
			code, detail = refusal(t, decErr)
			assert.Equal(t, abi.CodeCorrupt, code)
			assert.Equal(t, payload+tc.detail, detail)
		})
	}
}

// product builds a product value from its members' JSON text.
func product(members ...string) string { return "{" + strings.Join(members, ",") + "}" }

const (
	pID       = `"id":"a"`
	pName     = `"name":"b"`
	pPrice    = `"price_cents":1`
	pCurrency = `"currency":"USD"`
)

// TestStrictProduct pins each rule of the strict reading, as encode and as
// decode answer it.
func TestStrictProduct(t *testing.T) {
	const ok = `{"id":"a","name":"b","price_cents":1,"currency":"USD"}`
	checkStrict(t, "product", []strictCase{
		// Member names: exact and case-sensitive, compared once unescaped.
		{"a name in another case", product(`"Name":"b"`, pID, pPrice, pCurrency), `unknown member "Name"`, ""},
		{"a name with a space", product(pID, `"name ":"b"`, pPrice, pCurrency), `unknown member "name "`, ""},
		{"an escaped name is the name", product(`"\u0069d":"a"`, pName, pPrice, pCurrency), "", ok},
		{"an unknown member before the known ones", product(`"x":{"y":[1]}`, pID, pName, pPrice, pCurrency), `unknown member "x"`, ""},

		// No member twice, whatever its value or spelling.
		{"a member twice with one value", product(pID, pID, pName, pPrice, pCurrency), "repeated member", ""},
		{"a member twice, once escaped", product(pID, pName, pPrice, pCurrency, `"\u0069d":"a"`), "repeated member", ""},
		{"an optional member twice", product(pID, pName, pPrice, pCurrency, `"tags":[]`, `"tags":["x"]`), "repeated member", ""},

		// No null, for any member.
		{"null id", product(`"id":null`, pName, pPrice, pCurrency), "id must be a string", ""},
		{"null price", product(pID, pName, `"price_cents":null`, pCurrency), "price_cents must be an integer", ""},
		{"null currency", product(pID, pName, pPrice, `"currency":null`), "currency must be a string", ""},
		{"null tags", product(pID, pName, pPrice, pCurrency, `"tags":null`), "tags must be an array of strings", ""},
		{"a null tag", product(pID, pName, pPrice, pCurrency, `"tags":["x",null]`), "tags must be an array of strings", ""},
		{"null, not an object", `null`, "not a JSON object", ""},

		// UTF-8 only, refused where it is, never turned into U+FFFD.
		{"invalid UTF-8 in a value", product(`"id":"a`+"\xff"+`"`, pName, pPrice, pCurrency), "malformed JSON at byte 8", ""},
		{"invalid UTF-8 in a name", product(`"i`+"\xff"+`d":"a"`, pName, pPrice, pCurrency), "malformed JSON at byte 3", ""},
		{"invalid UTF-8 in a tag", product(pID, pName, pPrice, pCurrency, `"tags":["`+"\xc3"+`"]`), "malformed JSON at byte 63", ""},
		{"an overlong encoding", product(`"id":"`+"\xc0\xaf"+`"`, pName, pPrice, pCurrency), "malformed JSON at byte 7", ""},
		{"an encoded surrogate", product(`"id":"`+"\xed\xa0\x80"+`"`, pName, pPrice, pCurrency), "malformed JSON at byte 7", ""},
		{"invalid UTF-8 in an unknown member's value", product(pID, `"x":"`+"\xff"+`"`), `unknown member "x"`, ""},
		{"a literal U+FFFD is text", product(`"id":"\ufffd`+"\uFFFD"+`"`, pName, pPrice, pCurrency), "", `{"id":"` + "\uFFFD\uFFFD" + `","name":"b","price_cents":1,"currency":"USD"}`},

		// Surrogate escapes only as a valid pair.
		{"a lone high surrogate", product(`"id":"\ud800"`, pName, pPrice, pCurrency), "malformed JSON at byte 7", ""},
		{"a lone low surrogate", product(`"id":"a\udc00b"`, pName, pPrice, pCurrency), "malformed JSON at byte 8", ""},
		{"a high surrogate, then a letter", product(`"id":"\ud800\u0041"`, pName, pPrice, pCurrency), "malformed JSON at byte 7", ""},
		{"two high surrogates", product(`"id":"\uD800\uD800"`, pName, pPrice, pCurrency), "malformed JSON at byte 7", ""},
		{"a pair the wrong way round", product(`"id":"\udc00\ud800"`, pName, pPrice, pCurrency), "malformed JSON at byte 7", ""},
		{"a lone surrogate in a name", product(`"\ud800":"a"`, pName, pPrice, pCurrency), "malformed JSON at byte 2", ""},
		{"a lone surrogate in a tag", product(pID, pName, pPrice, pCurrency, `"tags":["x\udbff"]`), "malformed JSON at byte 64", ""},
		{"a valid pair", product(`"id":"\ud83d\ude00"`, pName, pPrice, pCurrency, `"tags":["\uD83D\uDE00"]`), "", `{"id":"😀","name":"b","price_cents":1,"currency":"USD","tags":["😀"]}`},
		{"an escaped backslash, then text", product(`"id":"\\ud800"`, pName, pPrice, pCurrency), "", `{"id":"\\ud800","name":"b","price_cents":1,"currency":"USD"}`},

		// Exactly one JSON value.
		{"only white space", " \n\t", "no JSON value", ""},
		{"another object after it", ok + ` {}`, "trailing data after the object", ""},
		{"null after it", ok + `null`, "trailing data after the object", ""},
		{"a stray bracket after it", ok + `]`, "trailing data after the object", ""},
		{"text after it", ok + ` x`, "trailing data after the object", ""},
		{"truncated in a name", `{"id":"a","na`, "truncated JSON", ""},
		{"truncated in an escape pair", `{"id":"\ud83d`, "truncated JSON", ""},
		{"truncated in a UTF-8 sequence", `{"id":"` + "\xe2\x82", "truncated JSON", ""},
		{"truncated after a comma", `{"id":"a",`, "truncated JSON", ""},
		{"a string", `"id"`, "not a JSON object", ""},
		{"an array of the object", `[` + ok + `]`, "not a JSON object", ""},
		{"a bad escape", product(`"id":"a\x"`, pName, pPrice, pCurrency), "malformed JSON at byte 8", ""},
		{"a short escape", product(`"id":"a\u12"`, pName, pPrice, pCurrency), "malformed JSON at byte 8", ""},
		{"a trailing comma", `{"id":"a",}`, "malformed JSON at byte 10", ""},
		{"a missing colon", `{"id" "a"}`, "malformed JSON at byte 6", ""},
		{"a control character", "{\"id\":\"a\tb\"}", "malformed JSON at byte 8", ""},

		// Integers exact: no fraction, no exponent, nothing beyond int64.
		{"the largest price", product(pID, pName, `"price_cents":99999999999999`, pCurrency), "", `{"id":"a","name":"b","price_cents":99999999999999,"currency":"USD"}`},
		{"minus zero", product(pID, pName, `"price_cents":-0`, pCurrency), "", `{"id":"a","name":"b","price_cents":0,"currency":"USD"}`},
		{"a zero fraction", product(pID, pName, `"price_cents":12999.0`, pCurrency), "price_cents must be an integer", ""},
		{"a fraction", product(pID, pName, `"price_cents":12999.5`, pCurrency), "price_cents must be an integer", ""},
		{"an exponent", product(pID, pName, `"price_cents":1E2`, pCurrency), "price_cents must be an integer", ""},
		{"a signed exponent", product(pID, pName, `"price_cents":1e+2`, pCurrency), "price_cents must be an integer", ""},
		{"beyond int64", product(pID, pName, `"price_cents":9223372036854775808`, pCurrency), "price_cents must be an integer", ""},
		{"below int64", product(pID, pName, `"price_cents":-9223372036854775809`, pCurrency), "price_cents must be an integer", ""},
		{"the largest int64 is out of range", product(pID, pName, `"price_cents":9223372036854775807`, pCurrency), "price_cents must be 0-99999999999999", ""},
		{"a number as a string", product(pID, pName, pPrice, `"currency":1`), "currency must be a string", ""},
		{"true as a price", product(pID, pName, `"price_cents":true`, pCurrency), "price_cents must be an integer", ""},
		{"a leading zero", product(pID, pName, `"price_cents":01`, pCurrency), "malformed JSON at byte 36", ""},
	})
}

func TestStrictSearchPage(t *testing.T) {
	checkStrict(t, "search-page", []strictCase{
		{"a name in another case", `{"query":"q","Page":1,"ids":[]}`, `unknown member "Page"`, ""},
		{"a member twice", `{"query":"q","page":1,"page":2,"ids":[]}`, "repeated member", ""},
		{"null ids", `{"query":"q","page":1,"ids":null}`, "ids must be an array of strings", ""},
		{"null query", `{"query":null,"page":1,"ids":[]}`, "query must be a string", ""},
		{"null page", `{"query":"q","page":null,"ids":[]}`, "page must be an integer", ""},
		{"a fractional page", `{"query":"q","page":2.0,"ids":[]}`, "page must be an integer", ""},
		{"a page beyond int64", `{"query":"q","page":18446744073709551617,"ids":[]}`, "page must be an integer", ""},
		{"a lone surrogate in an id", `{"query":"q","page":1,"ids":["\udfff"]}`, "malformed JSON at byte 30", ""},
		{"invalid UTF-8 in the query", "{\"query\":\"\x80\",\"page\":1,\"ids\":[]}", "malformed JSON at byte 10", ""},
		{"trailing data", `{"query":"q","page":1,"ids":[]}[]`, "trailing data after the object", ""},
		{"an array of ids with an object", `{"query":"q","page":1,"ids":[{}]}`, "ids must be an array of strings", ""},
		{"a valid pair in the query", `{"query":"\ud83d\ude00","page":1,"ids":[]}`, "", `{"query":"😀","page":1,"ids":[]}`},
	})
}

// A v1 product is read as strictly: its price is a string, never null.
func TestStrictProductV1(t *testing.T) {
	c := codecOf(t, "product")
	for value, detail := range map[string]string{
		`{"id":"a","name":"b","price":null,"currency":"USD"}`:             "v1 payload: price must be a string",
		`{"id":"a","name":"b","price":"1","price":"2","currency":"USD"}`:  "v1 payload: repeated member",
		`{"id":"a","name":"b","Price":"1","currency":"USD"}`:              `v1 payload: unknown member "Price"`,
		`{"id":"a","name":"b","price":"1\ud800","currency":"USD"}`:        "v1 payload: malformed JSON at byte 31",
		`{"id":"a","name":"b","price":"1","currency":"USD"}` + "\n{}":     "v1 payload: trailing data after the object",
		`{"id":"a","name":"b","price":"1","currency":"USD","tags":["x"]}`: `v1 payload: unknown member "tags"`,
	} {
		_, err := c.Decode(1, []byte(value))
		require.Error(t, err, value)
		code, got := refusal(t, err)
		assert.Equal(t, abi.CodeCorrupt, code, value)
		assert.Equal(t, detail, got, value)
	}
}

// Refusals name members, never values: a value may be personal data, and a
// detail is logged and returned to callers.
func TestDetailsNeverQuoteValues(t *testing.T) {
	const secret = "SeCrEt"
	for _, tc := range []struct{ schema, value string }{
		{"product", product(pID, pName, `"price_cents":"`+secret+`"`, pCurrency)},
		{"product", product(pID, pName, pPrice, `"currency":"`+secret+`"`)},
		{"product", product(pID, pName, pPrice, pCurrency, `"colour":"`+secret+`"`)},
		{"product", product(pID, pName, pPrice, pCurrency, `"tags":["`+secret+`",1]`)},
		{"product", product(pID, pName, pPrice, pCurrency, `"tags":"`+secret+`"`)},
		{"product", product(`"id":"` + secret + `\ud800"`)},
		{"product", product(`"id":"` + secret + "\xff" + `"`)},
		{"product", product(`"id":"` + secret)},
		{"product", product(`"id":` + secret)},
		{"product", `"` + secret + `"`},
		{"search-page", `{"query":"q","page":"` + secret + `","ids":[]}`},
		{"search-page", `{"query":"` + strings.Repeat(secret, 50) + `","page":1,"ids":[]}`},
		{"search-page", `{"query":"q","page":1,"ids":["` + strings.Repeat(secret, 20) + `"]}`},
	} {
		c := codecOf(t, tc.schema)
		_, encErr := c.Encode([]byte(tc.value))
		_, decErr := c.Decode(c.Decl.WriteVersion, []byte(tc.value))
		for _, err := range []error{encErr, decErr} {
			require.Error(t, err, tc.value)
			_, detail := refusal(t, err)
			assert.NotContains(t, strings.ToLower(detail), strings.ToLower(secret), tc.value)
		}
	}
}

// readInt parses the number's text, so an integer beyond a float64's 53
// bits is exact.
func TestReadIntIsExact(t *testing.T) {
	for text, want := range map[string]int64{
		"9007199254740993":     9007199254740993,
		"-9223372036854775808": -9223372036854775808,
		"9223372036854775807":  9223372036854775807,
	} {
		var n int64
		require.NoError(t, readObject([]byte(`{"n":`+text+`}`), member{name: "n", read: readInt(&n)}))
		assert.Equal(t, want, n)
	}
}

func TestBadText(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{
		{`"abc"`, -1},
		{`"\ud83d\ude00"`, -1},
		{`"\\ud800"`, -1},
		{`"\\\ud800"`, 3},
		{`"\n\ud800"`, 3},
		{`"\u00e9\udc00"`, 7},
		{`"\ud800`, -1},      // cut short: truncated, not a fault
		{`"\ud800\u`, -1},    // likewise
		{`"\ud800\udc0`, -1}, // likewise
		{`"\ud800x`, 1},      // decided: no \u after the high surrogate
		{"\"\xe2\x82", -1},   // a cut UTF-8 sequence
		{"\"\xe2\x82\"", 1},  // an invalid one
		{"\"\xf0\x9f\x98\x80\"", -1},
	} {
		assert.Equal(t, tc.want, badText([]byte(tc.text), len(tc.text)), "%q", tc.text)
	}
	// Where the decoder stopped at a bad byte within an escape, the escape
	// is the fault.
	assert.Equal(t, 2, badText([]byte(`"a\u12"`), 6))
	assert.Equal(t, 2, badText([]byte(`"a\x"`), 3))
}

// TestStrictProfile pins user-profile to the same strict reading as the
// other schemas: before it moved off encoding/json, "ID" was read as id, a
// repeated name kept its last value, null read as "" and a byte that is not
// UTF-8 as U+FFFD.
func TestStrictProfile(t *testing.T) {
	const ok = `{"id":"u","name":"n","email":"e","locale":"de"}`
	checkStrict(t, "user-profile", []strictCase{
		{"canonical", ok, "", ok},
		{"members in another order", `{"locale":"de","email":"e","name":"n","id":"u"}`, "", ok},
		{"a name in another case", `{"ID":"u","name":"n","email":"e","locale":"de"}`, `unknown member "ID"`, ""},
		{"a member twice", `{"id":"u","name":"n","email":"e","locale":"de","name":"x"}`, "repeated member", ""},
		{"null locale", `{"id":"u","name":"n","email":"e","locale":null}`, "locale must be a string", ""},
		{"an empty locale", `{"id":"u","name":"n","email":"e","locale":""}`, "id, name, email and locale are required", ""},
		{"a missing locale", `{"id":"u","name":"n","email":"e"}`, `missing member "locale"`, ""},
		{"invalid UTF-8", `{"id":"u` + "\xff" + `","name":"n","email":"e","locale":"de"}`, "malformed JSON at byte 8", ""},
		{"a lone surrogate", `{"id":"\ud800","name":"n","email":"e","locale":"de"}`, "malformed JSON at byte 7", ""},
		{"trailing data", ok + `{}`, "trailing data after the object", ""},
	})

	c := codecOf(t, "user-profile")
	v1 := func(payload string) (string, error) {
		out, err := c.Decode(1, []byte(payload))
		return string(out), err
	}
	got, err := v1(`{"id":"u","full_name":"n","email":"e"}`)
	require.NoError(t, err)
	assert.Equal(t, `{"id":"u","name":"n","email":"e","locale":"en"}`, got, "v1 upgrades with the default locale")
	for payload, detail := range map[string]string{
		`{"id":"u","Full_Name":"n","email":"e"}`:               `v1 payload: unknown member "Full_Name"`,
		`{"id":"u","full_name":"n","email":"e","locale":"de"}`: `v1 payload: unknown member "locale"`,
		`{"id":"u","email":"e"}`:                               `v1 payload: missing member "full_name"`,
		`{"id":"u","full_name":null,"email":"e"}`:              "v1 payload: full_name must be a string",
	} {
		_, err := v1(payload)
		require.Error(t, err, payload)
		code, d := refusal(t, err)
		assert.Equal(t, abi.CodeCorrupt, code, payload)
		assert.Equal(t, detail, d, payload)
	}
}
