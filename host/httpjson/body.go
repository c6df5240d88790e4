package httpjson

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/caphost/caphost/plugins/strictjson"
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
// struct, with plugins/strictjson, the one decoder caphost applies to
// untrusted JSON (github.com/go-json-experiment/json, the design of
// encoding/json/v2, with every leniency off):
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
	if err := strictjson.Unmarshal(body, v); err != nil {
		return NewError(http.StatusBadRequest, CodeBadRequest, err.Error())
	}
	return nil
}
