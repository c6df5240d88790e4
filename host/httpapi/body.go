package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
)

// The request-body rules every JSON endpoint shares: application/json (or
// no content type), a byte bound checked before and while reading, and
// strict decoding (unknown fields, trailing data and type errors fail
// without echoing the offending value).

// readBody reads a JSON request body of at most max bytes.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *Error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, newError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "send application/json")
		}
	}
	tooLarge := newError(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body exceeds %d bytes", max))
	if r.ContentLength > max {
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, tooLarge
		}
		return nil, newError(http.StatusBadRequest, CodeBadRequest, "the body could not be read")
	}
	return body, nil
}

// decodeStrict decodes body (at most max bytes) into v: exactly one JSON
// object, no unknown fields, nothing after it.
func decodeStrict(body []byte, max int, v any) *Error {
	if len(body) > max {
		return newError(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body exceeds %d bytes", max))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return newError(http.StatusBadRequest, CodeBadRequest, jsonProblem(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return newError(http.StatusBadRequest, CodeBadRequest, "trailing data after the JSON object")
	}
	return nil
}
