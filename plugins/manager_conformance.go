package plugins

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/internal/guestio"
)

// The conformance suite lives in this package (and is re-exported by
// plugins/conformance) because the Manager must run it before every swap and
// a subpackage importing plugins cannot be imported back. It takes a Guest,
// so the Extism flavour (plugins/extism) runs the same checks.

// CheckStatus is the outcome of one check.
type CheckStatus string

// Check outcomes.
const (
	CheckPass CheckStatus = "pass"
	CheckFail CheckStatus = "fail"
	// CheckSkip: the check could not be exercised (for example no codec
	// value the guest accepts); it does not fail the report.
	CheckSkip CheckStatus = "skip"
)

// CheckResult is one conformance or self-test check.
type CheckResult struct {
	Kind   abi.Kind // "" for module-wide checks (self-test vectors)
	Name   string
	Status CheckStatus
	// Detail is bounded, sanitised text.
	Detail string
}

// ConformanceReport lists every check run against one module.
type ConformanceReport struct {
	Module string
	Checks []CheckResult
}

// OK reports whether no check failed.
func (r ConformanceReport) OK() bool {
	for _, c := range r.Checks {
		if c.Status == CheckFail {
			return false
		}
	}
	return true
}

// summaryBytes bounds Summary; it leaves room for the SwapError prefix
// within the maxStatusError bound of ModuleStatus.
const summaryBytes = maxStatusError - 128

// Summary names every failed check with as much of its detail as fits
// (bounded), or "ok". Names come first in the budget so one long detail (a
// trap's stderr) cannot hide the other failures.
func (r ConformanceReport) Summary() string {
	var fails []CheckResult
	names := 0
	for _, c := range r.Checks {
		if c.Status == CheckFail {
			fails = append(fails, c)
			names += len(c.Name) + len(": ; ")
		}
	}
	if len(fails) == 0 {
		return "ok"
	}
	per := max((summaryBytes-names)/len(fails), 0)
	parts := make([]string, len(fails))
	for i, c := range fails {
		d := c.Detail
		if len(d) > per {
			d = d[:max(per-3, 0)] + "..."
		}
		parts[i] = c.Name + ": " + d
	}
	return guestio.Sanitize([]byte(strings.Join(parts, "; ")), summaryBytes)
}

func (r *ConformanceReport) add(k abi.Kind, name string, failures []string, skip string) {
	c := CheckResult{Kind: k, Name: name, Status: CheckPass}
	switch {
	case len(failures) > 0:
		c.Status = CheckFail
		if len(failures) > 4 {
			failures = append(failures[:4], fmt.Sprintf("and %d more", len(failures)-4))
		}
		c.Detail = guestio.Sanitize([]byte(strings.Join(failures, "; ")), maxStatusError)
	case skip != "":
		c.Status = CheckSkip
		c.Detail = skip
	}
	r.Checks = append(r.Checks, c)
}

// SelfTest runs the vectors bundled in wasm's self-test section (see
// abi.SelfTestSection) against g (either flavour), which must be loaded from
// the same bytes.
// Each vector's response frame must match byte for byte. A module without
// vectors yields one skipped check.
func SelfTest(ctx context.Context, g Guest, wasm []byte) ConformanceReport {
	rep := ConformanceReport{Module: g.Name()}
	vs, err := abi.ReadSelfTestSection(wasm)
	if err != nil {
		rep.add("", "self-test section", []string{err.Error()}, "")
		return rep
	}
	if vs == nil || len(vs.Vectors) == 0 {
		rep.add("", "self-test vectors", nil, "module bundles no self-test vectors")
		return rep
	}
	for i, v := range vs.Vectors {
		name := fmt.Sprintf("self-test vector %d (%s)", i, v.Export)
		got, err := g.Call(ctx, v.Export, v.Request, nil)
		switch {
		case err != nil:
			rep.add("", name, []string{err.Error()}, "")
		case !bytes.Equal(got, v.Response):
			rep.add("", name, []string{frameDiff(got, v.Response)}, "")
		default:
			rep.add("", name, nil, "")
		}
	}
	return rep
}

