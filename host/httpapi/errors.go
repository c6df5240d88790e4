package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Code is a stable, machine-readable error code of an error body. The set
// is closed; clients switch on it, so a code is never renamed.
type Code string

// Error codes.
const (
	// CodeBadRequest: the body is not the documented JSON (syntax, unknown
	// field, wrong type, trailing data).
	CodeBadRequest Code = "bad-request"
	// CodeInvalidField: a field is out of its bounds; Field names it.
	CodeInvalidField Code = "invalid-field"
	// CodeTooLarge: the body exceeds the endpoint's limit.
	CodeTooLarge Code = "too-large"
	// CodeUnsupportedMedia: the Content-Type is not application/json.
	CodeUnsupportedMedia Code = "unsupported-media-type"
	// CodeUnknownPolicy: the explicit policy is not in the active set.
	CodeUnknownPolicy Code = "unknown-policy"
	// CodeMissingSubject: a dimension the policy needs has no value.
	CodeMissingSubject Code = "missing-subject"
	// CodeInvalidRequest: the limiter rejected the request as invalid (cost
	// above the policy's maximum, dimensions that do not fit).
	CodeInvalidRequest Code = "invalid-request"
	// CodeCapabilityDisabled: the capability is not enabled in this host.
	CodeCapabilityDisabled Code = "capability-disabled"
	// CodeSelectorUnavailable: policy selection failed; nothing was
	// evaluated and the request must not be allowed.
	CodeSelectorUnavailable Code = "selector-unavailable"
	// CodeUnauthorized: missing or wrong admin bearer token.
	CodeUnauthorized Code = "unauthorized"
	// CodeNotFound: no such endpoint (or admin endpoints are not enabled).
	CodeNotFound Code = "not-found"
	// CodeMethodNotAllowed: the endpoint exists with another method.
	CodeMethodNotAllowed Code = "method-not-allowed"
	// CodeUnknownGuest: no configured guest has that name.
	CodeUnknownGuest Code = "unknown-guest"
	// CodeSwapBusy: another swap is in progress; retry later.
	CodeSwapBusy Code = "swap-busy"
	// CodeGuestUntrusted: the module's digest or signature was rejected.
	CodeGuestUntrusted Code = "guest-untrusted"
	// CodeGuestInvalid: the module failed to compile, instantiate or
	// describe itself, or declares what the slot cannot accept.
	CodeGuestInvalid Code = "guest-invalid"
	// CodeSwapFailed: the swap failed for another reason; the previous
	// generation keeps serving.
	CodeSwapFailed Code = "swap-failed"
	// CodeUnavailable: the host is shutting down or the request's context ended.
	CodeUnavailable Code = "unavailable"
)

// ErrorBody is the JSON body of every non-2xx answer of this package.
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

// Error is a request failure: the HTTP status and the JSON body. Handlers
// return it instead of writing directly so that one place formats every
// error; DecodeEvaluateRequest returns it too (errors.As).
type Error struct {
	Status     int
	Body       ErrorBody
	retryAfter time.Duration
}

// Error implements error.
func (e *Error) Error() string { return string(e.Body.Code) + ": " + e.Body.Message }

// Code returns the stable error code.
func (e *Error) Code() Code { return e.Body.Code }

func newError(status int, code Code, msg string) *Error {
	return &Error{Status: status, Body: ErrorBody{Code: code, Message: msg}}
}

func fieldError(field, msg string) *Error {
	e := newError(http.StatusBadRequest, CodeInvalidField, msg)
	e.Body.Field = field
	return e
}

// writeJSON writes v with status. Encoding errors are impossible for the
// types used here; a failed write means the client went away.
func writeJSON(w http.ResponseWriter, status int, v any) {
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

func writeError(w http.ResponseWriter, e *Error) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.retryAfter+time.Second-1)/time.Second), 10))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="caphost-admin"`)
	}
	writeJSON(w, e.Status, e.Body)
}

// sanitize bounds text for an error detail and keeps printable ASCII only,
// so a module-derived message cannot forge log lines or inject markup.
func sanitize(s string, max int) string {
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
