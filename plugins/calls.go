package plugins

import (
	"context"
	"fmt"

	"github.com/caphost/caphost/abi"
)

// Call sends a pre-encoded request to export e and appends a copy of the raw
// response frame to out. It is the lowest-level call; the typed methods below
// are usually what a host capability wants.
func (m *Module) Call(ctx context.Context, e abi.Export, in, out []byte) ([]byte, error) {
	p, err := m.begin(ctx, e, in)
	if err != nil {
		return out, err
	}
	out = append(out, p.frame...)
	return out, m.end(&p, nil)
}

// typedCall encodes req, calls e, checks the frame and decodes the body into
// resp, then runs check (host-side re-validation) while the instance is still
// held so a bad answer discards it.
func (m *Module) typedCall(ctx context.Context, e abi.Export, req, resp abi.Message, check func() error) error {
	bp := m.eng.getBuf()
	in := req.AppendTo((*bp)[:0])
	p, err := m.begin(ctx, e, in)
	// The request was copied into guest memory (or never sent): the buffer
	// can go back before the response is decoded.
	if cap(in) <= 64<<10 {
		*bp = in[:0]
		m.eng.bufs.Put(bp)
	}
	if err != nil {
		return err
	}
	return m.end(&p, decodeFrame(p.frame, resp, check))
}

func decodeFrame(frame []byte, resp abi.Message, check func() error) error {
	body, err := abi.ParseFrame(frame)
	if err != nil {
		return err
	}
	if err := resp.Unmarshal(body); err != nil {
		return err
	}
	if check != nil {
		return check()
	}
	return nil
}

// CodecEncode calls the codec's encode. Guest statuses come back as *abi.StatusError.
func (m *Module) CodecEncode(ctx context.Context, req *abi.CodecEncodeRequest) (*abi.CodecEncodeResponse, error) {
	var resp abi.CodecEncodeResponse
	err := m.typedCall(ctx, abi.ExportCodecEncode, req, &resp, func() error {
		for _, c := range m.desc.Codecs {
			if c.SchemaID == req.Schema {
				if resp.Version != c.WriteVersion {
					return fmt.Errorf("encoded with version %d, declared write version %d", resp.Version, c.WriteVersion)
				}
				return nil
			}
		}
		return fmt.Errorf("encoded undeclared schema")
	})
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// CodecDecode calls the codec's decode; abi.CodeSchemaMismatch and
// abi.CodeCorrupt come back as *abi.StatusError.
func (m *Module) CodecDecode(ctx context.Context, req *abi.CodecDecodeRequest) (*abi.CodecDecodeResponse, error) {
	var resp abi.CodecDecodeResponse
	if err := m.typedCall(ctx, abi.ExportCodecDecode, req, &resp, nil); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Canonicalize asks a cache region for logical key parts (at least one).
func (m *Module) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	var resp abi.CanonicalizeResponse
	err := m.typedCall(ctx, abi.ExportCacheCanonicalize, req, &resp, func() error {
		if len(resp.Parts) == 0 {
			return fmt.Errorf("no key parts")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// Admit asks a cache region's admission predicate.
func (m *Module) Admit(ctx context.Context, req *abi.AdmitRequest) (bool, error) {
	var resp abi.AdmitResponse
	if err := m.typedCall(ctx, abi.ExportCacheAdmit, req, &resp, nil); err != nil {
		return false, err
	}
	return resp.Admit, nil
}

// RateSelect asks the rate-policy guest which policies apply. Every selection
// is re-checked against the module's declarations (declared id, cost within
// 1..maximum_cost, one value per dimension); a violation is malformed output.
func (m *Module) RateSelect(ctx context.Context, req *abi.RateSelectRequest) (*abi.RateSelectResponse, error) {
	var resp abi.RateSelectResponse
	err := m.typedCall(ctx, abi.ExportRateSelect, req, &resp, func() error {
		for _, s := range resp.Selections {
			p, ok := m.policies[s.PolicyID]
			if !ok {
				return fmt.Errorf("selected undeclared policy")
			}
			if s.Cost == 0 || s.Cost > p.MaximumCost || len(s.Dimensions) != len(p.Dimensions) {
				return fmt.Errorf("selection of %s violates its declaration", p.ID)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// Render asks a renderer for message parts (at least one).
func (m *Module) Render(ctx context.Context, req *abi.RenderRequest) (*abi.RenderResponse, error) {
	var resp abi.RenderResponse
	err := m.typedCall(ctx, abi.ExportRender, req, &resp, func() error {
		if len(resp.Parts) == 0 {
			return fmt.Errorf("no message parts")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

func (e *Engine) getBuf() *[]byte {
	if bp, ok := e.bufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 0, 512)
	return &b
}
