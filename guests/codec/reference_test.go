package main

// The reference: the codec as it was before its reader and writer were
// written by hand (commit bc9674e), kept as a test-only copy so the tests
// can prove the two answer every input alike (differential_test.go). Its
// reader walks encoding/json's token decoder and adds the strict checks; its
// canonical payloads are encoding/json's Marshal. Only identifiers changed
// (a ref prefix); the schemas' types, bounds and valid methods are shared,
// as the change left them alone. user-profile's reading was encoding/json's
// own until it moved to the codec's strict reader too; differ holds it to
// answering alike whatever it accepts.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
)

// refModule is Module with the reference codecs.
func refModule() *guest.Module {
	return &guest.Module{Name: "codec", Codecs: []guest.Codec{
		{
			Decl:   abi.CodecDecl{SchemaID: "user-profile", WriteVersion: 2, ReadableVersions: []uint32{1, 2}},
			Encode: refEncode,
			Decode: refDecode,
		},
		refJSONSchema("product", refReadProductV1, refReadProduct),
		refJSONSchema("search-page", refReadSearchPage),
	}}
}

// profileV1 is the reference's legacy user-profile form.
type profileV1 struct {
	ID       string `json:"id"`
	FullName string `json:"full_name"`
	Email    string `json:"email"`
}

// strict is the reference's user-profile reading: encoding/json with
// unknown members refused and nothing after the object. It matches member
// names case-insensitively, keeps the last of a repeated member, reads null
// as "" and invalid UTF-8 as U+FFFD, which the codec's own reading refuses.
func strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data")
	}
	return nil
}

func refEncode(value []byte) ([]byte, error) {
	var p Profile
	if err := strict(value, &p); err != nil {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "value: %v", err)
	}
	if err := p.valid(); err != nil {
		return nil, guest.Errorf(abi.CodeInvalidRequest, "value: %v", err)
	}
	return json.Marshal(&p)
}

func refDecode(storedVersion uint32, payload []byte) ([]byte, error) {
	var p Profile
	switch storedVersion {
	case 1:
		var old profileV1
		if err := strict(payload, &old); err != nil {
			return nil, guest.Errorf(abi.CodeCorrupt, "v1 payload: %v", err)
		}
		p = Profile{ID: old.ID, Name: old.FullName, Email: old.Email, Locale: defaultLocale}
	case 2:
		if err := strict(payload, &p); err != nil {
			return nil, guest.Errorf(abi.CodeCorrupt, "v2 payload: %v", err)
		}
	default:
		return nil, guest.Errorf(abi.CodeSchemaMismatch, "stored version %d", storedVersion)
	}
	if err := p.valid(); err != nil {
		return nil, guest.Errorf(abi.CodeCorrupt, "payload: %v", err)
	}
	return json.Marshal(&p)
}

func refJSONSchema[T any](id string, readers ...func([]byte) (T, error)) guest.Codec {
	write := uint32(len(readers))
	readable := make([]uint32, len(readers))
	for i := range readable {
		readable[i] = uint32(i + 1)
	}
	return guest.Codec{
		Decl: abi.CodecDecl{SchemaID: id, WriteVersion: write, ReadableVersions: readable},
		Encode: func(value []byte) ([]byte, error) {
			v, err := readers[write-1](value)
			if err != nil {
				return nil, guest.Errorf(abi.CodeInvalidRequest, "value: %v", err)
			}
			return refCanonical(v), nil
		},
		Decode: func(version uint32, payload []byte) ([]byte, error) {
			if version < 1 || version > write {
				return nil, guest.Errorf(abi.CodeSchemaMismatch, "stored version %d", version)
			}
			v, err := readers[version-1](payload)
			if err != nil {
				return nil, guest.Errorf(abi.CodeCorrupt, "v%d payload: %v", version, err)
			}
			return refCanonical(v), nil
		},
	}
}

