// Package httpjson owns the JSON wire conventions every caphost HTTP
// endpoint shares: the one strict request-body reader (ReadBody, Decode),
// the error body with its stable codes (Error, ErrorBody, Code), the
// response writers (WriteJSON, WriteError) and the mounting of ServeMux
// patterns with a JSON 405 for other methods (Mount).
//
// Every request body is untrusted: it is size-bounded before and while it
// is read, and decoded strictly by github.com/go-json-experiment/json (the design of
// encoding/json/v2) — exactly one JSON object, valid UTF-8 without lone
// surrogates, no unknown, duplicate or case-variant member, no null,
// nothing after it. No error message repeats a request
// value: a value may be a subject, a token or a secret.
//
// It is a leaf: it imports the standard library and that JSON library
// only, so every capability package can answer in the same shape without
// depending on the daemon.
//
// What may change here: new generic codes, stricter bounds. What must not:
// the names and meanings of existing codes and of the error body's fields
// (clients switch on them).
package httpjson
