// Package guest is the Go SDK for caphost guests (ABI v1). A guest is a main
// package built with the standard toolchain
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o x.wasm ./guests/x
//
// that registers plain Go handlers, per kind, from an init function:
//
//	func init() { guest.Register(&guest.Module{Name: "my-rates", Rate: &guest.RatePolicies{...}}) }
//
// init is the only hook a c-shared (reactor) module has: the host runs
// _initialize, which runs package initialisers, and never calls main.
//
// The package owns the wasm glue: the //go:wasmexport entry points, the
// memory handoff (caphost_alloc), request decoding, response framing and the
// caphost_v1 host imports. Guest authors change nothing here; new kinds or
// exports are ABI changes made in package abi first.
//
// Handlers receive requests decoded without copying (package view): their
// strings and byte slices alias the request region and are valid only until
// the handler returns, so a handler that keeps request data must copy it.
// That is what makes a call allocation-free inside the guest, where every
// allocation costs about a microsecond.
package guest

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest/view"
)

// Codec implements one payload schema.
type Codec struct {
	Decl abi.CodecDecl
	// Encode turns the interchange value into a payload written with Decl.WriteVersion.
	Encode func(value []byte) ([]byte, error)
	// Decode reads a payload stored with storedVersion (already checked to be
	// readable) and returns the current interchange value.
	//
	// Either may return its input, or a part of it, as its answer: the
	// Dispatcher copies the answer into the response frame before the input
	// buffer is used again. Neither may keep the input after returning.
	Decode func(storedVersion uint32, payload []byte) ([]byte, error)
}

// CacheRegion implements one cache region.
type CacheRegion struct {
	Decl abi.RegionDecl
	// Canonicalize returns the logical key parts of a request.
	Canonicalize func(attrs []abi.Attr) ([]string, error)
	// Admit decides whether a loaded value is stored; nil admits everything.
	Admit func(req *abi.AdmitRequest) bool
}

// RatePolicies implements the rate-policy kind.
type RatePolicies struct {
	Policies []abi.RatePolicyDecl
	// Select returns the policies to evaluate for a request. Every PolicyID
	// must be declared and every cost within the policy's MaximumCost; the
	// SDK checks both before answering.
	Select func(req *abi.RateSelectRequest) ([]abi.RateSelection, error)
}

// Renderer implements the renderer kind.
type Renderer struct {
	Templates []abi.TemplateDecl
	// Render is called only for a declared template, version, locale and channel.
	Render func(req *abi.RenderRequest) ([]abi.MessagePart, error)
}

// Module is everything a guest implements. Kinds are derived from which
// fields are set.
type Module struct {
	Name     string
	Codecs   []Codec
	Regions  []CacheRegion
	Rate     *RatePolicies
	Renderer *Renderer
}

