package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// The product and search-page schemas read JSON through readObject rather
// than encoding/json's Unmarshal, which matches member names
// case-insensitively, keeps the last of a repeated member, reads null as the
// zero value and turns invalid UTF-8 into U+FFFD: each would let a value the
// schema does not define pass as one it does, and a missing price_cents read
// as a price of 0. jsontext refuses repeated names and invalid UTF-8 itself;
// readObject refuses the rest. Errors name members, never values.

// member is one member of an object schema. read consumes the member's value
// from the decoder and stores it.
type member struct {
	name     string
	optional bool
	read     func(d *jsontext.Decoder) error
}

// readObject reads data, which must be exactly one JSON object whose members
// are among ms (names matched exactly) and include every required one.
func readObject(data []byte, ms ...member) error {
	d := jsontext.NewDecoder(bytes.NewReader(data))
	tok, err := d.ReadToken()
	if err != nil {
		return syntax(err)
	}
	if tok.Kind() != jsontext.KindBeginObject {
		return errors.New("not a JSON object")
	}
	seen := make([]bool, len(ms))
	for d.PeekKind() != jsontext.KindEndObject {
		tok, err := d.ReadToken() // jsontext refuses a repeated name here
		if err != nil {
			return syntax(err)
		}
		name := tok.String()
		i := 0
		for i < len(ms) && ms[i].name != name {
			i++
		}
		if i == len(ms) {
			return fmt.Errorf("unknown member %.32q", name)
		}
		seen[i] = true
		if err := ms[i].read(d); err != nil {
			if isSyntax(err) {
				return syntax(err)
			}
			return fmt.Errorf("%s %w", name, err)
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return syntax(err)
	}
	if _, err := d.ReadToken(); !errors.Is(err, io.EOF) {
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
	var se *jsontext.SyntacticError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &se)
}

// syntax words a decoder error without the library's text, which may quote
// input and may change under a guest whose vectors pin its details.
func syntax(err error) error {
	var se *jsontext.SyntacticError
	switch {
	case errors.Is(err, io.EOF):
		return errors.New("no JSON value")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("truncated JSON")
	case errors.Is(err, jsontext.ErrDuplicateName):
		return errors.New("repeated member")
	case errors.As(err, &se):
		return fmt.Errorf("malformed JSON at byte %d", se.ByteOffset)
	}
	return err
}

var (
	errNotString  = errors.New("must be a string")
	errNotInteger = errors.New("must be an integer")
	errNotStrings = errors.New("must be an array of strings")
)

// token reads the next token, which must be of kind k (else wrong).
func token(d *jsontext.Decoder, k jsontext.Kind, wrong error) (jsontext.Token, error) {
	tok, err := d.ReadToken()
	if err == nil && tok.Kind() != k {
		err = wrong
	}
	return tok, err
}

// readString reads a string value into dst.
func readString(dst *string) func(*jsontext.Decoder) error {
	return func(d *jsontext.Decoder) error {
		tok, err := token(d, jsontext.KindString, errNotString)
		if err == nil {
			*dst = tok.String()
		}
		return err
	}
}

// readInt reads an integer value into dst: a number with a fraction or an
// exponent (1.0, 1e3) is refused, never rounded.
func readInt(dst *int64) func(*jsontext.Decoder) error {
	return func(d *jsontext.Decoder) error {
		tok, err := token(d, jsontext.KindNumber, errNotInteger)
		if err != nil {
			return err
		}
		if *dst, err = tok.Int(); err != nil {
			return errNotInteger
		}
		return nil
	}
}

// readStrings reads an array of at most max strings into dst (empty, not
// nil, for []), so a long array is refused before it is read.
func readStrings(dst *[]string, max int) func(*jsontext.Decoder) error {
	return func(d *jsontext.Decoder) error {
		if _, err := token(d, jsontext.KindBeginArray, errNotStrings); err != nil {
			return err
		}
		out := []string{}
		for d.PeekKind() != jsontext.KindEndArray {
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
		if _, err := d.ReadToken(); err != nil {
			return err
		}
		*dst = out
		return nil
	}
}
