package plugins

import (
	"context"
	"errors"
	"fmt"

	"github.com/caphost/caphost/abi"
)

// Guest is a loaded guest module of either flavour: *Module (native, this
// package) or *extism.Module (package plugins/extism). The typed calls
// (RateSelect, CodecEncode, ...), the conformance suite (CheckConformance)
// and the self-test (SelfTest) take a Guest, so both flavours are held to
// the same host-side checks. Implementations are safe for concurrent use.
type Guest interface {
	// Name is the module's configured name.
	Name() string
	// Description is the validated describe output. Callers must not modify it.
	Description() *abi.Description
	// RatePolicy returns the declared rate policy with that id: the index
	// selections are re-checked against on every RateSelect.
	RatePolicy(id string) (*abi.RatePolicyDecl, bool)
	// Call sends a pre-encoded request to export e and appends a copy of the
	// raw response frame to out.
	Call(ctx context.Context, e abi.Export, in, out []byte) ([]byte, error)
	// Exchange sends req to export e and, while the instance is still held,
	// passes the response frame to DecodeResponse(g, e, req, frame, resp).
	// req and resp are e's message types. A guest status comes back as
	// *abi.StatusError and keeps the instance; any other DecodeResponse error
	// is a *GuestError of ClassMalformedOutput and discards the instance.
	// The typed functions below are what a caller normally wants.
	Exchange(ctx context.Context, e abi.Export, req, resp abi.Message) error
}

// The native flavour is a Guest.
var _ Guest = (*Module)(nil)

// ErrMessageMismatch: Exchange was given messages of another export's types
// (a host bug, never a guest's).
var ErrMessageMismatch = errors.New("plugins: request or response type does not match the export")

// ErrUndeclaredSelection: a rate-policy answer selected a policy its module
// does not declare, or a cost or dimension count outside that declaration.
// The call fails as malformed output (errors.Is finds this cause).
var ErrUndeclaredSelection = errors.New("plugins: selection violates the module's declarations")

// DecodeResponse parses a response frame of export e into resp and re-checks
// it against g's declarations and req. It is the single place the host
// validates typed answers, for every flavour; Guest implementations call it
// from Exchange while the instance is held, so a bad answer discards it.
// A non-OK frame comes back as *abi.StatusError.
func DecodeResponse(g Guest, e abi.Export, req abi.Message, frame []byte, resp abi.Message) error {
	body, err := abi.ParseFrame(frame)
	if err != nil {
		return err
	}
	if err := resp.Unmarshal(body); err != nil {
		return err
	}
	switch e {
	case abi.ExportCodecEncode:
		q, ok1 := req.(*abi.CodecEncodeRequest)
		r, ok2 := resp.(*abi.CodecEncodeResponse)
		if !ok1 || !ok2 {
			return ErrMessageMismatch
		}
		for _, c := range g.Description().Codecs {
			if c.SchemaID == q.Schema {
				if r.Version != c.WriteVersion {
					return fmt.Errorf("encoded with version %d, declared write version %d", r.Version, c.WriteVersion)
				}
				return nil
			}
		}
		return errors.New("encoded undeclared schema")
	case abi.ExportCacheCanonicalize:
		r, ok := resp.(*abi.CanonicalizeResponse)
		if !ok {
			return ErrMessageMismatch
		}
		if len(r.Parts) == 0 {
			return errors.New("no key parts")
		}
	case abi.ExportRateSelect:
		r, ok := resp.(*abi.RateSelectResponse)
		if !ok {
			return ErrMessageMismatch
		}
		for _, s := range r.Selections {
			p, ok := g.RatePolicy(s.PolicyID)
			if !ok {
				return fmt.Errorf("%w: selected an undeclared policy", ErrUndeclaredSelection)
			}
			if s.Cost == 0 || s.Cost > p.MaximumCost || len(s.Dimensions) != len(p.Dimensions) {
				return fmt.Errorf("%w: selection of %s", ErrUndeclaredSelection, p.ID)
			}
		}
	case abi.ExportRender:
		r, ok := resp.(*abi.RenderResponse)
		if !ok {
			return ErrMessageMismatch
		}
		if len(r.Parts) == 0 {
			return errors.New("no message parts")
		}
	}
	return nil
}

