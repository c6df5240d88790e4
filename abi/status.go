package abi

import (
	"fmt"
	"unicode/utf8"
)

// Code is the status byte that starts every response frame. Codes other than
// OK are outcomes the guest reports deliberately; they are not guest failures
// (a trap, timeout or malformed frame is a host-side guest error instead).
//
// A Code is an error value so callers can write errors.Is(err, abi.CodeCorrupt).
type Code uint8

// Status codes of ABI v1.
const (
	// CodeOK: the body is the export's response message.
	CodeOK Code = 0
	// CodeSchemaMismatch: codec decode cannot read the stored version (host maps to IncompatibleSchema).
	CodeSchemaMismatch Code = 1
	// CodeCorrupt: codec decode found a payload it cannot parse (host maps to CORRUPT).
	CodeCorrupt Code = 2
	// CodeInvalidRequest: the request is well-formed but semantically unacceptable to the guest.
	CodeInvalidRequest Code = 3
	// CodeNotFound: unknown schema, region, template, version, locale or channel.
	CodeNotFound Code = 4
	// CodeUnsupported: the export's kind is not implemented by this module.
	CodeUnsupported Code = 5
	// CodeInternal: the guest failed for a reason of its own.
	CodeInternal Code = 6
	codeEnd      Code = 7
)

var codeNames = [...]string{
	CodeOK:             "ok",
	CodeSchemaMismatch: "schema-mismatch",
	CodeCorrupt:        "corrupt",
	CodeInvalidRequest: "invalid-request",
	CodeNotFound:       "not-found",
	CodeUnsupported:    "unsupported",
	CodeInternal:       "internal",
}

// Valid reports whether c is a v1 code.
func (c Code) Valid() bool { return c < codeEnd }

// String implements fmt.Stringer.
func (c Code) String() string {
	if c.Valid() {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Error implements error so a Code can be an errors.Is target.
func (c Code) Error() string { return "abi: guest status " + c.String() }

// MaxDetailBytes bounds the human-readable detail of a non-OK frame.
const MaxDetailBytes = 256

// StatusError is a non-OK status reported by a guest, with its bounded detail.
type StatusError struct {
	Code   Code
	Detail string
}

// Error implements error.
func (e *StatusError) Error() string {
	if e.Detail == "" {
		return e.Code.Error()
	}
	return e.Code.Error() + ": " + e.Detail
}

// Is makes errors.Is(err, abi.CodeX) match the status code.
func (e *StatusError) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// AppendOKFrame starts an OK response frame; append the response message after it.
func AppendOKFrame(b []byte) []byte { return append(b, byte(CodeOK)) }

// AppendErrorFrame appends a complete non-OK frame. The detail is truncated to
// MaxDetailBytes on a rune boundary.
func AppendErrorFrame(b []byte, c Code, detail string) []byte {
	if c == CodeOK || !c.Valid() {
		c = CodeInternal
	}
	b = append(b, byte(c))
	return AppendString(b, truncateUTF8(detail, MaxDetailBytes))
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ParseFrame splits a response frame. For OK it returns the body (a view into
// frame); otherwise it returns a *StatusError. A frame that violates the ABI
// returns an error matching ErrMalformed.
func ParseFrame(frame []byte) (body []byte, err error) {
	if len(frame) == 0 {
		return nil, malformed("frame", 0, "empty response frame")
	}
	c := Code(frame[0])
	if c == CodeOK {
		return frame[1:], nil
	}
	if !c.Valid() {
		return nil, malformed("status", 0, "unknown status code")
	}
	var d Decoder
	d.Reset(frame[1:])
	detail := d.String("detail", MaxDetailBytes)
	if err := d.Finish(); err != nil {
		return nil, err
	}
	if !utf8.ValidString(detail) {
		return nil, malformed("detail", 1, "detail is not UTF-8")
	}
	return nil, &StatusError{Code: c, Detail: detail}
}