// frameDiff locates where a self-test answer departs from the vector, with
// both frames' status codes (never their bytes: answers are guest output).
func frameDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	status := func(f []byte) string {
		if len(f) == 0 {
			return "an empty frame"
		}
		if c := abi.Code(f[0]); c.Valid() {
			return c.String()
		}
		return "a malformed frame"
	}
	return fmt.Sprintf("response frame differs at byte %d: got %s (%d bytes), want %s (%d bytes)", i, status(got), len(got), status(want), len(want))
}

// CheckConformance runs the host conformance suite for every kind g
// declares, through the typed calls (and their host-side re-checks) the host
// serves with, so both flavours face the same suite. vectors (may be nil)
// supplies sample codec values: the value of every bundled codec_encode
// request is used for the round-trip check.
func CheckConformance(ctx context.Context, g Guest, vectors *abi.SelfTestVectors) ConformanceReport {
	rep := ConformanceReport{Module: g.Name()}
	d := g.Description()
	for _, k := range d.Kinds {
		switch k {
		case abi.KindRatePolicy:
			conformRate(ctx, g, &rep)
		case abi.KindCodec:
			conformCodec(ctx, g, vectors, &rep)
		case abi.KindCacheRegion:
			conformRegion(ctx, g, &rep)
		case abi.KindRenderer:
			conformRenderer(ctx, g, &rep)
		}
	}
	return rep
}

// answered splits a call error into a guest status answer (acceptable in
// most checks) and a guest failure.
func answered(err error) (abi.Code, bool) {
	if err == nil {
		return abi.CodeOK, true
	}
	var se *abi.StatusError
	if errors.As(err, &se) {
		return se.Code, true
	}
	return 0, false
}

func conformRate(ctx context.Context, g Guest, rep *ConformanceReport) {
	const k = abi.KindRatePolicy
	var failed, undeclared, nondet, unknown []string
	var probes []probe
	for _, method := range []string{"GET", "POST", "DELETE", "BREW"} {
		for _, route := range []string{"/", "/orders/42", "/search/items", "/conformance/unknown/route"} {
			for _, plan := range []string{"", "free", "pro", "enterprise", "conformance-unknown-plan"} {
				for _, tier := range []string{"", "conformance-unknown-tier"} {
					if tier != "" && plan != "" {
						continue // an unknown tier matters only without a plan
					}
					req := &abi.RateSelectRequest{Route: route, Method: method, APIKeyPlan: plan, PrincipalTier: tier,
						ClientIPClass: "public", Attrs: []abi.Attr{{Name: "conformance", Value: "1"}}}
					where := method + " " + route + " plan=" + plan + " tier=" + tier
					a, err1 := RateSelect(ctx, g, req)
					b, err2 := RateSelect(ctx, g, req)
					if errors.Is(err1, ErrUndeclaredSelection) {
						// The typed call refuses such an answer itself; it is
						// this check's failure, not an unanswered request.
						undeclared = append(undeclared, where+": "+err1.Error())
						continue
					}
					// An internal status is the guest failing on its own (the
					// SDK reports its own refusal of an undeclared selection so),
					// never an answer.
					if code, ok := answered(err1); !ok || code == abi.CodeInternal {
						if strings.Contains(plan+tier+route, "unknown") {
							unknown = append(unknown, where+": "+err1.Error())
						} else {
							failed = append(failed, where+": "+err1.Error())
						}
						continue
					}
					if !sameAnswer(a, err1, b, err2) {
						nondet = append(nondet, where+": call 2 differs from call 1")
						continue
					}
					probes = append(probes, probe{where: where, first: a, firstErr: err1, call: func() (any, error) {
						return RateSelect(ctx, g, req)
					}})
				}
			}
		}
	}
	nondet = append(nondet, repeatInterleaved(probes)[""]...)
	rep.add(k, "select answers on the attribute matrix", failed, "")
	rep.add(k, "select returns declared policy ids with bounded costs", undeclared, "")
	rep.add(k, "select is deterministic", nondet, "")
	rep.add(k, "select handles unknown plans, tiers and routes", unknown, "")
}