// CodecEncode calls a codec's encode. Guest statuses come back as
// *abi.StatusError; an answer at another version than the schema's declared
// write version is malformed output.
func CodecEncode(ctx context.Context, g Guest, req *abi.CodecEncodeRequest) (*abi.CodecEncodeResponse, error) {
	var resp abi.CodecEncodeResponse
	if err := g.Exchange(ctx, abi.ExportCodecEncode, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// CodecDecode calls a codec's decode; abi.CodeSchemaMismatch and
// abi.CodeCorrupt come back as *abi.StatusError.
func CodecDecode(ctx context.Context, g Guest, req *abi.CodecDecodeRequest) (*abi.CodecDecodeResponse, error) {
	var resp abi.CodecDecodeResponse
	if err := g.Exchange(ctx, abi.ExportCodecDecode, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Canonicalize asks a cache region for logical key parts (at least one).
func Canonicalize(ctx context.Context, g Guest, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	var resp abi.CanonicalizeResponse
	if err := g.Exchange(ctx, abi.ExportCacheCanonicalize, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Admit asks a cache region's admission predicate.
func Admit(ctx context.Context, g Guest, req *abi.AdmitRequest) (bool, error) {
	var resp abi.AdmitResponse
	if err := g.Exchange(ctx, abi.ExportCacheAdmit, req, &resp); err != nil {
		return false, err
	}
	return resp.Admit, nil
}

// RateSelect asks a rate-policy guest which policies apply. Every selection
// is re-checked against the module's declarations (declared id, cost within
// 1..maximum_cost, one value per dimension); a violation is malformed output.
func RateSelect(ctx context.Context, g Guest, req *abi.RateSelectRequest) (*abi.RateSelectResponse, error) {
	var resp abi.RateSelectResponse
	if err := g.Exchange(ctx, abi.ExportRateSelect, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Render asks a renderer for message parts (at least one).
func Render(ctx context.Context, g Guest, req *abi.RenderRequest) (*abi.RenderResponse, error) {
	var resp abi.RenderResponse
	if err := g.Exchange(ctx, abi.ExportRender, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Call sends a pre-encoded request to export e and appends a copy of the raw
// response frame to out. It is the lowest-level call; the typed methods
// (RateSelect, ...) are usually what a host capability wants.
func (m *Module) Call(ctx context.Context, e abi.Export, in, out []byte) ([]byte, error) {
	p, err := m.begin(ctx, e, in, nil)
	if err != nil {
		return out, err
	}
	out = append(out, p.frame...)
	return out, m.end(&p, nil)
}

// Exchange implements Guest: req is encoded into a pooled buffer, and the
// response frame is decoded and re-checked by DecodeResponse while the
// instance is held.
func (m *Module) Exchange(ctx context.Context, e abi.Export, req, resp abi.Message) error {
	bp := m.eng.getBuf()
	in := req.AppendTo((*bp)[:0])
	p, err := m.begin(ctx, e, in, nil)
	// The request was copied into guest memory (or never sent): the buffer
	// can go back before the response is decoded.
	if cap(in) <= 64<<10 {
		*bp = in[:0]
		m.eng.bufs.Put(bp)
	}
	if err != nil {
		return err
	}
	return m.end(&p, DecodeResponse(m, e, req, p.frame, resp))
}

// ExchangeMeasured implements CPUMeasurer: Exchange, with the call's CPU
// time and budget written to cpu. It is Exchange's twin rather than its
// body so that Exchange, the hot path, stays as it was.
func (m *Module) ExchangeMeasured(ctx context.Context, e abi.Export, req, resp abi.Message, cpu *CallCPU) error {
	*cpu = CallCPU{}
	p, err := m.begin(ctx, e, req.AppendTo(nil), cpu)
	if err != nil {
		return err
	}
	return m.end(&p, DecodeResponse(m, e, req, p.frame, resp))
}

// RatePolicy implements Guest.
func (m *Module) RatePolicy(id string) (*abi.RatePolicyDecl, bool) {
	p, ok := m.policies[id]
	return p, ok
}

// CodecEncode is CodecEncode(ctx, m, req).
func (m *Module) CodecEncode(ctx context.Context, req *abi.CodecEncodeRequest) (*abi.CodecEncodeResponse, error) {
	return CodecEncode(ctx, m, req)
}

// CodecDecode is CodecDecode(ctx, m, req).
func (m *Module) CodecDecode(ctx context.Context, req *abi.CodecDecodeRequest) (*abi.CodecDecodeResponse, error) {
	return CodecDecode(ctx, m, req)
}

// Canonicalize is Canonicalize(ctx, m, req).
func (m *Module) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	return Canonicalize(ctx, m, req)
}

// Admit is Admit(ctx, m, req).
func (m *Module) Admit(ctx context.Context, req *abi.AdmitRequest) (bool, error) {
	return Admit(ctx, m, req)
}

// RateSelect is RateSelect(ctx, m, req).
func (m *Module) RateSelect(ctx context.Context, req *abi.RateSelectRequest) (*abi.RateSelectResponse, error) {
	return RateSelect(ctx, m, req)
}

// Render is Render(ctx, m, req).
func (m *Module) Render(ctx context.Context, req *abi.RenderRequest) (*abi.RenderResponse, error) {
	return Render(ctx, m, req)
}

func (e *Engine) getBuf() *[]byte {
	if bp, ok := e.bufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 0, 512)
	return &b
}
