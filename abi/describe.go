package abi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Bounds on describe output.
const (
	// MaxDescribeBytes bounds the JSON a module returns from describe.
	MaxDescribeBytes = 64 << 10
	// MaxDeclarations bounds each declaration list.
	MaxDeclarations = 64
	// MaxIDBytes bounds identifiers (schema, region, policy, template ids).
	MaxIDBytes = 64
)

// ErrInvalidDescription is matched (errors.Is) by every describe validation error.
var ErrInvalidDescription = errors.New("abi: invalid describe output")

// Description is a module's describe output: what it implements and the
// declarations the host validates and freezes. Cross-module checks (duplicate
// ids) and policy bounds (TTL ranges, rate ceilings) belong to the host's
// policy compiler; this type checks only what the ABI itself fixes.
type Description struct {
	ABI          VersionDecl      `json:"abi"`
	Module       string           `json:"module"`
	Kinds        []Kind           `json:"kinds"`
	Codecs       []CodecDecl      `json:"codecs,omitempty"`
	Regions      []RegionDecl     `json:"regions,omitempty"`
	RatePolicies []RatePolicyDecl `json:"rate_policies,omitempty"`
	Templates    []TemplateDecl   `json:"templates,omitempty"`
}

// VersionDecl is the ABI version a module was built against.
type VersionDecl struct {
	Major uint16 `json:"major"`
	Minor uint16 `json:"minor"`
}

// CodecDecl declares a payload schema handled by a codec guest.
type CodecDecl struct {
	SchemaID         string   `json:"schema_id"`
	WriteVersion     uint32   `json:"write_version"`
	ReadableVersions []uint32 `json:"readable_versions"`
}

// RegionDecl declares a cache region. Durations are milliseconds.
type RegionDecl struct {
	ID            string `json:"id"`
	KeyVersion    uint32 `json:"key_version"`
	SoftTTLMs     int64  `json:"soft_ttl_ms"`
	HardTTLMs     int64  `json:"hard_ttl_ms"`
	NegativeTTLMs int64  `json:"negative_ttl_ms,omitempty"`
	JitterPercent uint8  `json:"jitter_percent,omitempty"`
	StaleIfError  bool   `json:"stale_if_error,omitempty"`
	L1            bool   `json:"l1,omitempty"`
	MaxBytes      int64  `json:"max_bytes"`
	Codec         string `json:"codec"`
	Consistency   string `json:"consistency,omitempty"`
	Stampede      string `json:"stampede,omitempty"`
}

// RatePolicyDecl declares a rate policy. The algorithm comes from the host's
// closed menu; the host owns the implementation.
type RatePolicyDecl struct {
	ID          string    `json:"id"`
	Revision    uint32    `json:"revision"`
	Algorithm   Algorithm `json:"algorithm"`
	Limit       uint64    `json:"limit"`
	WindowMs    int64     `json:"window_ms,omitempty"`
	Burst       uint64    `json:"burst,omitempty"`
	MaximumCost uint32    `json:"maximum_cost"`
	Dimensions  []string  `json:"dimensions,omitempty"`
	FailureMode string    `json:"failure_mode,omitempty"`
	Shadow      bool      `json:"shadow,omitempty"`
}

// TemplateDecl declares a renderer template.
type TemplateDecl struct {
	ID       string   `json:"id"`
	Version  uint32   `json:"version"`
	Locales  []string `json:"locales"`
	Channels []string `json:"channels"`
	Params   []string `json:"params,omitempty"`
	// ParamSpecs, when present, types and bounds every parameter: one
	// spec per name of Params, in the same order. The host checks values
	// against them before it calls the guest. ABI 1.1: a describe that
	// declares 1.0 may not carry it, and a 1.0 host refuses a 1.1 guest by
	// version, so a guest fails to load rather than receive unchecked
	// values.
	ParamSpecs []ParamSpec `json:"param_specs,omitempty"`
}

// ParamSpec types and bounds one template parameter.
type ParamSpec struct {
	Name string    `json:"name"`
	Type ParamType `json:"type"`
	// MaxBytes bounds the value's UTF-8 bytes (1..MaxValueBytes); 0 leaves
	// the host's configured bound.
	MaxBytes uint16 `json:"max_bytes,omitempty"`
}