func refCanonical(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func refReadProduct(b []byte) (Product, error) {
	var p Product
	err := refReadObject(b,
		refMember{name: "id", read: refReadString(&p.ID)},
		refMember{name: "name", read: refReadString(&p.Name)},
		refMember{name: "price_cents", read: refReadInt(&p.PriceCents)},
		refMember{name: "currency", read: refReadString(&p.Currency)},
		refMember{name: "tags", optional: true, read: refReadStrings(&p.Tags, maxTags)},
	)
	if err != nil {
		return Product{}, err
	}
	if len(p.Tags) == 0 {
		p.Tags = nil
	}
	return p, p.valid()
}

func refReadProductV1(b []byte) (Product, error) {
	var p Product
	var price string
	err := refReadObject(b,
		refMember{name: "id", read: refReadString(&p.ID)},
		refMember{name: "name", read: refReadString(&p.Name)},
		refMember{name: "price", read: refReadString(&price)},
		refMember{name: "currency", read: refReadString(&p.Currency)},
	)
	if err != nil {
		return Product{}, err
	}
	if p.PriceCents, err = parseCents(price); err != nil {
		return Product{}, err
	}
	return p, p.valid()
}

func refReadSearchPage(b []byte) (SearchPage, error) {
	var s SearchPage
	err := refReadObject(b,
		refMember{name: "query", read: refReadString(&s.Query)},
		refMember{name: "page", read: refReadInt(&s.Page)},
		refMember{name: "ids", read: refReadStrings(&s.IDs, maxSearchIDs)},
	)
	if err != nil {
		return SearchPage{}, err
	}
	return s, s.valid()
}

// The reader of object.go at bc9674e.

// member is one member of an object schema. read consumes the member's value
// from the decoder and stores it.
type refMember struct {
	name     string
	optional bool
	read     func(d *refDecoder) error
}

// decoder reads the tokens of one JSON text, data. Its errors for input that
// is not JSON (the decoder's, and invalid UTF-8 or a lone surrogate escape in
// a string, which encoding/json would turn into U+FFFD) are syntaxErrors.
type refDecoder struct {
	data  []byte
	dec   *json.Decoder
	begun bool // a token was read: io.EOF now means truncated JSON
}

func refNewDecoder(data []byte) *refDecoder {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers as their text, so integers are never rounded
	return &refDecoder{data: data, dec: dec}
}

// syntaxError is input that is not JSON, worded without the library's text,
// which may quote input and may change under a guest whose vectors pin its
// details.
type refSyntaxError struct{ msg string }

func (e *refSyntaxError) Error() string { return e.msg }

func refMalformed(offset int64) error {
	return &refSyntaxError{fmt.Sprintf("malformed JSON at byte %d", offset)}
}

// token reads the next token: a json.Delim, a string, a json.Number, a bool
// or nil (null).
func (d *refDecoder) token() (json.Token, error) {
	start := d.dec.InputOffset()
	tok, err := d.dec.Token()
	if err != nil {
		return nil, d.fail(err, start)
	}
	d.begun = true
	if _, ok := tok.(string); ok {
		// The raw text read: separators and one string literal.
		if i := refBadText(d.data[start:], int(d.dec.InputOffset()-start)); i >= 0 {
			return nil, refMalformed(start + int64(i))
		}
	}
	return tok, nil
}

// more reports whether the current object or array has another member or
// element; on malformed input it may report either, and the next token
// call fails.
func (d *refDecoder) more() bool { return d.dec.More() }

// fail words the decoder's error for the token from offset start. As one
// reading the text in order would, it names the first fault: a bad byte or
// escape the decoder let through before it stopped comes first.
func (d *refDecoder) fail(err error, start int64) error {
	var se *json.SyntaxError
	at := int64(len(d.data)) // where the decoder stopped: the end unless malformed
	if errors.As(err, &se) {
		// In token mode the decoder's offsets skip delimiters; a whole-text
		// scan stops at the same first bad byte and counts them all (its
		// Offset includes the bad byte).
		var raw json.RawMessage
		if errors.As(json.Unmarshal(d.data, &raw), &se) && se.Offset > start {
			at = se.Offset - 1
		} else {
			at = d.dec.InputOffset()
		}
	}
	if i := refBadText(d.data[start:], int(at-start)); i >= 0 {
		return refMalformed(start + int64(i))
	}
	switch {
	case errors.Is(err, io.EOF) && !d.begun:
		return &refSyntaxError{"no JSON value"}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &refSyntaxError{"truncated JSON"}
	case se != nil:
		return refMalformed(at)
	}
	return &refSyntaxError{"unreadable JSON"}
}

// badText returns the offset in JSON text b of the first byte before n that
// is not UTF-8 or starts a \u escape of a UTF-16 surrogate not in a valid
// pair or an escape the decoder stopped in, or -1. Before n (where the
// decoder stopped: the end of a token, a bad byte or the end of the input) a
// backslash is in a string. b runs to the end of the input, so a sequence it
// cuts short is truncated input, not a fault.
func refBadText(b []byte, n int) int {
	for i := 0; i < n; {
		switch c := b[i]; {
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[i:])
			switch {
			case !utf8.FullRune(b[i:]):
				return -1
			case r == utf8.RuneError && size == 1:
				return i
			}
			i += size
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			r := refHex4(b[i+2:])
			switch {
			case i+len(`\uXXXX`) > n && n < len(b):
				return i // the decoder stopped at a bad byte in the escape
			case !utf16.IsSurrogate(r):
				i += len(`\uXXXX`) // or the input ends within it
				continue
			}
			// A high surrogate, then \u and a low one.
			pair := b[i:min(i+len(`\uXXXX\uXXXX`), len(b))]
			low := refHex4(b[min(i+8, len(b)):])
			switch {
			case len(pair) > 6 && pair[6] != '\\', len(pair) > 7 && pair[7] != 'u':
				return i
			case len(pair) < 12:
				return -1
			case utf16.DecodeRune(r, low) == utf8.RuneError:
				return i
			}
			i += len(pair)
		case c == '\\':
			if i+2 > n && n < len(b) {
				return i // an escape the decoder stopped at
			}
			i += 2
		default:
			i++
		}
	}
	return -1
}

