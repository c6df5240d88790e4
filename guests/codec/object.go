package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The product and search-page schemas read JSON through readObject rather
// than encoding/json's Unmarshal, which matches member names
// case-insensitively, keeps the last of a repeated member, reads null as the
// zero value and turns invalid UTF-8 and lone surrogate escapes into U+FFFD:
// each would let a value the schema does not define pass as one it does, and
// a missing price_cents read as a price of 0. readObject walks the tokens of
// encoding/json's Decoder, which gives the exact member names, and refuses
// the rest itself; the guest keeps to the standard library (DESIGN). Errors
// name members, never values.

// member is one member of an object schema. read consumes the member's value
// from the decoder and stores it.
type member struct {
	name     string
	optional bool
	read     func(d *decoder) error
}

// decoder reads the tokens of one JSON text, data. Its errors for input that
// is not JSON (the decoder's, and invalid UTF-8 or a lone surrogate escape in
// a string, which encoding/json would turn into U+FFFD) are syntaxErrors.
type decoder struct {
	data  []byte
	dec   *json.Decoder
	begun bool // a token was read: io.EOF now means truncated JSON
}

func newDecoder(data []byte) *decoder {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers as their text, so integers are never rounded
	return &decoder{data: data, dec: dec}
}

// syntaxError is input that is not JSON, worded without the library's text,
// which may quote input and may change under a guest whose vectors pin its
// details.
type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }

func malformed(offset int64) error {
	return &syntaxError{fmt.Sprintf("malformed JSON at byte %d", offset)}
}

// token reads the next token: a json.Delim, a string, a json.Number, a bool
// or nil (null).
func (d *decoder) token() (json.Token, error) {
	start := d.dec.InputOffset()
	tok, err := d.dec.Token()
	if err != nil {
		return nil, d.fail(err, start)
	}
	d.begun = true
	if _, ok := tok.(string); ok {
		// The raw text read: separators and one string literal.
		if i := badText(d.data[start:], int(d.dec.InputOffset()-start)); i >= 0 {
			return nil, malformed(start + int64(i))
		}
	}
	return tok, nil
}

// more reports whether the current object or array has another member or
// element; on malformed input it may report either, and the next token
// call fails.
func (d *decoder) more() bool { return d.dec.More() }

// fail words the decoder's error for the token from offset start. As one
// reading the text in order would, it names the first fault: a bad byte or
// escape the decoder let through before it stopped comes first.
func (d *decoder) fail(err error, start int64) error {
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
	if i := badText(d.data[start:], int(at-start)); i >= 0 {
		return malformed(start + int64(i))
	}
	switch {
	case errors.Is(err, io.EOF) && !d.begun:
		return &syntaxError{"no JSON value"}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &syntaxError{"truncated JSON"}
	case se != nil:
		return malformed(at)
	}
	return &syntaxError{"unreadable JSON"}
}

// badText returns the offset in JSON text b of the first byte before n that
// is not UTF-8 or starts a \u escape of a UTF-16 surrogate not in a valid
// pair or an escape the decoder stopped in, or -1. Before n (where the
// decoder stopped: the end of a token, a bad byte or the end of the input) a
// backslash is in a string. b runs to the end of the input, so a sequence it
// cuts short is truncated input, not a fault.
func badText(b []byte, n int) int {
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
			r := hex4(b[i+2:])
			switch {
			case i+len(`\uXXXX`) > n && n < len(b):
				return i // the decoder stopped at a bad byte in the escape
			case !utf16.IsSurrogate(r):
				i += len(`\uXXXX`) // or the input ends within it
				continue
			}
			// A high surrogate, then \u and a low one.
			pair := b[i:min(i+len(`\uXXXX\uXXXX`), len(b))]
			low := hex4(b[min(i+8, len(b)):])
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
func hex4(b []byte) rune {
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
func readObject(data []byte, ms ...member) error {
	d := newDecoder(data)
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
			if isSyntax(err) {
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
func isSyntax(err error) bool {
	var se *syntaxError
	return errors.As(err, &se)
}

var (
	errNotString  = errors.New("must be a string")
	errNotInteger = errors.New("must be an integer")
	errNotStrings = errors.New("must be an array of strings")
)

// readString reads a string value into dst.
func readString(dst *string) func(*decoder) error {
	return func(d *decoder) error {
		tok, err := d.token()
		if err != nil {
			return err
		}
		s, ok := tok.(string)
		if !ok {
			return errNotString
		}
		*dst = s
		return nil
	}
}

// readInt reads an integer value into dst: a number with a fraction or an
// exponent (1.0, 1e3) or beyond int64 is refused, never rounded.
func readInt(dst *int64) func(*decoder) error {
	return func(d *decoder) error {
		tok, err := d.token()
		if err != nil {
			return err
		}
		n, ok := tok.(json.Number)
		if !ok {
			return errNotInteger
		}
		if *dst, err = strconv.ParseInt(string(n), 10, 64); err != nil {
			return errNotInteger
		}
		return nil
	}
}

// readStrings reads an array of at most max strings into dst (empty, not
// nil, for []), so a long array is refused before it is read.
func readStrings(dst *[]string, max int) func(*decoder) error {
	return func(d *decoder) error {
		tok, err := d.token()
		if err != nil {
			return err
		}
		if tok != json.Delim('[') {
			return errNotStrings
		}
		out := []string{}
		for d.more() {
			if len(out) == max {
				return fmt.Errorf("must hold at most %d strings", max)
			}
			var s string
			if err := readString(&s)(d); errors.Is(err, errNotString) {
				return errNotStrings
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
