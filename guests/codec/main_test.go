package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

func roundTrip(t *testing.T, d *guest.Dispatcher, e abi.Export, req abi.Message, resp abi.Message) error {
	t.Helper()
	body, err := abi.ParseFrame(d.Handle(e, req.AppendTo(nil), nil))
	if err != nil {
		return err
	}
	require.NoError(t, resp.Unmarshal(body))
	return nil
}

// The declarations the host reads: the schemas guests/cache-region's
// regions name, next to user-profile, unchanged.
func TestDeclarations(t *testing.T) {
	d := Module().Description()
	require.NoError(t, d.Validate())
	assert.Equal(t, []abi.CodecDecl{
		{SchemaID: "user-profile", WriteVersion: 2, ReadableVersions: []uint32{1, 2}},
		{SchemaID: "product", WriteVersion: 2, ReadableVersions: []uint32{1, 2}},
		{SchemaID: "search-page", WriteVersion: 1, ReadableVersions: []uint32{1}},
	}, d.Codecs)
}

func TestCodec(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)

	var enc abi.CodecEncodeResponse
	require.NoError(t, roundTrip(t, d, abi.ExportCodecEncode,
		&abi.CodecEncodeRequest{Schema: "user-profile", Value: []byte(`{"email":"a@x","id":"7","locale":"de","name":"Ada"}`)}, &enc))
	assert.Equal(t, uint32(2), enc.Version)
	assert.JSONEq(t, `{"id":"7","name":"Ada","email":"a@x","locale":"de"}`, string(enc.Payload))

	var dec abi.CodecDecodeResponse
	require.NoError(t, roundTrip(t, d, abi.ExportCodecDecode,
		&abi.CodecDecodeRequest{Schema: "user-profile", StoredVersion: 1, Payload: []byte(`{"id":"7","full_name":"Ada L","email":"a@x"}`)}, &dec))
	assert.Equal(t, `{"id":"7","name":"Ada L","email":"a@x","locale":"en"}`, string(dec.Value))

	err = roundTrip(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "user-profile", StoredVersion: 3, Payload: []byte(`{}`)}, &dec)
	require.ErrorIs(t, err, abi.CodeSchemaMismatch)
	err = roundTrip(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "user-profile", StoredVersion: 2, Payload: []byte(`{"id":`)}, &dec)
	require.ErrorIs(t, err, abi.CodeCorrupt)
	err = roundTrip(t, d, abi.ExportCodecDecode, &abi.CodecDecodeRequest{Schema: "user-profile", StoredVersion: 2, Payload: []byte(`{"id":"1","name":"n","email":"e","locale":"en","x":1}`)}, &dec)
	require.ErrorIs(t, err, abi.CodeCorrupt)
	err = roundTrip(t, d, abi.ExportCodecEncode, &abi.CodecEncodeRequest{Schema: "user-profile", Value: []byte(`{"id":"7"}`)}, &enc)
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
	err = roundTrip(t, d, abi.ExportCodecEncode, &abi.CodecEncodeRequest{Schema: "nope", Value: []byte(`{}`)}, &enc)
	require.ErrorIs(t, err, abi.CodeNotFound)
}

// answer calls export e of the codec guest and returns the status and the
// payload (encode, with the version checked) or value (decode).
func answer(t *testing.T, d *guest.Dispatcher, req abi.Message) (abi.Code, string) {
	t.Helper()
	switch r := req.(type) {
	case *abi.CodecEncodeRequest:
		var resp abi.CodecEncodeResponse
		err := roundTrip(t, d, abi.ExportCodecEncode, r, &resp)
		if err != nil {
			return codeOf(t, err), err.Error()
		}
		want := map[string]uint32{"product": 2, "search-page": 1}[r.Schema]
		assert.Equal(t, want, resp.Version, "%s is written at its write version", r.Schema)
		return abi.CodeOK, string(resp.Payload)
	case *abi.CodecDecodeRequest:
		var resp abi.CodecDecodeResponse
		err := roundTrip(t, d, abi.ExportCodecDecode, r, &resp)
		if err != nil {
			return codeOf(t, err), err.Error()
		}
		return abi.CodeOK, string(resp.Value)
	}
	t.Fatalf("unexpected request %T", req)
	return 0, ""
}