// Errorf builds the error a handler returns to report a specific status code
// (for example abi.CodeCorrupt from a codec's Decode). Any other error is
// reported as abi.CodeInternal.
func Errorf(code abi.Code, format string, args ...any) error {
	return &abi.StatusError{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Description builds the module's describe output.
func (m *Module) Description() *abi.Description {
	d := &abi.Description{ABI: abi.VersionDecl{Major: abi.Major, Minor: abi.Minor}, Module: m.Name}
	if len(m.Codecs) > 0 {
		d.Kinds = append(d.Kinds, abi.KindCodec)
		for _, c := range m.Codecs {
			d.Codecs = append(d.Codecs, c.Decl)
		}
	}
	if len(m.Regions) > 0 {
		d.Kinds = append(d.Kinds, abi.KindCacheRegion)
		for _, r := range m.Regions {
			d.Regions = append(d.Regions, r.Decl)
		}
	}
	if m.Rate != nil {
		d.Kinds = append(d.Kinds, abi.KindRatePolicy)
		d.RatePolicies = m.Rate.Policies
	}
	if m.Renderer != nil {
		d.Kinds = append(d.Kinds, abi.KindRenderer)
		d.Templates = m.Renderer.Templates
	}
	return d
}

// Dispatcher answers exports for a Module. It is what the wasm glue calls; it
// is exported so guests can be unit-tested natively with the same code path.
// A Dispatcher is not safe for concurrent use (a wasm instance is
// single-threaded): it reuses its request structs across calls.
type Dispatcher struct {
	m        *Module
	describe []byte

	// Reused across calls so decoding allocates nothing.
	enc   abi.CodecEncodeRequest
	dec   abi.CodecDecodeRequest
	canon abi.CanonicalizeRequest
	adm   abi.AdmitRequest
	rate  abi.RateSelectRequest
	rend  abi.RenderRequest
	attrs []abi.Attr
}

// NewDispatcher validates m's description and prepares the describe output.
func NewDispatcher(m *Module) (*Dispatcher, error) {
	d := m.Description()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	js, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return &Dispatcher{m: m, describe: js}, nil
}

// Handle answers one export: it decodes in, calls the handler and appends the
// response frame to out.
func (g *Dispatcher) Handle(e abi.Export, in, out []byte) []byte {
	switch e {
	case abi.ExportDescribe:
		return append(abi.AppendOKFrame(out), g.describe...)
	case abi.ExportCodecEncode:
		return g.codecEncode(in, out)
	case abi.ExportCodecDecode:
		return g.codecDecode(in, out)
	case abi.ExportCacheCanonicalize:
		return g.canonicalize(in, out)
	case abi.ExportCacheAdmit:
		return g.admit(in, out)
	case abi.ExportRateSelect:
		return g.rateSelect(in, out)
	case abi.ExportRender:
		return g.render(in, out)
	}
	return abi.AppendErrorFrame(out, abi.CodeUnsupported, "unknown export")
}

func errFrame(out []byte, err error) []byte {
	var se *abi.StatusError
	if errors.As(err, &se) {
		return abi.AppendErrorFrame(out, se.Code, se.Detail)
	}
	var c abi.Code
	if errors.As(err, &c) {
		return abi.AppendErrorFrame(out, c, "")
	}
	return abi.AppendErrorFrame(out, abi.CodeInternal, err.Error())
}

// badRequest answers a request the view decoder rejected, with abi's
// description of the violation (the decoders accept the same inputs).
func badRequest(out []byte, m abi.Message, in []byte) []byte {
	detail := "malformed request"
	if err := m.Unmarshal(in); err != nil {
		detail = err.Error()
	}
	return abi.AppendErrorFrame(out, abi.CodeInvalidRequest, detail)
}

func (g *Dispatcher) codec(schema string) *Codec {
	for i := range g.m.Codecs {
		if g.m.Codecs[i].Decl.SchemaID == schema {
			return &g.m.Codecs[i]
		}
	}
	return nil
}

func (g *Dispatcher) codecEncode(in, out []byte) []byte {
	req := &g.enc
	if !view.CodecEncode(in, req) {
		return badRequest(out, &abi.CodecEncodeRequest{}, in)
	}
	c := g.codec(req.Schema)
	if c == nil {
		return abi.AppendErrorFrame(out, abi.CodeNotFound, "unknown schema")
	}
	p, err := c.Encode(req.Value)
	if err != nil {
		return errFrame(out, err)
	}
	resp := abi.CodecEncodeResponse{Version: c.Decl.WriteVersion, Payload: p}
	return resp.AppendTo(abi.AppendOKFrame(out))
}

func (g *Dispatcher) codecDecode(in, out []byte) []byte {
	req := &g.dec
	if !view.CodecDecode(in, req) {
		return badRequest(out, &abi.CodecDecodeRequest{}, in)
	}
	c := g.codec(req.Schema)
	if c == nil {
		return abi.AppendErrorFrame(out, abi.CodeNotFound, "unknown schema")
	}
	readable := false
	for _, v := range c.Decl.ReadableVersions {
		readable = readable || v == req.StoredVersion
	}
	if !readable {
		return abi.AppendErrorFrame(out, abi.CodeSchemaMismatch, fmt.Sprintf("stored version %d is not readable", req.StoredVersion))
	}
	v, err := c.Decode(req.StoredVersion, req.Payload)
	if err != nil {
		return errFrame(out, err)
	}
	resp := abi.CodecDecodeResponse{Value: v}
	return resp.AppendTo(abi.AppendOKFrame(out))
}

func (g *Dispatcher) region(id string) *CacheRegion {
	for i := range g.m.Regions {
		if g.m.Regions[i].Decl.ID == id {
			return &g.m.Regions[i]
		}
	}
	return nil
}

func (g *Dispatcher) canonicalize(in, out []byte) []byte {
	req := &g.canon
	if !view.Canonicalize(in, req, &g.attrs) {
		return badRequest(out, &abi.CanonicalizeRequest{}, in)
	}
	r := g.region(req.Region)
	if r == nil {
		return abi.AppendErrorFrame(out, abi.CodeNotFound, "unknown region")
	}
	parts, err := r.Canonicalize(req.Attrs)
	if err != nil {
		return errFrame(out, err)
	}
	if len(parts) == 0 || len(parts) > abi.MaxKeyParts {
		return abi.AppendErrorFrame(out, abi.CodeInternal, "key parts count out of bounds")
	}
	for _, p := range parts {
		if len(p) > abi.MaxValueBytes {
			return abi.AppendErrorFrame(out, abi.CodeInternal, "key part too long")
		}
	}
	resp := abi.CanonicalizeResponse{Parts: parts}
	return resp.AppendTo(abi.AppendOKFrame(out))
}

func (g *Dispatcher) admit(in, out []byte) []byte {
	req := &g.adm
	if !view.Admit(in, req) {
		return badRequest(out, &abi.AdmitRequest{}, in)
	}
	r := g.region(req.Region)
	if r == nil {
		return abi.AppendErrorFrame(out, abi.CodeNotFound, "unknown region")
	}
	resp := abi.AdmitResponse{Admit: r.Admit == nil || r.Admit(req)}
	return resp.AppendTo(abi.AppendOKFrame(out))
}

func (g *Dispatcher) rateSelect(in, out []byte) []byte {
	if g.m.Rate == nil {
		return abi.AppendErrorFrame(out, abi.CodeUnsupported, "module has no rate policies")
	}
	req := &g.rate
	if !view.RateSelect(in, req, &g.attrs) {
		return badRequest(out, &abi.RateSelectRequest{}, in)
	}
	sels, err := g.m.Rate.Select(req)
	if err != nil {
		return errFrame(out, err)
	}
	if len(sels) > abi.MaxSelections {
		return abi.AppendErrorFrame(out, abi.CodeInternal, "too many selections")
	}
	for i := range sels {
		if err := g.checkSelection(&sels[i]); err != nil {
			return abi.AppendErrorFrame(out, abi.CodeInternal, err.Error())
		}
	}
	resp := abi.RateSelectResponse{Selections: sels}
	return resp.AppendTo(abi.AppendOKFrame(out))
}

// checkSelection catches guest bugs at the source; the host re-checks anyway.
func (g *Dispatcher) checkSelection(s *abi.RateSelection) error {
	for i := range g.m.Rate.Policies {
		p := &g.m.Rate.Policies[i]
		if p.ID != s.PolicyID {
			continue
		}
		if s.Cost == 0 || s.Cost > p.MaximumCost {
			return fmt.Errorf("policy %s: cost %d outside 1..%d", p.ID, s.Cost, p.MaximumCost)
		}
		if len(s.Dimensions) != len(p.Dimensions) {
			return fmt.Errorf("policy %s: %d dimension values for %d dimensions", p.ID, len(s.Dimensions), len(p.Dimensions))
		}
		return nil
	}
	return fmt.Errorf("selected undeclared policy %q", s.PolicyID)
}

func (g *Dispatcher) render(in, out []byte) []byte {
	if g.m.Renderer == nil {
		return abi.AppendErrorFrame(out, abi.CodeUnsupported, "module has no renderer")
	}
	req := &g.rend
	if !view.Render(in, req, &g.attrs) {
		return badRequest(out, &abi.RenderRequest{}, in)
	}
	if !g.templateServes(req) {
		return abi.AppendErrorFrame(out, abi.CodeNotFound, "unknown template, version, locale or channel")
	}
	parts, err := g.m.Renderer.Render(req)
	if err != nil {
		return errFrame(out, err)
	}
	if len(parts) == 0 || len(parts) > abi.MaxMessageParts {
		return abi.AppendErrorFrame(out, abi.CodeInternal, "message part count out of bounds")
	}
	resp := abi.RenderResponse{Parts: parts}
	return resp.AppendTo(abi.AppendOKFrame(out))
}

func (g *Dispatcher) templateServes(req *abi.RenderRequest) bool {
	for _, t := range g.m.Renderer.Templates {
		if t.ID != req.Template || t.Version != req.Version {
			continue
		}
		return contains(t.Locales, req.Locale) && contains(t.Channels, req.Channel)
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
