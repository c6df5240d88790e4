package idempotency

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// ResponseCodec is the codec id of stored responses (recorded with every
// completed record and checked on replay).
const ResponseCodec = "http-response-v1"

// DefaultMaxResponseBytes bounds a stored response (encoded): a response
// over it is not stored and its record fails closed.
const DefaultMaxResponseBytes = 64 << 10

// Bounds of a stored response's headers.
const (
	maxHeaders        = 32
	maxHeaderName     = 64
	maxHeaderValue    = 4 << 10
	responseMagic     = "CHR1"
	minStatus         = 100
	maxStatus         = 599
	responseHeaderLen = len(responseMagic) + 2 + 2
)

// DefaultReplayHeaders are the response headers stored and replayed. A
// header not in the list (Set-Cookie above all: replaying a session would
// hand it to whoever retries) is dropped.
var defaultReplayHeaders = []string{"Cache-Control", "Content-Language", "Content-Location", "Content-Type",
	"Etag", "Last-Modified", "Link", "Location", "Retry-After"}

// DefaultReplayHeaders returns the default allowlist of replayed response
// headers, canonicalised.
func DefaultReplayHeaders() []string { return slices.Clone(defaultReplayHeaders) }

// Response is a stored response.
type Response struct {
	Status int
	// Header holds the allowlisted headers, in canonical form.
	Header http.Header
	Body   []byte
}

// ErrCorruptResponse: a stored response failed its checks (never replayed).
var ErrCorruptResponse = errors.New("idempotency: stored response corrupt")

// Encode renders r: magic, status, header count, each header as name and
// value (length-prefixed, sorted by name then value order), then the body.
// Headers outside the bounds are an error: a response that cannot be
// stored faithfully is not stored.
func (r Response) Encode() ([]byte, error) {
	if r.Status < minStatus || r.Status > maxStatus {
		return nil, fmt.Errorf("idempotency: status %d not storable", r.Status)
	}
	names := make([]string, 0, len(r.Header))
	n := 0
	for k, vs := range r.Header {
		names = append(names, k)
		n += len(vs)
	}
	if n > maxHeaders {
		return nil, fmt.Errorf("idempotency: %d headers, at most %d are stored", n, maxHeaders)
	}
	slices.Sort(names)
	b := make([]byte, 0, responseHeaderLen+len(r.Body)+64*n+4)
	b = append(b, responseMagic...)
	b = binary.BigEndian.AppendUint16(b, uint16(r.Status))
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	for _, k := range names {
		if !validName(k) || textproto.CanonicalMIMEHeaderKey(k) != k {
			return nil, fmt.Errorf("idempotency: header name %q not storable", k)
		}
		for _, v := range r.Header[k] {
			if !validValue(v) {
				return nil, fmt.Errorf("idempotency: a value of header %s is not storable", k)
			}
			b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
			b = append(b, k...)
			b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
			b = append(b, v...)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Body)))
	return append(b, r.Body...), nil
}

// DecodeResponse parses a stored response of at most max bytes. It
// accepts exactly what Encode produces (the same bounds, sorted names, no
// trailing bytes); anything else is ErrCorruptResponse.
func DecodeResponse(b []byte, max int) (Response, error) {
	bad := func(why string) (Response, error) { return Response{}, fmt.Errorf("%w: %s", ErrCorruptResponse, why) }
	if len(b) > max {
		return bad("over the size bound")
	}
	if len(b) < responseHeaderLen+4 || string(b[:4]) != responseMagic {
		return bad("no stored-response header")
	}
	status := int(binary.BigEndian.Uint16(b[4:]))
	n := int(binary.BigEndian.Uint16(b[6:]))
	if status < minStatus || status > maxStatus || n > maxHeaders {
		return bad("status or header count out of bounds")
	}
	r := Response{Status: status, Header: http.Header{}}
	rest := b[responseHeaderLen:]
	prev := ""
	take := func(size int) ([]byte, bool) {
		if len(rest) < size {
			return nil, false
		}
		v := rest[:size]
		rest = rest[size:]
		return v, true
	}
	for range n {
		l, ok := take(2)
		if !ok {
			return bad("truncated header")
		}
		name, ok := take(int(binary.BigEndian.Uint16(l)))
		if !ok {
			return bad("truncated header name")
		}
		l, ok = take(2)
		if !ok {
			return bad("truncated header")
		}
		value, ok := take(int(binary.BigEndian.Uint16(l)))
		if !ok {
			return bad("truncated header value")
		}
		k, v := string(name), string(value)
		if !validName(k) || textproto.CanonicalMIMEHeaderKey(k) != k || !validValue(v) || k < prev {
			return bad("header out of form or order")
		}
		prev = k
		r.Header[k] = append(r.Header[k], v)
	}
	l, ok := take(4)
	if !ok || uint64(binary.BigEndian.Uint32(l)) != uint64(len(rest)) {
		return bad("body length")
	}
	r.Body = bytes.Clone(rest)
	return r, nil
}

// validName: an RFC 9110 token of bounded length.
func validName(k string) bool {
	if k == "" || len(k) > maxHeaderName {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validValue: visible ASCII, space and tab (obs-text refused), bounded: a
// stored value can never smuggle a line break into a replay.
func validValue(v string) bool {
	if len(v) > maxHeaderValue {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c != '\t' && (c < ' ' || c > '~') {
			return false
		}
	}
	return true
}

// recorder passes a response through to the client while keeping a copy
// of the status, the allowlisted headers and up to max body bytes.
type recorder struct {
	http.ResponseWriter
	replay   []string
	status   int
	body     bytes.Buffer
	max      int
	overflow bool
}

func newRecorder(w http.ResponseWriter, replay []string, max int) *recorder {
	return &recorder{ResponseWriter: w, replay: replay, max: max}
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if !r.overflow {
		if r.body.Len()+len(p) > r.max {
			r.overflow = true
			r.body.Reset()
		} else {
			r.body.Write(p)
		}
	}
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the client's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// response is what was recorded, or false when it cannot be stored (the
// body passed its bound).
func (r *recorder) response() (Response, bool) {
	if r.overflow {
		return Response{}, false
	}
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	h := http.Header{}
	src := r.ResponseWriter.Header()
	for _, k := range r.replay {
		if vs := src.Values(k); len(vs) > 0 {
			h[textproto.CanonicalMIMEHeaderKey(k)] = slices.Clone(vs)
		}
	}
	return Response{Status: status, Header: h, Body: bytes.Clone(r.body.Bytes())}, true
}
