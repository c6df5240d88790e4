// Package vectors is the readable JSON form of caphost self-test vectors:
// what guests/<name>/selftest.json holds and what the selftestpack tool
// encodes into the module's caphost.selftest.v1 custom section
// (abi.SelfTestVectors). Each vector names an export, a typed request and
// the typed response (or status code and detail) the guest must answer; the
// binary request and the exact response frame are derived with package abi's
// encoders, which are canonical, so a JSON vector has exactly one binary form.
//
// The format is documented in docs/guests.md ("Self-test vectors"). It is a
// build-time authoring format, not part of the ABI: the host only ever reads
// the binary section.
package vectors

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/caphost/caphost/abi"
)

// Format is the value of the file's "format" field.
const Format = "caphost-selftest-v1"

// MaxFileBytes bounds a vectors file.
const MaxFileBytes = 4 << 20

// ErrInvalid is matched (errors.Is) by every error about a vectors file.
var ErrInvalid = errors.New("vectors: invalid self-test vectors")

// File is a parsed vectors file.
type File struct {
	// Module is the module name the guest's describe must report; it stops
	// a file from being bundled into the wrong guest.
	Module  string
	Vectors []Vector
}

// Vector is one request and the answer the guest must give.
type Vector struct {
	// Name says what the vector proves; unique within a file.
	Name   string
	Export abi.Export
	// Request is the export's request message (*abi.RateSelectRequest for
	// ExportRateSelect, ...).
	Request abi.Message
	// Recorded is false for a vector whose response has not been recorded
	// yet (the file omits "response"); such a file cannot be bundled.
	Recorded bool
	// Status is the frame's status code.
	Status abi.Code
	// Detail is the detail of a non-OK frame.
	Detail string
	// Response is the export's response message when Status is OK.
	Response abi.Message
}

// newMessages returns empty request and response messages for e.
func newMessages(e abi.Export) (req, resp abi.Message) {
	switch e {
	case abi.ExportCodecEncode:
		return &abi.CodecEncodeRequest{}, &abi.CodecEncodeResponse{}
	case abi.ExportCodecDecode:
		return &abi.CodecDecodeRequest{}, &abi.CodecDecodeResponse{}
	case abi.ExportCacheCanonicalize:
		return &abi.CanonicalizeRequest{}, &abi.CanonicalizeResponse{}
	case abi.ExportCacheAdmit:
		return &abi.AdmitRequest{}, &abi.AdmitResponse{}
	case abi.ExportRateSelect:
		return &abi.RateSelectRequest{}, &abi.RateSelectResponse{}
	case abi.ExportRender:
		return &abi.RenderRequest{}, &abi.RenderResponse{}
	}
	return nil, nil
}

func parseExport(name string) (abi.Export, bool) {
	for e := abi.ExportDescribe + 1; int(e) < abi.NumExports; e++ {
		if e.Name() == name {
			return e, true
		}
	}
	return 0, false
}

func parseCode(name string) (abi.Code, bool) {
	for c := abi.CodeOK; c.Valid(); c++ {
		if c.String() == name {
			return c, true
		}
	}
	return 0, false
}

// Parse decodes a vectors file strictly (see strict: exact member names, no
// unknown or duplicate member, valid UTF-8, no null, no trailing data): an
// unknown export or status, a body on a non-OK response and duplicate or
// empty vector names are errors too. A vector without a response is accepted (see
// Vector.Recorded).
func Parse(data []byte) (*File, error) {
	if len(data) > MaxFileBytes {
		return nil, invalid("file exceeds %d bytes", MaxFileBytes)
	}
	var raw fileJSON
	if err := strict(data, &raw); err != nil {
		return nil, invalid("%v", err)
	}
	if raw.Format != Format {
		return nil, invalid("format is %q, want %q", raw.Format, Format)
	}
	if raw.Module == "" {
		return nil, invalid("module is required")
	}
	if len(raw.Vectors) == 0 || len(raw.Vectors) > abi.MaxSelfTestVectors {
		return nil, invalid("%d vectors, want 1..%d", len(raw.Vectors), abi.MaxSelfTestVectors)
	}
	f := &File{Module: raw.Module, Vectors: make([]Vector, len(raw.Vectors))}
	names := map[string]bool{}
	for i, rv := range raw.Vectors {
		v, err := parseVector(rv)
		if err != nil {
			return nil, invalid("vector %d (%q): %v", i, rv.Name, err)
		}
		if names[v.Name] {
			return nil, invalid("vector %d: duplicate name %q", i, v.Name)
		}
		names[v.Name] = true
		f.Vectors[i] = v
	}
	return f, nil
}