func codeOf(t *testing.T, err error) abi.Code {
	t.Helper()
	var se *abi.StatusError
	require.ErrorAs(t, err, &se)
	return se.Code
}

func encodeReq(schema, value string) *abi.CodecEncodeRequest {
	return &abi.CodecEncodeRequest{Schema: schema, Value: []byte(value)}
}

func decodeReq(schema string, version uint32, payload string) *abi.CodecDecodeRequest {
	return &abi.CodecDecodeRequest{Schema: schema, StoredVersion: version, Payload: []byte(payload)}
}

func TestProduct(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	const canonical = `{"id":"SKU-42","name":"Trail shoe","price_cents":12999,"currency":"EUR","tags":["outdoor","sale"]}`
	for _, tc := range []struct {
		name string
		req  abi.Message
		code abi.Code
		want string // the canonical JSON for ok, a substring of the error otherwise
	}{
		{"encode reorders into the canonical payload", encodeReq("product",
			`{"tags":["outdoor","sale"],"currency":"EUR","price_cents":12999,"name":"Trail shoe","id":"SKU-42"}`), abi.CodeOK, canonical},
		{"encode omits empty tags", encodeReq("product",
			`{"id":"a","name":"b","price_cents":0,"currency":"USD","tags":[]}`), abi.CodeOK, `{"id":"a","name":"b","price_cents":0,"currency":"USD"}`},
		{"encode accepts 16 tags", encodeReq("product",
			`{"id":"a","name":"b","price_cents":1,"currency":"USD","tags":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16"]}`),
			abi.CodeOK, `{"id":"a","name":"b","price_cents":1,"currency":"USD","tags":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16"]}`},
		{"encode keeps non-ASCII text", encodeReq("product",
			`{"id":"a","name":"Schuh \u00fc <b>","price_cents":1,"currency":"CHF"}`), abi.CodeOK, `{"id":"a","name":"Schuh ü \u003cb\u003e","price_cents":1,"currency":"CHF"}`},
		{"decode v2 canonicalises", decodeReq("product", 2, " {\"currency\":\"EUR\",\"id\":\"SKU-42\",\"name\":\"Trail shoe\",\"tags\":[\"outdoor\",\"sale\"],\"price_cents\":12999}\n"), abi.CodeOK, canonical},
		{"v1 upgrade with cents", decodeReq("product", 1, `{"id":"a","name":"b","price":"0.29","currency":"USD"}`), abi.CodeOK, `{"id":"a","name":"b","price_cents":29,"currency":"USD"}`},
		{"v1 upgrade with one decimal", decodeReq("product", 1, `{"id":"a","name":"b","price":"12.5","currency":"USD"}`), abi.CodeOK, `{"id":"a","name":"b","price_cents":1250,"currency":"USD"}`},
		{"v1 upgrade without decimals", decodeReq("product", 1, `{"id":"a","name":"b","price":"007","currency":"USD"}`), abi.CodeOK, `{"id":"a","name":"b","price_cents":700,"currency":"USD"}`},
		{"v1 upgrade of the largest price", decodeReq("product", 1, `{"id":"a","name":"b","price":"999999999999.99","currency":"USD"}`), abi.CodeOK, `{"id":"a","name":"b","price_cents":99999999999999,"currency":"USD"}`},

		{"missing price_cents is not a price of 0", encodeReq("product", `{"id":"a","name":"b","currency":"USD"}`), abi.CodeInvalidRequest, `value: missing member "price_cents"`},
		{"unknown member", encodeReq("product", `{"id":"a","name":"b","price_cents":1,"currency":"USD","colour":"red"}`), abi.CodeInvalidRequest, `value: unknown member "colour"`},
		{"names match exactly", encodeReq("product", `{"ID":"a","name":"b","price_cents":1,"currency":"USD"}`), abi.CodeInvalidRequest, `value: unknown member "ID"`},
		{"repeated member", encodeReq("product", `{"id":"a","id":"b","name":"b","price_cents":1,"currency":"USD"}`), abi.CodeInvalidRequest, "value: repeated member"},
		{"null", encodeReq("product", `{"id":"a","name":"b","price_cents":1,"currency":"USD","tags":null}`), abi.CodeInvalidRequest, "value: tags must be an array of strings"},
		{"negative price", encodeReq("product", `{"id":"a","name":"b","price_cents":-1,"currency":"USD"}`), abi.CodeInvalidRequest, "value: price_cents must be 0-99999999999999"},
		{"price over the v1 range", encodeReq("product", `{"id":"a","name":"b","price_cents":100000000000000,"currency":"USD"}`), abi.CodeInvalidRequest, "price_cents must be 0-"},
		{"fractional price", encodeReq("product", `{"id":"a","name":"b","price_cents":1.0,"currency":"USD"}`), abi.CodeInvalidRequest, "value: price_cents must be an integer"},
		{"exponent price", encodeReq("product", `{"id":"a","name":"b","price_cents":1e3,"currency":"USD"}`), abi.CodeInvalidRequest, "value: price_cents must be an integer"},
		{"price as a string", encodeReq("product", `{"id":"a","name":"b","price_cents":"1","currency":"USD"}`), abi.CodeInvalidRequest, "value: price_cents must be an integer"},
		{"lower-case currency", encodeReq("product", `{"id":"a","name":"b","price_cents":1,"currency":"usd"}`), abi.CodeInvalidRequest, "value: currency must be 3 upper-case letters"},
		{"long currency", encodeReq("product", `{"id":"a","name":"b","price_cents":1,"currency":"EURO"}`), abi.CodeInvalidRequest, "value: currency must be 3 upper-case letters"},
		{"empty name", encodeReq("product", `{"id":"a","name":"","price_cents":1,"currency":"USD"}`), abi.CodeInvalidRequest, "value: id and name must not be empty"},
		{"17 tags", encodeReq("product", `{"id":"a","name":"b","price_cents":1,"currency":"USD","tags":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]}`), abi.CodeInvalidRequest, "value: tags must hold at most 16 strings"},
		{"a tag that is not a string", encodeReq("product", `{"id":"a","name":"b","price_cents":1,"currency":"USD","tags":[1]}`), abi.CodeInvalidRequest, "value: tags must be an array of strings"},
		{"not an object", encodeReq("product", `[]`), abi.CodeInvalidRequest, "value: not a JSON object"},
		{"empty", encodeReq("product", ``), abi.CodeInvalidRequest, "value: no JSON value"},
		{"trailing data", encodeReq("product", `{"id":"a","name":"b","price_cents":1,"currency":"USD"}{}`), abi.CodeInvalidRequest, "value: trailing data after the object"},
		{"invalid UTF-8", encodeReq("product", "{\"id\":\"a\xff\",\"name\":\"b\",\"price_cents\":1,\"currency\":\"USD\"}"), abi.CodeInvalidRequest, "value: malformed JSON at byte"},

		{"v2 garbage is corrupt", decodeReq("product", 2, "\xff\xfe"), abi.CodeCorrupt, "v2 payload: malformed JSON at byte 0"},
		{"truncated v2 is corrupt", decodeReq("product", 2, `{"id":"a","name":`), abi.CodeCorrupt, "v2 payload: truncated JSON"},
		{"a v1 payload read as v2 is corrupt", decodeReq("product", 2, `{"id":"a","name":"b","price":"1.00","currency":"USD"}`), abi.CodeCorrupt, `v2 payload: unknown member "price"`},
		{"a v2 payload read as v1 is corrupt", decodeReq("product", 1, `{"id":"a","name":"b","price_cents":100,"currency":"USD"}`), abi.CodeCorrupt, `v1 payload: unknown member "price_cents"`},
		{"v1 price with three decimals", decodeReq("product", 1, `{"id":"a","name":"b","price":"1.999","currency":"USD"}`), abi.CodeCorrupt, "v1 payload: price must be a decimal of 1-12 digits and at most 2 decimals"},
		{"v1 price with 13 digits", decodeReq("product", 1, `{"id":"a","name":"b","price":"1000000000000","currency":"USD"}`), abi.CodeCorrupt, "v1 payload: price must be"},
		{"v1 price with a trailing dot", decodeReq("product", 1, `{"id":"a","name":"b","price":"1.","currency":"USD"}`), abi.CodeCorrupt, "v1 payload: price must be"},
		{"v1 price without units", decodeReq("product", 1, `{"id":"a","name":"b","price":".5","currency":"USD"}`), abi.CodeCorrupt, "v1 payload: price must be"},
		{"v1 negative price", decodeReq("product", 1, `{"id":"a","name":"b","price":"-1","currency":"USD"}`), abi.CodeCorrupt, "v1 payload: price must be"},
		{"v1 price with an exponent", decodeReq("product", 1, `{"id":"a","name":"b","price":"1e3","currency":"USD"}`), abi.CodeCorrupt, "v1 payload: price must be"},
		{"v1 price with non-ASCII digits", decodeReq("product", 1, `{"id":"a","name":"b","price":"١٢","currency":"USD"}`), abi.CodeCorrupt, "v1 payload: price must be"},
		{"v1 price as a number", decodeReq("product", 1, `{"id":"a","name":"b","price":12.34,"currency":"USD"}`), abi.CodeCorrupt, "v1 payload: price must be a string"},
		{"v1 bad currency", decodeReq("product", 1, `{"id":"a","name":"b","price":"1","currency":"usd"}`), abi.CodeCorrupt, "v1 payload: currency must be 3 upper-case letters"},
		{"unknown version", decodeReq("product", 3, canonical), abi.CodeSchemaMismatch, "stored version 3"},
		{"version 0", decodeReq("product", 0, canonical), abi.CodeSchemaMismatch, "stored version 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got := answer(t, d, tc.req)
			require.Equal(t, tc.code, code, got)
			if code == abi.CodeOK {
				assert.Equal(t, tc.want, got)
			} else {
				assert.Contains(t, got, tc.want)
			}
		})
	}
}