var garbagePayloads = [][]byte{{0xff, 0xfe, 0x00, 0xc3, 0x28}, []byte("\x00conformance garbage\xff")}

func conformCodec(ctx context.Context, g Guest, vectors *abi.SelfTestVectors, rep *ConformanceReport) {
	const k = abi.KindCodec
	for _, c := range g.Description().Codecs {
		p := "codec " + c.SchemaID + ": "
		decode := func(v uint32, payload []byte) error {
			_, err := CodecDecode(ctx, g, &abi.CodecDecodeRequest{Schema: c.SchemaID, StoredVersion: v, Payload: payload})
			return err
		}
		expect := func(want abi.Code, v uint32, payload []byte, fails *[]string) {
			code, ok := answered(decode(v, payload))
			if !ok || code != want {
				*fails = append(*fails, fmt.Sprintf("version %d: got %s, want %s", v, describeAnswer(code, ok), want.String()))
			}
		}
		var garbage, readable, unknownVer, unknownSchema []string
		for _, g := range garbagePayloads {
			expect(abi.CodeCorrupt, c.WriteVersion, g, &garbage)
		}
		for _, v := range c.ReadableVersions {
			// Garbage at a readable version must be judged corrupt, proving
			// the version is accepted rather than refused as unreadable.
			expect(abi.CodeCorrupt, v, garbagePayloads[0], &readable)
		}
		expect(abi.CodeSchemaMismatch, c.WriteVersion+1, garbagePayloads[0], &unknownVer)
		if code, ok := answered(decode(0, garbagePayloads[0])); !ok || code == abi.CodeOK {
			unknownVer = append(unknownVer, "version 0: got "+describeAnswer(code, ok))
		}
		_, err := CodecDecode(ctx, g, &abi.CodecDecodeRequest{Schema: "conformance.unknown-schema", StoredVersion: c.WriteVersion, Payload: garbagePayloads[0]})
		if code, ok := answered(err); !ok || code != abi.CodeNotFound {
			unknownSchema = append(unknownSchema, "got "+describeAnswer(code, ok))
		}

		samples := [][]byte{[]byte("{}"), []byte("null"), []byte(`""`), []byte("0")}
		if vectors != nil {
			for _, v := range vectors.Vectors {
				var req abi.CodecEncodeRequest
				if v.Export == abi.ExportCodecEncode && req.Unmarshal(v.Request) == nil && req.Schema == c.SchemaID {
					samples = append(samples, req.Value)
				}
			}
		}
		var roundTrip []string
		exercised := 0
		for i, s := range samples {
			enc, err := CodecEncode(ctx, g, &abi.CodecEncodeRequest{Schema: c.SchemaID, Value: s})
			if code, ok := answered(err); !ok {
				roundTrip = append(roundTrip, fmt.Sprintf("sample %d encode: %v", i, err))
				continue
			} else if code != abi.CodeOK {
				continue // the guest refuses this value: not a sample for it
			}
			exercised++
			dec, err := CodecDecode(ctx, g, &abi.CodecDecodeRequest{Schema: c.SchemaID, StoredVersion: enc.Version, Payload: enc.Payload})
			if err != nil {
				roundTrip = append(roundTrip, fmt.Sprintf("sample %d decode: %v", i, err))
				continue
			}
			again, err := CodecEncode(ctx, g, &abi.CodecEncodeRequest{Schema: c.SchemaID, Value: dec.Value})
			if err != nil || !bytes.Equal(again.Payload, enc.Payload) {
				roundTrip = append(roundTrip, fmt.Sprintf("sample %d: encode(decode(encode(v))) differs from encode(v)", i))
			}
		}
		skip := ""
		if exercised == 0 && len(roundTrip) == 0 {
			skip = "no sample value accepted: bundle a codec_encode self-test vector"
		}
		rep.add(k, p+"encode/decode round trip at the write version", roundTrip, skip)
		rep.add(k, p+"readable versions are accepted", readable, "")
		rep.add(k, p+"garbage decodes as corrupt", garbage, "")
		rep.add(k, p+"unknown versions are schema-mismatch", unknownVer, "")
		rep.add(k, p+"unknown schema is not-found", unknownSchema, "")
	}
}

