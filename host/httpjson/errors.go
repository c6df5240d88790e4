package httpjson

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Code is a stable, machine-readable error code of an error body. Codes are
// never renamed; clients switch on them. This package defines the codes
// every endpoint may answer; a capability package defines its own (as Code
// constants) for what only it can answer.
type Code string

// Generic error codes.
const (
	// CodeBadRequest: the body is not the documented JSON (syntax, invalid
	// UTF-8, unknown or duplicate member, wrong type, trailing data, null).
	CodeBadRequest Code = "bad-request"
	// CodeInvalidField: a field is out of its bounds; Field names it.
	CodeInvalidField Code = "invalid-field"
	// CodeTooLarge: the body exceeds the endpoint's limit.
	CodeTooLarge Code = "too-large"
	// CodeUnsupportedMedia: the Content-Type is not application/json.
	CodeUnsupportedMedia Code = "unsupported-media-type"
	// CodeCapabilityDisabled: the capability is not enabled in this host.
	CodeCapabilityDisabled Code = "capability-disabled"
	// CodeNotFound: no such endpoint.
	CodeNotFound Code = "not-found"
	// CodeMethodNotAllowed: the endpoint exists with another method.
	CodeMethodNotAllowed Code = "method-not-allowed"
	// CodeUnavailable: the host is shutting down, the capability cannot
	// serve, or the request's context ended.
	CodeUnavailable Code = "unavailable"
)

// ErrorBody is the JSON body of every non-2xx answer.
type ErrorBody struct {
	Code Code `json:"code"`
	// Message is a short human-readable explanation; it never contains a
	// subject value, a token or request data.
	Message string `json:"message"`
	// Field is the offending request field for invalid-field (JSON name).
	Field string `json:"field,omitempty"`
	// Detail is bounded, sanitised operator detail (admin endpoints only).
	Detail string `json:"detail,omitempty"`
}

// Error is a request failure: the HTTP status, the JSON body and an
// optional Retry-After. Handlers return it instead of writing directly so
// that one place formats every error; decoders return it too (errors.As).
type Error struct {
	Status int
	Body   ErrorBody
	// RetryAfter, when positive, is sent as Retry-After (whole seconds,
	// rounded up).
	RetryAfter time.Duration
}

// Error implements error.
func (e *Error) Error() string { return string(e.Body.Code) + ": " + e.Body.Message }

// Code returns the stable error code.
func (e *Error) Code() Code { return e.Body.Code }

// NewError returns an error answer.
func NewError(status int, code Code, msg string) *Error {
	return &Error{Status: status, Body: ErrorBody{Code: code, Message: msg}}
}

// FieldError returns a 400 invalid-field answer naming field.
func FieldError(field, msg string) *Error {
	e := NewError(http.StatusBadRequest, CodeInvalidField, msg)
	e.Body.Field = field
	return e
}

// WriteJSON writes v with status and headers that keep the answer out of
// caches and content sniffing. Encoding errors are impossible for the
// plain structs callers pass; a failed write means the client went away.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"response encoding failed"}`)
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// WriteError writes e (a 401 also gets the admin Bearer challenge).
func WriteError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="caphost-admin"`)
	}
	WriteJSON(w, e.Status, e.Body)
}

// Sanitize bounds text for an error message or detail and keeps printable
// ASCII only, so client- or module-derived text cannot forge log lines or
// inject markup.
func Sanitize(s string, max int) string {
	if len(s) > max {
		s = s[:max]
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// Handler adapts a sidecar operation to net/http: a nil *Error writes v as
// 200 JSON (every outcome, CONTENDED and INDETERMINATE included, is a 200),
// a non-nil one writes the typed error.
func Handler[T any](serve func(http.ResponseWriter, *http.Request) (T, *Error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, e := serve(w, r)
		if e != nil {
			WriteError(w, e)
			return
		}
		WriteJSON(w, http.StatusOK, v)
	})
}