func TestSearchPage(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	const canonical = `{"query":"red running shoes","page":2,"ids":["SKU-42","SKU-7"]}`
	long := func(n int) string { return `"` + strings.Repeat("x", n) + `"` }
	ids := func(n int) string { return `[` + strings.TrimSuffix(strings.Repeat(`"a",`, n), ",") + `]` }
	for _, tc := range []struct {
		name string
		req  abi.Message
		code abi.Code
		want string
	}{
		{"encode writes the canonical payload", encodeReq("search-page", `{"ids":["SKU-42","SKU-7"],"page":2,"query":"red running shoes"}`), abi.CodeOK, canonical},
		{"a page without results", encodeReq("search-page", `{"query":"q","page":9999,"ids":[]}`), abi.CodeOK, `{"query":"q","page":9999,"ids":[]}`},
		{"bounds are inclusive", encodeReq("search-page", `{"query":`+long(256)+`,"page":1,"ids":`+ids(100)+`}`), abi.CodeOK, ""},
		{"decode v1", decodeReq("search-page", 1, canonical), abi.CodeOK, canonical},

		{"page 0", encodeReq("search-page", `{"query":"q","page":0,"ids":[]}`), abi.CodeInvalidRequest, "value: page must be 1-9999"},
		{"page 10000", encodeReq("search-page", `{"query":"q","page":10000,"ids":[]}`), abi.CodeInvalidRequest, "value: page must be 1-9999"},
		{"page huge", encodeReq("search-page", `{"query":"q","page":1e400,"ids":[]}`), abi.CodeInvalidRequest, "value: page must be an integer"},
		{"empty query", encodeReq("search-page", `{"query":"","page":1,"ids":[]}`), abi.CodeInvalidRequest, "value: query must be 1-256 bytes"},
		{"long query", encodeReq("search-page", `{"query":`+long(257)+`,"page":1,"ids":[]}`), abi.CodeInvalidRequest, "value: query must be 1-256 bytes"},
		{"101 ids", encodeReq("search-page", `{"query":"q","page":1,"ids":`+ids(101)+`}`), abi.CodeInvalidRequest, "value: ids must hold at most 100 strings"},
		{"long id", encodeReq("search-page", `{"query":"q","page":1,"ids":[`+long(65)+`]}`), abi.CodeInvalidRequest, "value: ids must be 1-64 bytes each"},
		{"empty id", encodeReq("search-page", `{"query":"q","page":1,"ids":[""]}`), abi.CodeInvalidRequest, "value: ids must be 1-64 bytes each"},
		{"missing ids", encodeReq("search-page", `{"query":"q","page":1}`), abi.CodeInvalidRequest, `value: missing member "ids"`},
		{"unknown member", encodeReq("search-page", `{"query":"q","page":1,"ids":[],"total":3}`), abi.CodeInvalidRequest, `value: unknown member "total"`},
		{"garbage is corrupt", decodeReq("search-page", 1, "\x00garbage"), abi.CodeCorrupt, "v1 payload: malformed JSON"},
		{"an invalid stored page is corrupt", decodeReq("search-page", 1, `{"query":"q","page":0,"ids":[]}`), abi.CodeCorrupt, "v1 payload: page must be 1-9999"},
		{"unknown version", decodeReq("search-page", 2, canonical), abi.CodeSchemaMismatch, "stored version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got := answer(t, d, tc.req)
			require.Equal(t, tc.code, code, got)
			switch {
			case code != abi.CodeOK:
				assert.Contains(t, got, tc.want)
			case tc.want != "":
				assert.Equal(t, tc.want, got)
			}
		})
	}
}