func describeAnswer(c abi.Code, ok bool) string {
	if !ok {
		return "a guest failure"
	}
	return c.String()
}

func conformRegion(ctx context.Context, g Guest, rep *ConformanceReport) {
	const k = abi.KindCacheRegion
	attrSets := [][]abi.Attr{
		nil,
		{{Name: "key", Value: "42"}},
		{{Name: "key", Value: "42"}, {Name: "locale", Value: "en"}, {Name: "variant", Value: "b"}},
		{{Name: "key", Value: strings.Repeat("x", abi.MaxValueBytes)}},
		{{Name: "conformance-unknown", Value: "\u00e9\u00e8"}},
	}
	// Every region's inputs are repeated interleaved with every other
	// region's; failures are reported per region.
	type regionChecks struct{ bounded, nondet, admit, unknown []string }
	checks := map[string]*regionChecks{}
	var probes []probe
	for _, r := range g.Description().Regions {
		c := &regionChecks{}
		checks[r.ID] = c
		bounded, nondet, admit, unknown := &c.bounded, &c.nondet, &c.admit, &c.unknown
		for i, attrs := range attrSets {
			req := &abi.CanonicalizeRequest{Region: r.ID, Attrs: attrs}
			a, err1 := Canonicalize(ctx, g, req)
			b, err2 := Canonicalize(ctx, g, req)
			if _, ok := answered(err1); !ok {
				*bounded = append(*bounded, fmt.Sprintf("attrs %d: %v", i, err1))
				continue
			}
			if !sameAnswer(a, err1, b, err2) {
				*nondet = append(*nondet, fmt.Sprintf("attrs %d: call 2 differs from call 1", i))
				continue
			}
			probes = append(probes, probe{group: r.ID, where: fmt.Sprintf("attrs %d", i), first: a, firstErr: err1, call: func() (any, error) {
				return Canonicalize(ctx, g, req)
			}})
		}
		for _, size := range []uint64{0, 1, uint64(r.MaxBytes), uint64(r.MaxBytes) + 1} {
			req := &abi.AdmitRequest{Region: r.ID, SizeBytes: size, Class: "conformance", CostHintUS: 1000, LoadLatency: 5000}
			a, err1 := Admit(ctx, g, req)
			b, err2 := Admit(ctx, g, req)
			if err1 != nil {
				*admit = append(*admit, fmt.Sprintf("size %d: %v", size, err1))
			} else if err2 != nil || a != b {
				*nondet = append(*nondet, fmt.Sprintf("admit size %d: call 2 differs from call 1", size))
			} else {
				probes = append(probes, probe{group: r.ID, where: fmt.Sprintf("admit size %d", size), first: a, call: func() (any, error) {
					return Admit(ctx, g, req)
				}})
			}
		}
		_, err := Canonicalize(ctx, g, &abi.CanonicalizeRequest{Region: "conformance.unknown-region"})
		if code, ok := answered(err); !ok || code != abi.CodeNotFound {
			*unknown = append(*unknown, "canonicalize: got "+describeAnswer(code, ok))
		}
	}
	later := repeatInterleaved(probes)
	for _, r := range g.Description().Regions {
		p, c := "region "+r.ID+": ", checks[r.ID]
		rep.add(k, p+"canonicalize answers bounded key parts", c.bounded, "")
		rep.add(k, p+"canonicalize and admit are deterministic", append(c.nondet, later[r.ID]...), "")
		rep.add(k, p+"admit answers", c.admit, "")
		rep.add(k, p+"unknown region is not-found", c.unknown, "")
	}
}