func parseVector(rv vectorJSON) (Vector, error) {
	v := Vector{Name: rv.Name}
	if rv.Name == "" {
		return v, errors.New("name is required")
	}
	e, ok := parseExport(rv.Export)
	if !ok {
		return v, fmt.Errorf("export %q is not a callable v1 export (caphost_codec_encode, caphost_rate_select, ...)", rv.Export)
	}
	v.Export = e
	if rv.Request == nil {
		return v, errors.New("request is required")
	}
	req, err := decodeRequest(e, rv.Request)
	if err != nil {
		return v, fmt.Errorf("request: %w", err)
	}
	v.Request = req
	if rv.Response == nil {
		return v, nil
	}
	var r responseJSON
	if err := strict(rv.Response, &r); err != nil {
		return v, fmt.Errorf("response: %w", err)
	}
	code, ok := parseCode(r.Status)
	if !ok {
		return v, fmt.Errorf("response status %q is not a v1 status (ok, corrupt, not-found, ...)", r.Status)
	}
	v.Recorded, v.Status = true, code
	if code != abi.CodeOK {
		if r.Body != nil {
			return v, fmt.Errorf("response: a %s answer has a detail, not a body", code)
		}
		v.Detail = r.Detail
		return v, nil
	}
	if r.Detail != "" {
		return v, errors.New("response: an ok answer has a body, not a detail")
	}
	if r.Body == nil {
		return v, errors.New("response: an ok answer needs a body")
	}
	if v.Response, err = decodeResponse(e, r.Body); err != nil {
		return v, fmt.Errorf("response body: %w", err)
	}
	return v, nil
}

// ReadFile reads and parses a vectors file (at most MaxFileBytes).
func ReadFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Mismatches sends every vector's request to call, which answers a response
// frame (guest.Dispatcher.Handle in a guest's native unit test), and
// describes every vector whose answer differs from the recorded one.
func (f *File) Mismatches(call func(e abi.Export, req []byte) []byte) []string {
	var out []string
	for i := range f.Vectors {
		v := &f.Vectors[i]
		req, err := v.RequestBytes()
		var want []byte
		if err == nil {
			want, err = v.Frame()
		}
		if err != nil {
			out = append(out, fmt.Sprintf("vector %d (%q): %v", i, v.Name, err))
			continue
		}
		got := call(v.Export, req)
		if bytes.Equal(got, want) {
			continue
		}
		answer := Vector{Export: v.Export}
		desc := "a malformed frame"
		if answer.SetFrame(got) == nil {
			if js, err := answer.responseJSON(); err == nil {
				desc = string(js)
			}
		}
		out = append(out, fmt.Sprintf("vector %d (%q): the guest answered %s", i, v.Name, desc))
	}
	return out
}

// Section encodes every vector into the content of the self-test section.
// Every request and response must satisfy the ABI's bounds (each is decoded
// back with package abi), so a bundled vector can never be one the host or
// the guest would refuse to read.
func (f *File) Section() (*abi.SelfTestVectors, error) {
	out := &abi.SelfTestVectors{Vectors: make([]abi.SelfTestVector, len(f.Vectors))}
	for i := range f.Vectors {
		v := &f.Vectors[i]
		req, err := v.RequestBytes()
		if err == nil {
			var frame []byte
			frame, err = v.Frame()
			out.Vectors[i] = abi.SelfTestVector{Export: v.Export, Request: req, Response: frame}
		}
		if err != nil {
			return nil, invalid("vector %d (%q): %v", i, v.Name, err)
		}
	}
	// The section must read back: this applies the section-wide bounds.
	var back abi.SelfTestVectors
	if err := back.Unmarshal(out.AppendTo(nil)); err != nil {
		return nil, invalid("section: %v", err)
	}
	return out, nil
}

// RequestBytes is the encoded request; it fails if the request violates the
// ABI's bounds for its message.
func (v *Vector) RequestBytes() ([]byte, error) {
	fresh, _ := newMessages(v.Export)
	if fresh == nil || v.Request == nil {
		return nil, fmt.Errorf("export %s has no request", v.Export)
	}
	b := v.Request.AppendTo(nil)
	if err := fresh.Unmarshal(b); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	return b, nil
}

// Frame is the exact response frame the guest must answer.
func (v *Vector) Frame() ([]byte, error) {
	if !v.Recorded {
		return nil, errors.New("no response recorded: run selftestpack -record and review the answers")
	}
	if v.Status != abi.CodeOK {
		if !v.Status.Valid() {
			return nil, fmt.Errorf("status %d is not a v1 status", v.Status)
		}
		// AppendErrorFrame would truncate silently; a vector must say
		// exactly what the guest answers.
		if len(v.Detail) > abi.MaxDetailBytes || !utf8.ValidString(v.Detail) {
			return nil, fmt.Errorf("detail must be UTF-8 of at most %d bytes", abi.MaxDetailBytes)
		}
		return abi.AppendErrorFrame(nil, v.Status, v.Detail), nil
	}
	_, fresh := newMessages(v.Export)
	if fresh == nil || v.Response == nil {
		return nil, fmt.Errorf("export %s: an ok answer needs a response message", v.Export)
	}
	frame := v.Response.AppendTo(abi.AppendOKFrame(nil))
	if len(frame) > abi.MaxMessageBytes {
		return nil, errors.New("response frame exceeds the ABI's 1 MiB")
	}
	if err := fresh.Unmarshal(frame[1:]); err != nil {
		return nil, fmt.Errorf("response: %w", err)
	}
	return frame, nil
}