// Decoding what encode wrote gives back the same payload (the conformance
// suite's round trip), for every schema, and answers never vary.
func TestRoundTripIsStable(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	for _, req := range []*abi.CodecEncodeRequest{
		encodeReq("product", `{"id":"a","name":"<b> & \"c\"","price_cents":5,"currency":"JPY","tags":["x"]}`),
		encodeReq("search-page", `{"query":"naïve","page":3,"ids":["1","2"]}`),
	} {
		var enc abi.CodecEncodeResponse
		require.NoError(t, roundTrip(t, d, abi.ExportCodecEncode, req, &enc))
		var dec abi.CodecDecodeResponse
		require.NoError(t, roundTrip(t, d, abi.ExportCodecDecode, decodeReq(req.Schema, enc.Version, string(enc.Payload)), &dec))
		var again abi.CodecEncodeResponse
		require.NoError(t, roundTrip(t, d, abi.ExportCodecEncode, encodeReq(req.Schema, string(dec.Value)), &again))
		assert.Equal(t, string(enc.Payload), string(again.Payload), req.Schema)
		assert.Equal(t, string(enc.Payload), string(dec.Value), "%s: the decoded value is the canonical payload", req.Schema)
	}
}

// The unknown-schema answer is the SDK's, the same for every schema name.
func TestUnknownSchema(t *testing.T) {
	d, err := guest.NewDispatcher(Module())
	require.NoError(t, err)
	for _, req := range []abi.Message{encodeReq("Product", `{}`), decodeReq("search_page", 1, `{}`)} {
		code, _ := answer(t, d, req)
		assert.Equal(t, abi.CodeNotFound, code)
	}
}

