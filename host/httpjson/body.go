package httpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
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
// struct: exactly one JSON object, no unknown member, nothing after it.
// Every failure is a 400 bad-request (413 too-large over max) whose
// message names at most a member, never a value.
func Decode(body []byte, max int, v any) *Error {
	if len(body) > max {
		return NewError(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body exceeds %d bytes", max))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return NewError(http.StatusBadRequest, CodeBadRequest, problem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return NewError(http.StatusBadRequest, CodeBadRequest, "trailing data after the JSON object")
	}
	return nil
}

// problem describes a decoding error without echoing request data (json
// errors quote offending values; a value may be a subject).
func problem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %s must be %s", Sanitize(te.Field, 64), te.Type.String())
		}
		return "the body must be a JSON object"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the body is empty or truncated"
	}
	// DisallowUnknownFields: `json: unknown field "x"`; the name is the
	// client's own key, bounded and sanitised.
	return Sanitize(err.Error(), 128)
}