// ParamType is the closed set of parameter types. Every value travels as
// UTF-8 text in one canonical form per type, so one intent always
// renders the same bytes.
type ParamType string

// Parameter types.
const (
	// ParamText is any UTF-8 text without NUL.
	ParamText ParamType = "text"
	// ParamInteger is a base-10 int64 without leading zeros or "+"
	// ("-42", "0").
	ParamInteger ParamType = "integer"
	// ParamTimestamp is an instant in UTC with milliseconds,
	// "2006-01-02T15:04:05.000Z".
	ParamTimestamp ParamType = "timestamp"
)

// Valid reports whether t is a v1 parameter type.
func (t ParamType) Valid() bool {
	return t == ParamText || t == ParamInteger || t == ParamTimestamp
}

// ParseDescription decodes and validates describe output with the standard
// library: bounded size, unknown fields and trailing data rejected, then
// Validate. It is for a guest checking its own output (the SDK's tests) and
// for tools; it is not the host's decoder. encoding/json — the only JSON
// decoder package abi may use, since it imports the standard library only
// and builds for wasip1 — matches member names case-insensitively, keeps
// the last of duplicate members, reads null as the zero value and turns
// invalid UTF-8 and lone surrogates into U+FFFD, so a hostile module could
// make two readers disagree. The host reads guest output with
// plugins.ParseDescription, which refuses all of that (ABI.md §6) and then
// calls Validate; whatever it accepts, this function accepts with the same
// result.
func ParseDescription(b []byte) (*Description, error) {
	if len(b) > MaxDescribeBytes {
		return nil, fmt.Errorf("%w: %d bytes exceed %d", ErrInvalidDescription, len(b), MaxDescribeBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d Description
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidDescription, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data after JSON object", ErrInvalidDescription)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Validate checks what the ABI fixes about a decoded description: a
// supported major, v1 kinds and algorithms, well-formed unique ids, and
// declarations consistent with the declared kinds. All problems are
// reported together. Both ParseDescription and plugins.ParseDescription end
// with it.
func (d *Description) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidDescription}, args...)...))
	}
	if err := CheckVersion(d.ABI.Major, d.ABI.Minor); err != nil {
		errs = append(errs, err)
	}
	if !ValidID(d.Module) {
		bad("module name %q is not an id", d.Module)
	}
	if len(d.Kinds) == 0 || len(d.Kinds) > 4 {
		bad("kinds must list 1 to 4 kinds")
	}
	for i, k := range d.Kinds {
		if !k.Valid() {
			bad("kinds[%d] %q is not a v1 kind", i, k)
		} else if slices.Index(d.Kinds, k) != i {
			bad("kind %q listed twice", k)
		}
	}
	has := func(k Kind) bool { return slices.Contains(d.Kinds, k) }
	pairs := []struct {
		k Kind
		n int
	}{{KindCodec, len(d.Codecs)}, {KindCacheRegion, len(d.Regions)}, {KindRatePolicy, len(d.RatePolicies)}, {KindRenderer, len(d.Templates)}}
	for _, p := range pairs {
		switch {
		case has(p.k) && p.n == 0:
			bad("kind %q declared without declarations", p.k)
		case !has(p.k) && p.n > 0:
			bad("%d %s declarations without kind %q", p.n, p.k, p.k)
		case p.n > MaxDeclarations:
			bad("%d %s declarations exceed %d", p.n, p.k, MaxDeclarations)
		}
	}
	ids := map[string]bool{}
	uniq := func(what, id string) {
		if !ValidID(id) {
			bad("%s id %q is not an id ([a-z0-9][a-z0-9._-]*, at most %d bytes)", what, id, MaxIDBytes)
			return
		}
		if ids[what+"/"+id] {
			bad("%s id %q declared twice", what, id)
		}
		ids[what+"/"+id] = true
	}
	for _, c := range d.Codecs {
		uniq("codec", c.SchemaID)
		if c.WriteVersion == 0 {
			bad("codec %q: write_version must be >= 1", c.SchemaID)
		}
		if !slices.Contains(c.ReadableVersions, c.WriteVersion) {
			bad("codec %q: readable_versions must include write_version", c.SchemaID)
		}
		if len(c.ReadableVersions) > MaxListItems {
			bad("codec %q: too many readable versions", c.SchemaID)
		}
		for _, v := range c.ReadableVersions {
			if v == 0 || v > c.WriteVersion {
				bad("codec %q: readable version %d outside 1..write_version", c.SchemaID, v)
			}
		}
	}
	for _, r := range d.Regions {
		uniq("region", r.ID)
		if r.KeyVersion == 0 {
			bad("region %q: key_version must be >= 1", r.ID)
		}
		if r.SoftTTLMs <= 0 || r.HardTTLMs < r.SoftTTLMs || r.NegativeTTLMs < 0 {
			bad("region %q: need 0 < soft_ttl_ms <= hard_ttl_ms and negative_ttl_ms >= 0", r.ID)
		}
		if r.JitterPercent > 50 {
			bad("region %q: jitter_percent above 50", r.ID)
		}
		if r.MaxBytes <= 0 {
			bad("region %q: max_bytes must be > 0", r.ID)
		}
		if !ValidID(r.Codec) {
			bad("region %q: codec %q is not an id", r.ID, r.Codec)
		}
	}
	for _, p := range d.RatePolicies {
		uniq("rate policy", p.ID)
		if p.Revision == 0 {
			bad("rate policy %q: revision must be >= 1", p.ID)
		}
		if !p.Algorithm.Valid() {
			bad("rate policy %q: algorithm %q is not on the host menu", p.ID, p.Algorithm)
		}
		if p.Limit == 0 || p.MaximumCost == 0 {
			bad("rate policy %q: limit and maximum_cost must be > 0", p.ID)
		}
		// For concurrency window_ms is the permit TTL, which the host
		// requires too: a permit without one would never be reclaimed.
		if p.WindowMs <= 0 {
			bad("rate policy %q: window_ms must be > 0", p.ID)
		}
		if len(p.Dimensions) > MaxDimensions {
			bad("rate policy %q: more than %d dimensions", p.ID, MaxDimensions)
		}
		for _, dim := range p.Dimensions {
			if !ValidID(dim) {
				bad("rate policy %q: dimension %q is not an id", p.ID, dim)
			}
		}
	}
	for _, t := range d.Templates {
		uniq("template", t.ID)
		if t.Version == 0 {
			bad("template %q: version must be >= 1", t.ID)
		}
		if len(t.Locales) == 0 || len(t.Channels) == 0 {
			bad("template %q: needs locales and channels", t.ID)
		}
		for _, list := range [][]string{t.Locales, t.Channels, t.Params} {
			if len(list) > MaxListItems {
				bad("template %q: list too long", t.ID)
			}
			for _, s := range list {
				if len(s) == 0 || len(s) > MaxNameBytes {
					bad("template %q: empty or oversized name", t.ID)
				}
			}
		}
		if len(t.ParamSpecs) > 0 && d.ABI.Minor < 1 {
			bad("template %q: param_specs needs ABI 1.1, the guest declares %d.%d", t.ID, d.ABI.Major, d.ABI.Minor)
		}
		if len(t.ParamSpecs) > 0 && len(t.ParamSpecs) != len(t.Params) {
			bad("template %q: param_specs must have one spec per param", t.ID)
		}
		for i, ps := range t.ParamSpecs {
			if i < len(t.Params) && ps.Name != t.Params[i] {
				bad("template %q: param_specs[%d] is not params[%d]", t.ID, i, i)
			}
			if !ps.Type.Valid() {
				bad("template %q: param_specs[%d] type %q is not text, integer or timestamp", t.ID, i, ps.Type)
			}
			if ps.MaxBytes > MaxValueBytes {
				bad("template %q: param_specs[%d] max_bytes above %d", t.ID, i, MaxValueBytes)
			}
		}
	}
	return errors.Join(errs...)
}

// ValidID reports whether s matches [a-z0-9][a-z0-9._-]* with at most MaxIDBytes bytes.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}
