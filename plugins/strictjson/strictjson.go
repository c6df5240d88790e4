// Package strictjson is the one JSON decoder for documents caphost reads
// from an untrusted party: a guest's describe output (package plugins, for
// both flavours), detached signature documents (plugins/trust) and HTTP
// request bodies (host/httpjson, which adds the size bound and the HTTP
// error). It is github.com/go-json-experiment/json (the
// design of encoding/json/v2) with every leniency of encoding/json turned
// off, so two readers can never see one document differently:
//
//   - exactly one JSON object, nothing after it but whitespace;
//   - member names match exactly (case-sensitively), an unknown one fails;
//   - a duplicate member name fails (encoding/json keeps the last one);
//   - invalid UTF-8 and lone surrogate escapes (\ud800) fail (encoding/json
//     turns both into U+FFFD);
//   - null is never a value: a writer omits an optional member instead
//     (encoding/json reads null as the zero value, hiding a missing one).
//
// Errors never quote a value, only a JSON pointer (the writer's own member
// names, sanitised and bounded) or a byte offset.
//
// What may change here: more refusals. What must not: accepting anything
// this package refuses today.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/caphost/caphost/plugins/internal/guestio"
)

// ErrRefused is matched (errors.Is) by every *Error.
var ErrRefused = errors.New("strictjson: document refused")

// maxPointerBytes bounds the JSON pointer an error repeats.
const maxPointerBytes = 128

// Error is a refused document. Its message names at most a member's JSON
// pointer or a byte offset, never a value.
type Error struct {
	// Pointer locates the problem ("" for the document itself), sanitised.
	Pointer string
	// Reason says what is wrong there.
	Reason string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Pointer == "" {
		return e.Reason
	}
	return e.Reason + " " + e.Pointer
}

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *Error) Unwrap() error { return ErrRefused }

// options are the decoder's settings, spelled out although most are the
// library's defaults: they are the contract of this package.
var options = json.JoinOptions(
	json.RejectUnknownMembers(true),
	json.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

// Unmarshal decodes data, which must be one JSON object, into v, a pointer
// to a struct, by the rules of the package comment. Every failure is an
// *Error.
func Unmarshal(data []byte, v any) error {
	if err := shape(data); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v, options); err != nil {
		return problem(err)
	}
	return nil
}

// shape reads data's tokens once with the library's strict tokenizer
// (syntax, UTF-8, surrogates, duplicate names) and checks what Unmarshal
// does not: one top-level object and no null anywhere.
func shape(data []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data), options)
	done := false // the top-level object is complete
	for n := 0; ; n++ {
		tok, err := dec.ReadToken()
		switch {
		case errors.Is(err, io.EOF) && n == 0:
			return &Error{Reason: "empty document"}
		case errors.Is(err, io.EOF):
			return nil
		case done:
			// The tokenizer reads a stream of values, or refuses what
			// follows the object: either way there is more than one.
			return &Error{Reason: "trailing data after the JSON object"}
		case err != nil:
			return problem(err)
		case n == 0 && tok.Kind() != '{':
			return &Error{Reason: "the document must be a JSON object"}
		case tok.Kind() == 'n':
			return &Error{Reason: "null (omit the member instead) at", Pointer: pointer(dec.StackPointer())}
		}
		done = dec.StackDepth() == 0
	}
}

// problem turns a library error into an *Error without echoing input (the
// library's messages may quote it).
func problem(err error) error {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Reason: "truncated document"}
	case errors.As(err, &syn) && errors.Is(syn.Err, jsontext.ErrDuplicateName):
		return &Error{Reason: "duplicate member", Pointer: pointer(syn.JSONPointer)}
	case errors.As(err, &syn):
		return &Error{Reason: fmt.Sprintf("malformed JSON at byte %d (syntax, invalid UTF-8 or an invalid escape)", syn.ByteOffset)}
	case errors.Is(err, json.ErrUnknownName) && errors.As(err, &sem):
		return &Error{Reason: "unknown member", Pointer: pointer(sem.JSONPointer)}
	case errors.As(err, &sem) && sem.JSONPointer == "":
		return &Error{Reason: "the document must be a JSON object"}
	case errors.As(err, &sem):
		return &Error{Reason: "must be " + kindOf(sem.GoType) + ":", Pointer: pointer(sem.JSONPointer)}
	}
	return &Error{Reason: "not the documented JSON"}
}

func pointer(p jsontext.Pointer) string {
	if p == "" {
		return "(top level)"
	}
	return guestio.Sanitize([]byte(p), maxPointerBytes)
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
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "of another type"
}