// SetFrame records frame, an answer of the guest, as v's expected response.
// It is how selftestpack -record fills in responses for review.
func (v *Vector) SetFrame(frame []byte) error {
	body, err := abi.ParseFrame(frame)
	var se *abi.StatusError
	switch {
	case errors.As(err, &se):
		v.Recorded, v.Status, v.Detail, v.Response = true, se.Code, se.Detail, nil
		return nil
	case err != nil:
		return err
	}
	_, resp := newMessages(v.Export)
	if resp == nil {
		return fmt.Errorf("export %s has no response message", v.Export)
	}
	if err := resp.Unmarshal(body); err != nil {
		return err
	}
	v.Recorded, v.Status, v.Detail, v.Response = true, abi.CodeOK, "", resp
	return nil
}

// Marshal encodes f as indented JSON (HTML characters unescaped, so rendered
// markup stays readable), ending in a newline.
func (f *File) Marshal() ([]byte, error) {
	raw := fileJSON{Format: Format, Module: f.Module, Vectors: make([]vectorJSON, len(f.Vectors))}
	for i := range f.Vectors {
		v := &f.Vectors[i]
		rv := vectorJSON{Name: v.Name, Export: v.Export.Name()}
		var err error
		if rv.Request, err = encodeMessage(v.Request); err != nil {
			return nil, fmt.Errorf("vector %d (%q): request: %w", i, v.Name, err)
		}
		if v.Recorded {
			if rv.Response, err = v.responseJSON(); err != nil {
				return nil, fmt.Errorf("vector %d (%q): response: %w", i, v.Name, err)
			}
		}
		raw.Vectors[i] = rv
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (v *Vector) responseJSON() (json.RawMessage, error) {
	r := responseJSON{Status: v.Status.String(), Detail: v.Detail}
	if v.Status == abi.CodeOK {
		var err error
		if r.Body, err = encodeMessage(v.Response); err != nil {
			return nil, err
		}
	}
	return marshal(r)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// strict decodes exactly one JSON value into v with
// github.com/go-json-experiment/json (the design of encoding/json/v2), which
// is strict where encoding/json is lenient: member names match exactly
// (case-sensitively) and an unknown one fails, a duplicate name fails,
// invalid UTF-8 and lone surrogate escapes fail, and nothing may follow the
// value. It also refuses null anywhere (v2 reads it as the zero value): a
// vector omits an optional member instead. A vectors file is read at build
// time from the guest's author, so messages may quote it.
func strict(data []byte, v any) error {
	opts := jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsonv2.MatchCaseInsensitiveNames(false),
		jsontext.AllowDuplicateNames(false), jsontext.AllowInvalidUTF8(false))
	dec := jsontext.NewDecoder(bytes.NewReader(data), opts)
	for done := false; ; {
		tok, err := dec.ReadToken()
		switch {
		case errors.Is(err, io.EOF) && done:
			return jsonv2.Unmarshal(data, v, opts)
		case done:
			return errors.New("trailing data after the JSON value")
		case err != nil:
			return err
		case tok.Kind() == 'n':
			return fmt.Errorf("null at %q: omit the member instead", dec.StackPointer())
		}
		done = dec.StackDepth() == 0
	}
}

// marshal is json.Marshal without HTML escaping.
func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Bytes is a byte string in JSON: a string holds UTF-8 text, an object
// {"base64": "..."} holds arbitrary bytes (standard encoding, padded).
// Marshal picks the string form whenever the bytes are valid UTF-8.
type Bytes []byte

// MarshalJSON implements json.Marshaler.
func (b Bytes) MarshalJSON() ([]byte, error) {
	if utf8.Valid(b) {
		return marshal(string(b))
	}
	return marshal(struct {
		Base64 string `json:"base64"`
	}{base64.StdEncoding.EncodeToString(b)})
}

// UnmarshalJSON implements json.Unmarshaler.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := jsonv2.Unmarshal(data, &s); err != nil {
			return err
		}
		*b = Bytes(s)
		return nil
	}
	var o struct {
		Base64 *string `json:"base64"`
	}
	if err := strict(data, &o); err != nil || o.Base64 == nil {
		return errors.New(`bytes must be a string or {"base64": "..."}`)
	}
	d, err := base64.StdEncoding.DecodeString(*o.Base64)
	if err != nil {
		return fmt.Errorf("base64: %w", err)
	}
	*b = d
	return nil
}