// hex4 is the value of the 4 hex digits b starts with, or -1.
func refHex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil {
		return -1
	}
	return rune(v)
}

// readObject reads data, which must be exactly one JSON object whose members
// are among ms (names matched exactly, each at most once, none null) and
// include every required one.
func refReadObject(data []byte, ms ...refMember) error {
	d := refNewDecoder(data)
	tok, err := d.token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := make([]bool, len(ms))
	for d.more() {
		tok, err := d.token()
		if err != nil {
			return err
		}
		name, _ := tok.(string) // in a name's place the decoder reads only strings
		i := 0
		for i < len(ms) && ms[i].name != name {
			i++
		}
		switch {
		case i == len(ms):
			return fmt.Errorf("unknown member %.32q", name)
		case seen[i]:
			return errors.New("repeated member")
		}
		seen[i] = true
		if err := ms[i].read(d); err != nil {
			if refIsSyntax(err) {
				return err
			}
			return fmt.Errorf("%s %w", name, err)
		}
	}
	if _, err := d.token(); err != nil { // the '}' (the decoder checks it is)
		return err
	}
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the object")
	}
	for i, m := range ms {
		if !seen[i] && !m.optional {
			return fmt.Errorf("missing member %q", m.name)
		}
	}
	return nil
}

// isSyntax reports whether err is the decoder's (the input is not JSON)
// rather than a member reader's (the JSON is not the schema).
func refIsSyntax(err error) bool {
	var se *refSyntaxError
	return errors.As(err, &se)
}

var (
	refErrNotString  = errors.New("must be a string")
	refErrNotInteger = errors.New("must be an integer")
	refErrNotStrings = errors.New("must be an array of strings")
)

// readString reads a string value into dst.
func refReadString(dst *string) func(*refDecoder) error {
	return func(d *refDecoder) error {
		tok, err := d.token()
		if err != nil {
			return err
		}
		s, ok := tok.(string)
		if !ok {
			return refErrNotString
		}
		*dst = s
		return nil
	}
}

// readInt reads an integer value into dst: a number with a fraction or an
// exponent (1.0, 1e3) or beyond int64 is refused, never rounded.
func refReadInt(dst *int64) func(*refDecoder) error {
	return func(d *refDecoder) error {
		tok, err := d.token()
		if err != nil {
			return err
		}
		n, ok := tok.(json.Number)
		if !ok {
			return refErrNotInteger
		}
		if *dst, err = strconv.ParseInt(string(n), 10, 64); err != nil {
			return refErrNotInteger
		}
		return nil
	}
}

// readStrings reads an array of at most max strings into dst (empty, not
// nil, for []), so a long array is refused before it is read.
func refReadStrings(dst *[]string, max int) func(*refDecoder) error {
	return func(d *refDecoder) error {
		tok, err := d.token()
		if err != nil {
			return err
		}
		if tok != json.Delim('[') {
			return refErrNotStrings
		}
		out := []string{}
		for d.more() {
			if len(out) == max {
				return fmt.Errorf("must hold at most %d strings", max)
			}
			var s string
			if err := refReadString(&s)(d); errors.Is(err, refErrNotString) {
				return refErrNotStrings
			} else if err != nil {
				return err
			}
			out = append(out, s)
		}
		if _, err := d.token(); err != nil { // the ']'
			return err
		}
		*dst = out
		return nil
	}
}
