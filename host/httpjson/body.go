package httpjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// ReadBody reads a JSON request body of at most max bytes: the media type
// must be application/json (or absent), and the bound is checked against
// Content-Length before reading and enforced while reading.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *Error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, NewError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "send application/json")
		}
	}
	tooLarge := NewError(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body exceeds %d bytes", max))
	if r.ContentLength > max {
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, tooLarge
		}
		return nil, NewError(http.StatusBadRequest, CodeBadRequest, "the body could not be read")
	}
	return body, nil
}

// Decode decodes body (at most max bytes) into v, which must point to a
// struct. The decoder is github.com/go-json-experiment/json (the design
// of encoding/json/v2), strict by default where encoding/json is lenient:
//   - exactly one JSON object, nothing after it; a body of null is not {};
//   - invalid UTF-8 and lone surrogate escapes (\ud800) fail instead of
//     becoming U+FFFD, so two distinct byte strings never decode to one
//     value (one client could otherwise spend another's quota);
//   - duplicate member names fail, also inside maps;
//   - names match exactly (case-sensitively), an unknown member fails;
//   - null is never a value: omit the member instead.
//
// Every failure is a 400 bad-request (413 too-large over max) whose
// message names at most a member's JSON pointer or a byte offset, never a
// value.
func Decode(body []byte, max int, v any) *Error {
	if len(body) > max {
		return NewError(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body exceeds %d bytes", max))
	}
	if msg := shape(body); msg != "" {
		return NewError(http.StatusBadRequest, CodeBadRequest, msg)
	}
	if err := json.Unmarshal(body, v, json.RejectUnknownMembers(true)); err != nil {
		return NewError(http.StatusBadRequest, CodeBadRequest, problem(err))
	}
	return nil
}

// shape reads body's tokens once with the library's strict tokenizer
// (syntax, UTF-8, surrogates, duplicate names) and checks what Unmarshal
// does not: one top-level object and no null anywhere.
func shape(body []byte) string {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	done := false // the top-level object is complete
	for n := 0; ; n++ {
		tok, err := dec.ReadToken()
		switch {
		case errors.Is(err, io.EOF) && n == 0:
			return "the body is empty"
		case errors.Is(err, io.EOF):
			return ""
		case done:
			// The tokenizer reads a stream of values, or refuses what
			// follows the object: either way there is more than one.
			return "trailing data after the JSON object"
		case err != nil:
			return problem(err)
		case n == 0 && tok.Kind() != '{':
			return "the body must be a JSON object"
		case tok.Kind() == 'n':
			return "member " + pointer(dec.StackPointer()) + " is null: omit it instead"
		}
		done = dec.StackDepth() == 0
	}
}

// problem describes a decoding error without echoing request data (the
// library's messages may quote input).
func problem(err error) string {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the body is truncated"
	case errors.As(err, &syn) && errors.Is(syn.Err, jsontext.ErrDuplicateName):
		return "duplicate member " + pointer(syn.JSONPointer)
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d (syntax, invalid UTF-8 or an invalid escape)", syn.ByteOffset)
	case errors.Is(err, json.ErrUnknownName) && errors.As(err, &sem):
		return "unknown member " + pointer(sem.JSONPointer)
	case errors.As(err, &sem) && sem.JSONPointer == "":
		return "the body must be a JSON object"
	case errors.As(err, &sem):
		return "member " + pointer(sem.JSONPointer) + " must be " + kindOf(sem.GoType)
	}
	return "the body is not the documented JSON"
}

// pointer renders a JSON pointer for a message: the client's own member
// names, bounded and sanitised.
func pointer(p jsontext.Pointer) string {
	if p == "" {
		return "(top level)"
	}
	return Sanitize(string(p), 128)
}

// kindOf names the JSON kind a Go type is decoded from.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "of another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "of another type"
}
