// Package guests is the host's offline view of guest modules for operators:
// Inspect (kind, exports, imports, declarations, sha256, ABI version) and Test
// (self-test vectors plus the host conformance suite for the module's kinds),
// each in a throwaway engine. It exists so cmd/caphost can offer
// `caphost guest inspect|test` without importing the engine; results are plain
// values. Both flavours are served: a module importing Extism's kernel is
// loaded through plugins/extism, any other through the native engine, and
// both run the same self-test and conformance suite. What a module may
// import and how it is checked are decided in package plugins (and
// plugins/extism), not here.
package guests

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/conformance"
	"github.com/caphost/caphost/plugins/extism"
)

// inspectName is the name throwaway engines load a module under; the
// module's own name comes from its describe output.
const inspectName = "inspect"

// Options configure Inspect and Test.
type Options struct {
	// CacheDir reuses compiled code across runs; "" compiles in memory.
	CacheDir string
}

// Flavours of guest module (see Inspection.Flavour): plugins.Flavour's
// values, so what inspect prints is what the host's Manager decides.
const (
	// FlavourNative: ABI v1 on the native engine (package plugins).
	FlavourNative = string(plugins.FlavourNative)
	// FlavourExtism: ABI v1 over Extism's calling convention (plugins/extism).
	FlavourExtism = string(plugins.FlavourExtism)
)

// Inspection describes a module file.
type Inspection struct {
	SHA256 string
	Bytes  int
	// Flavour is FlavourNative or FlavourExtism, decided by the imports.
	Flavour string
	// ABI is "major.minor" from describe.
	ABI     string
	Module  string
	Kinds   []string
	Imports []string
	Exports []string
	// Declarations are one line per declared codec, region, policy or template.
	Declarations []string
	// SelfTestVectors counts bundled self-test vectors.
	SelfTestVectors int
}

// Check is one self-test or conformance check.
type Check struct {
	Kind   string
	Name   string
	Status string // "pass", "fail" or "skip"
	Detail string
}

// TestReport is the outcome of Test.
type TestReport struct {
	SHA256  string
	Flavour string
	Module  string
	Checks  []Check
}

// OK reports whether no check failed.
func (r TestReport) OK() bool {
	for _, c := range r.Checks {
		if c.Status == string(plugins.CheckFail) {
			return false
		}
	}
	return true
}

func digest(wasm []byte) string {
	s := sha256.Sum256(wasm)
	return hex.EncodeToString(s[:])
}

// flavour picks the engine for wasm from its imports, by the rule the
// host's Manager applies (plugins.DetectFlavour).
func flavour(wasm []byte) string { return string(plugins.DetectFlavour(wasm)) }

// load starts wasm in a throwaway engine of its flavour; the caller calls
// closeEngine when done with the module. Such an engine only verifies
// (describe, self-test vectors, conformance), so every call gets
// plugins.VerifyCallTimeout, the deadline the Manager gives a module it is
// checking: a busy machine must not fail a correct module.
func load(ctx context.Context, wasm []byte, flav string, opts Options) (plugins.Guest, func(context.Context) error, error) {
	cfg := plugins.Config{CacheDir: opts.CacheDir, Logger: slog.New(slog.DiscardHandler)}
	if flav == FlavourExtism {
		e, err := extism.NewEngine(cfg)
		if err != nil {
			return nil, nil, err
		}
		return loadIn(ctx, e, wasm)
	}
	e, err := plugins.NewEngine(cfg)
	if err != nil {
		return nil, nil, err
	}
	return loadIn(ctx, e, wasm)
}

// engine is what plugins.Engine and extism.Engine share, each loading its
// own module type.
type engine[M plugins.Guest] interface {
	Load(ctx context.Context, name string, wasm []byte, lim plugins.Limits) (M, error)
	Close(ctx context.Context) error
}