// FuzzCodecs: for any bytes, product and search-page answer a status (never
// panic); whatever encode accepts decodes to its payload, and whatever
// decode accepts is canonical: encoding the value writes it unchanged. So
// the conformance suite's round trip holds for every value, not only its
// samples.
func FuzzCodecs(f *testing.F) {
	for _, s := range []string{
		`{"id":"SKU-42","name":"Trail shoe","price_cents":12999,"currency":"EUR","tags":["outdoor","sale"]}`,
		`{"id":"SKU-7","name":"Wool socks","price":"0.29","currency":"USD"}`,
		`{"query":"red running shoes","page":2,"ids":["SKU-42"]}`,
		`{"id":"a\u00e9<>&","name":"\ud83d\ude00","price_cents":0,"currency":"USD","tags":[]}`,
		"", "{}", "null", "\xff",
	} {
		f.Add([]byte(s))
	}
	codecs := Module().Codecs
	require.Len(f, codecs, 3)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range codecs {
			name := c.Decl.SchemaID
			if p, err := c.Encode(b); err == nil {
				v, err := c.Decode(c.Decl.WriteVersion, p)
				require.NoError(t, err, "%s: decode of an encoded %q", name, b)
				require.Equal(t, string(p), string(v), name)
			} else {
				require.ErrorIs(t, err, abi.CodeInvalidRequest, name)
			}
			for _, ver := range c.Decl.ReadableVersions {
				v, err := c.Decode(ver, b)
				if err != nil {
					require.ErrorIs(t, err, abi.CodeCorrupt, name)
					continue
				}
				again, err := c.Encode(v)
				require.NoError(t, err, "%s: encode of a decoded v%d %q", name, ver, b)
				require.Equal(t, string(v), string(again), name)
			}
		}
	})
}
