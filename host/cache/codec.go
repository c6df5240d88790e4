package cache

import (
	"context"
	"errors"
	"sync"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/cache/expiry"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
)

// jitterStrategy names the jitter algorithm in every region digest.
const jitterStrategy = expiry.Strategy

// BuiltinCodecInfo describes the built-in identity codec: version 1, the
// value stored as given.
func BuiltinCodecInfo() policy.CacheCodecInfo {
	return policy.CacheCodecInfo{Source: "builtin", WriteVersion: 1, Readable: []uint32{1}}
}

// guestCall runs fn on the serving generation of module, pinned for the
// call. The manager is nil without guests.
type guestCall func(ctx context.Context, module string, fn func(plugins.Guest) error) error

// codec turns a region's values into payloads and back. Values are the
// interchange form callers hold; payloads are what the envelope stores.
type codec interface {
	encode(ctx context.Context, value []byte) (version uint32, payload []byte, err error)
	// decode returns the value of a payload stored at version; the
	// payload is the caller's, and the value may alias it. A payload
	// the codec cannot read is errSchema (schema mismatch) or errPayload
	// (corrupt); a guest failure is a *CodecError.
	decode(ctx context.Context, version uint32, payload []byte) ([]byte, error)
}

var (
	errSchema  = errors.New("codec: stored version not readable")
	errPayload = errors.New("codec: payload corrupt")
)

// bytesCodec is the built-in identity codec.
type bytesCodec struct{}

func (bytesCodec) encode(_ context.Context, value []byte) (uint32, []byte, error) {
	return 1, value, nil
}

// decode hands back the payload itself: it is the caller's copy of the
// stored bytes (interpret's read), so another copy would only cost a
// kilobyte-sized allocation per L2 hit.
func (bytesCodec) decode(_ context.Context, version uint32, payload []byte) ([]byte, error) {
	if version != 1 {
		return nil, errSchema
	}
	return payload, nil
}

// guestCodec calls a codec guest's encode and decode for one schema.
type guestCodec struct {
	call   guestCall
	module string
	schema string
	region string
}

func (c guestCodec) encode(ctx context.Context, value []byte) (uint32, []byte, error) {
	var resp *abi.CodecEncodeResponse
	err := c.call(ctx, c.module, func(g plugins.Guest) (err error) {
		resp, err = plugins.CodecEncode(ctx, g, &abi.CodecEncodeRequest{Schema: c.schema, Value: value})
		return err
	})
	switch {
	case err == nil:
		return resp.Version, resp.Payload, nil
	case errors.Is(err, abi.CodeInvalidRequest):
		return 0, nil, &valueError{err}
	}
	return 0, nil, &CodecError{Region: c.region, Op: "encode", Err: err}
}

// decode runs on every L2 hit of a guest-codec region: its request, answer
// and the function the call pins the module for come from decodeCalls, so
// that what it allocates is the value it returns.
func (c guestCodec) decode(ctx context.Context, version uint32, payload []byte) ([]byte, error) {
	dc := decodeCalls.Get().(*decodeCall)
	dc.ctx = ctx
	dc.req = abi.CodecDecodeRequest{Schema: c.schema, StoredVersion: version, Payload: payload}
	err := c.call(ctx, c.module, dc.run)
	resp := dc.resp
	// Nothing of this call stays reachable from the pool.
	dc.ctx, dc.req, dc.resp = nil, abi.CodecDecodeRequest{}, abi.CodecDecodeResponse{}
	decodeCalls.Put(dc)
	return c.decoded(&resp, err)
}

// decodeCall is one guest decode: plugins.CodecDecode's exchange, with
// the request, the answer and run (exchange, bound once) in one pooled
// value instead of a closure, a request and an answer allocated per call.
type decodeCall struct {
	ctx  context.Context
	req  abi.CodecDecodeRequest
	resp abi.CodecDecodeResponse
	run  func(plugins.Guest) error
}

var decodeCalls = sync.Pool{New: func() any {
	dc := new(decodeCall)
	dc.run = dc.exchange
	return dc
}}

// exchange is plugins.CodecDecode into dc.resp: Exchange re-checks the
// answer (plugins.DecodeResponse) while the instance is held.
func (dc *decodeCall) exchange(g plugins.Guest) error {
	return g.Exchange(dc.ctx, abi.ExportCodecDecode, &dc.req, &dc.resp)
}

// decoded maps a decode call's answer: the value, errSchema, errPayload or
// a *CodecError.
func (c guestCodec) decoded(resp *abi.CodecDecodeResponse, err error) ([]byte, error) {
	switch {
	case err == nil:
		return resp.Value, nil
	case errors.Is(err, abi.CodeSchemaMismatch):
		return nil, errSchema
	case errors.Is(err, abi.CodeCorrupt):
		return nil, errPayload
	}
	return nil, &CodecError{Region: c.region, Op: "decode", Err: err}
}

// valueError is ErrValueRefused carrying the guest's status (whose detail
// is the guest's own words about the value's shape).
type valueError struct{ err error }

func (e *valueError) Error() string        { return ErrValueRefused.Error() + ": " + e.err.Error() }
func (e *valueError) Is(target error) bool { return target == ErrValueRefused }
func (e *valueError) Unwrap() error        { return e.err }

// regionGuest calls a cache-region guest's canonicaliser and admission
// predicate for one region.
type regionGuest struct {
	call   guestCall
	module string
	region string
}

func (g regionGuest) canonicalize(ctx context.Context, attrs []Attr) ([][]byte, error) {
	req := &abi.CanonicalizeRequest{Region: g.region, Attrs: make([]abi.Attr, len(attrs))}
	for i, a := range attrs {
		req.Attrs[i] = abi.Attr{Name: a.Name, Value: a.Value}
	}
	var resp *abi.CanonicalizeResponse
	err := g.call(ctx, g.module, func(m plugins.Guest) (err error) {
		resp, err = plugins.Canonicalize(ctx, m, req)
		return err
	})
	switch {
	case err == nil:
		parts := make([][]byte, len(resp.Parts))
		for i, p := range resp.Parts {
			parts[i] = []byte(p)
		}
		return parts, nil
	case errors.Is(err, abi.CodeInvalidRequest):
		return nil, keyErr("the region's canonicaliser refused the attributes")
	}
	return nil, &CodecError{Region: g.region, Op: "canonicalize", Err: err}
}

// admit asks the admission predicate. A failure never admits: the value is
// not stored (the caller's result is unaffected) and the failure counted.
func (g regionGuest) admit(ctx context.Context, req *abi.AdmitRequest) (bool, error) {
	req.Region = g.region
	var ok bool
	err := g.call(ctx, g.module, func(m plugins.Guest) (err error) {
		ok, err = plugins.Admit(ctx, m, req)
		return err
	})
	if err != nil {
		return false, &CodecError{Region: g.region, Op: "admit", Err: err}
	}
	return ok, nil
}