// hostileParam is what every template parameter is set to: an HTML part that
// shows it verbatim is injectable.
const hostileParam = `<script>alert("x")</script>&'`

func conformRenderer(ctx context.Context, g Guest, rep *ConformanceReport) {
	const k = abi.KindRenderer
	// Every template's renders are repeated interleaved with every other
	// template's; failures are reported per template.
	type templateChecks struct{ renders, escaped, bounded, nondet, unknown []string }
	checks := make([]*templateChecks, len(g.Description().Templates))
	var probes []probe
	for ti, t := range g.Description().Templates {
		c := &templateChecks{}
		checks[ti] = c
		renders, escaped, bounded, nondet, unknown := &c.renders, &c.escaped, &c.bounded, &c.nondet, &c.unknown
		params := make([]abi.Attr, 0, len(t.Params))
		for _, name := range t.Params {
			params = append(params, abi.Attr{Name: name, Value: hostileParam})
		}
		for _, loc := range t.Locales {
			for _, ch := range t.Channels {
				where := loc + "/" + ch
				req := &abi.RenderRequest{Template: t.ID, Version: t.Version, Locale: loc, Channel: ch, Params: params, NowUnixMilli: 1_767_225_600_000}
				a, err := Render(ctx, g, req)
				if err != nil {
					*renders = append(*renders, where+": "+err.Error())
					continue
				}
				total := 0
				for _, part := range a.Parts {
					total += len(part.Body)
					if strings.HasPrefix(strings.ToLower(part.ContentType), "text/html") && bytes.Contains(part.Body, []byte("<script>")) {
						*escaped = append(*escaped, where+" part "+part.Name)
					}
				}
				if total > abi.MaxPayloadBytes {
					*bounded = append(*bounded, fmt.Sprintf("%s: %d bytes", where, total))
				}
				if b, err := Render(ctx, g, req); !sameAnswer(a, nil, b, err) {
					*nondet = append(*nondet, where+": call 2 differs from call 1")
					continue
				}
				probes = append(probes, probe{group: strconv.Itoa(ti), where: where, first: a, call: func() (any, error) {
					return Render(ctx, g, req)
				}})
			}
		}
		_, err := Render(ctx, g, &abi.RenderRequest{Template: t.ID, Version: t.Version, Locale: "conformance-unknown", Channel: t.Channels[0]})
		if code, ok := answered(err); !ok || code != abi.CodeNotFound {
			*unknown = append(*unknown, "unknown locale: got "+describeAnswer(code, ok))
		}
	}
	later := repeatInterleaved(probes)
	for ti, t := range g.Description().Templates {
		p, c := fmt.Sprintf("template %s v%d: ", t.ID, t.Version), checks[ti]
		rep.add(k, p+"every locale and channel renders", c.renders, "")
		rep.add(k, p+"parameters are escaped in HTML parts", c.escaped, "")
		rep.add(k, p+"output is bounded", c.bounded, "")
		rep.add(k, p+"rendering is deterministic for a fixed now", append(c.nondet, later[strconv.Itoa(ti)]...), "")
		rep.add(k, p+"unknown locale is not-found", c.unknown, "")
	}
	_, err := Render(ctx, g, &abi.RenderRequest{Template: "conformance.unknown-template", Version: 1, Locale: "en", Channel: "email"})
	var unknown []string
	if code, ok := answered(err); !ok || code != abi.CodeNotFound {
		unknown = append(unknown, "got "+describeAnswer(code, ok))
	}
	rep.add(k, "unknown template is not-found", unknown, "")
}
