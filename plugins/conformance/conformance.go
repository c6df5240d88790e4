// Package conformance is the host conformance suite for caphost guests: the
// checks every module of a kind must pass before it may serve (rate-policy:
// declared ids, bounded costs, determinism, unknown plans and routes; codec:
// round trip, readable and unknown versions, garbage is corrupt; cache-region:
// bounded, deterministic key parts and admission; renderer: every declared
// template, locale and channel renders, HTML parts escape parameters, output
// is bounded). Determinism is checked on repeated, interleaved inputs, every
// answer against the input's first (plugins/determinism.go; ABI.md §2 says
// what that can and cannot detect). The checks are implemented in package
// plugins, whose hot-swap Manager runs them before every swap; this package
// is the entry point for tools (`caphost guest test`, selftestpack) and
// takes a plugins.Guest, so a module of either flavour (native
// *plugins.Module, Extism *extism.Module) runs the same suite. New checks are
// added in plugins/manager_conformance.go.
package conformance

import (
	"context"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// Report lists the per-check results for one module.
type Report = plugins.ConformanceReport

// Check is one check's result.
type Check = plugins.CheckResult

// Run runs the conformance suite for every kind g declares.
func Run(ctx context.Context, g plugins.Guest) Report {
	return plugins.CheckConformance(ctx, g, nil)
}

// RunWithSelfTest runs the module's bundled self-test vectors (wasm must be
// the bytes g was loaded from) and then the conformance suite, using the
// bundled codec_encode vectors as round-trip samples.
func RunWithSelfTest(ctx context.Context, g plugins.Guest, wasm []byte) Report {
	rep := plugins.SelfTest(ctx, g, wasm)
	vectors, err := abi.ReadSelfTestSection(wasm)
	if err != nil {
		vectors = nil // already reported as a failed check by SelfTest
	}
	conf := plugins.CheckConformance(ctx, g, vectors)
	rep.Checks = append(rep.Checks, conf.Checks...)
	return rep
}