func loadIn[M plugins.Guest](ctx context.Context, e engine[M], wasm []byte) (plugins.Guest, func(context.Context) error, error) {
	// Every import is granted: inspecting or testing a module is not serving
	// it, and the imports are listed for the operator to grant.
	m, err := e.Load(ctx, inspectName, wasm, plugins.Limits{CallTimeout: plugins.VerifyCallTimeout, Grants: plugins.AllGrants})
	if err != nil {
		_ = e.Close(ctx)
		return nil, nil, err
	}
	return m, e.Close, nil
}

// Inspect loads wasm in a throwaway engine of its flavour and describes it.
// A module that fails to load is an error (the engine's *plugins.GuestError).
func Inspect(ctx context.Context, wasm []byte, opts Options) (Inspection, error) {
	in := Inspection{SHA256: digest(wasm), Bytes: len(wasm)}
	shape, err := plugins.Shape(ctx, wasm)
	if err != nil {
		return in, err
	}
	in.Imports, in.Exports = shape.Imports, shape.Exports
	in.Flavour = flavour(wasm)
	vs, err := abi.ReadSelfTestSection(wasm)
	if err != nil {
		return in, err
	}
	if vs != nil {
		in.SelfTestVectors = len(vs.Vectors)
	}
	m, closeEngine, err := load(ctx, wasm, in.Flavour, opts)
	if err != nil {
		return in, err
	}
	defer closeEngine(context.WithoutCancel(ctx))
	d := m.Description()
	in.ABI = fmt.Sprintf("%d.%d", d.ABI.Major, d.ABI.Minor)
	in.Module = d.Module
	for _, k := range d.Kinds {
		in.Kinds = append(in.Kinds, string(k))
	}
	in.Declarations = declarations(d)
	return in, nil
}

func declarations(d *abi.Description) []string {
	var out []string
	for _, c := range d.Codecs {
		out = append(out, fmt.Sprintf("codec %s write-version %d readable %v", c.SchemaID, c.WriteVersion, c.ReadableVersions))
	}
	for _, r := range d.Regions {
		out = append(out, fmt.Sprintf("cache-region %s key-version %d ttl soft %dms hard %dms negative %dms jitter %d%% stale-if-error %t l1 %t max-bytes %d codec %s",
			r.ID, r.KeyVersion, r.SoftTTLMs, r.HardTTLMs, r.NegativeTTLMs, r.JitterPercent, r.StaleIfError, r.L1, r.MaxBytes, r.Codec))
	}
	for _, p := range d.RatePolicies {
		out = append(out, fmt.Sprintf("rate-policy %s revision %d %s limit %d window %dms burst %d max-cost %d dimensions [%s] failure-mode %s shadow %t",
			p.ID, p.Revision, p.Algorithm, p.Limit, p.WindowMs, p.Burst, p.MaximumCost, strings.Join(p.Dimensions, ","), p.FailureMode, p.Shadow))
	}
	for _, t := range d.Templates {
		out = append(out, fmt.Sprintf("renderer %s version %d locales [%s] channels [%s] params [%s]",
			t.ID, t.Version, strings.Join(t.Locales, ","), strings.Join(t.Channels, ","), strings.Join(t.Params, ",")))
	}
	return out
}

// Test loads wasm in a throwaway engine of its flavour and runs its bundled
// self-test vectors and the conformance suite for its kinds. A module that
// fails to load is an error; failed checks are reported in the TestReport.
func Test(ctx context.Context, wasm []byte, opts Options) (TestReport, error) {
	rep := TestReport{SHA256: digest(wasm)}
	if _, err := plugins.Shape(ctx, wasm); err != nil {
		return rep, err
	}
	rep.Flavour = flavour(wasm)
	m, closeEngine, err := load(ctx, wasm, rep.Flavour, opts)
	if err != nil {
		return rep, err
	}
	defer closeEngine(context.WithoutCancel(ctx))
	rep.Module = m.Description().Module
	for _, c := range conformance.RunWithSelfTest(ctx, m, wasm).Checks {
		rep.Checks = append(rep.Checks, Check{Kind: string(c.Kind), Name: c.Name, Status: string(c.Status), Detail: c.Detail})
	}
	return rep, nil
}
