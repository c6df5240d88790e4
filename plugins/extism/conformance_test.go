package extism

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/conformance"
	"github.com/caphost/caphost/plugins/conformance/conformancetest"
)

// generous is for tests that compare answers, not deadlines: a loaded,
// race-instrumented machine must not turn slowness into a failed check.
var generous = plugins.Limits{CallTimeout: 5 * time.Second, InitTimeout: 30 * time.Second}

// flavours loads the native and the Extism build of one guest.
func flavours(t *testing.T, native, ext string) map[string]plugins.Guest {
	t.Helper()
	return map[string]plugins.Guest{
		"native": loadNative(t, newNative(t, plugins.Config{}), native, generous),
		"extism": loadExt(t, newExtism(t, plugins.Config{}), ext, generous),
	}
}

// rateVectors reads guests/rate-policy/selftest.json, the vectors `make
// guests` bundles into both flavours of the reference rate-policy guest.
func rateVectors(t *testing.T) *vectors.File {
	t.Helper()
	f, err := vectors.ReadFile(filepath.Join("..", "..", "guests", "rate-policy", "selftest.json"))
	require.NoError(t, err)
	return f
}

func bundle(t *testing.T, wasm []byte, f *vectors.File) []byte {
	t.Helper()
	sec, err := f.Section()
	require.NoError(t, err)
	return abi.AppendSelfTestSection(wasm, sec)
}

// outcomes lists "[kind] name: status" for every check of rep, in order.
func outcomes(rep plugins.ConformanceReport) []string {
	out := make([]string, len(rep.Checks))
	for i, c := range rep.Checks {
		out[i] = fmt.Sprintf("[%s] %s: %s", c.Kind, c.Name, c.Status)
	}
	return out
}

// TestReferenceGuestPassesTheNativeSuite: the Extism reference guests (Go
// PDK, and AssemblyScript as `make guests` built it), with the native
// guest's vectors bundled (as `make guests` does), pass every self-test
// vector and the rate-policy conformance suite, and each report lists
// exactly the checks the native guest's report lists.
func TestReferenceGuestPassesTheNativeSuite(t *testing.T) {
	ctx := context.Background()
	f := rateVectors(t)
	require.Equal(t, "rate-policy", f.Module)
	gs := flavours(t, "rate-policy", "rate-policy-extism")
	gs["as"] = loadAS(t, newExtism(t, plugins.Config{}), generous)
	asBuilt := asWasm(t)
	sec, err := f.Section()
	require.NoError(t, err)
	bundled, err := abi.ReadSelfTestSection(asBuilt)
	require.NoError(t, err)
	require.Equal(t, sec, bundled, "make guests bundles the native twin's vectors into the AssemblyScript guest")
	reports := map[string]plugins.ConformanceReport{}
	for name, g := range gs {
		wasm := asBuilt
		if name != "as" {
			wasm = bundle(t, th.wasm[map[string]string{"native": "rate-policy", "extism": "rate-policy-extism"}[name]], f)
		}
		rep := conformance.RunWithSelfTest(ctx, g, wasm)
		require.True(t, rep.OK(), "%s: %s", name, rep.Summary())
		vectorsRun := 0
		for _, c := range rep.Checks {
			assert.Equal(t, plugins.CheckPass, c.Status, "%s: %s: %s", name, c.Name, c.Detail)
			if c.Kind == "" {
				vectorsRun++
			}
		}
		assert.Equal(t, len(f.Vectors), vectorsRun, "%s: every bundled vector ran", name)
		for _, want := range []string{
			"[rate-policy] select answers on the attribute matrix: pass",
			"[rate-policy] select returns declared policy ids with bounded costs: pass",
			"[rate-policy] select is deterministic: pass",
			"[rate-policy] select handles unknown plans, tiers and routes: pass",
		} {
			assert.Contains(t, outcomes(rep), want, name)
		}
		reports[name] = rep
	}
	assert.Equal(t, outcomes(reports["native"]), outcomes(reports["extism"]))
	assert.Equal(t, outcomes(reports["native"]), outcomes(reports["as"]))
}

// TestWrongVectorFailsAlike: a vectors file with one wrong answer fails that
// vector, and only it, with the same detail on both flavours.
func TestWrongVectorFailsAlike(t *testing.T) {
	ctx := context.Background()
	f := rateVectors(t)
	// Vector 2 is "free API key, write: free.write at cost 1".
	f.Vectors[2].Response.(*abi.RateSelectResponse).Selections[0].PolicyID = "free.read"
	gs := flavours(t, "rate-policy", "rate-policy-extism")
	gs["as"] = loadAS(t, newExtism(t, plugins.Config{}), generous)
	reports := map[string]plugins.ConformanceReport{}
	for name, g := range gs {
		var wasm []byte
		if name == "as" {
			// SelfTest reads the vectors from the bytes it is given: the
			// built AS module already carries the right ones, so the
			// wrong ones travel in an empty module.
			wasm = bundle(t, []byte("\x00asm\x01\x00\x00\x00"), f)
		} else {
			wasm = bundle(t, th.wasm[map[string]string{"native": "rate-policy", "extism": "rate-policy-extism"}[name]], f)
		}
		rep := plugins.SelfTest(ctx, g, wasm)
		require.False(t, rep.OK(), name)
		require.Len(t, rep.Checks, len(f.Vectors), name)
		for i, c := range rep.Checks {
			if i != 2 {
				assert.Equal(t, plugins.CheckPass, c.Status, "%s vector %d: %s", name, i, c.Detail)
				continue
			}
			assert.Equal(t, plugins.CheckFail, c.Status, name)
			assert.Equal(t, "self-test vector 2 (caphost_rate_select)", c.Name, name)
			// "free.write" and "free.read" first differ at the 'w'.
			assert.Regexp(t, `^response frame differs at byte \d+: got ok \(\d+ bytes\), want ok \(\d+ bytes\)$`, c.Detail, name)
		}
		reports[name] = rep
	}
	assert.Equal(t, reports["native"].Checks, reports["extism"].Checks)
	assert.Equal(t, reports["native"].Checks, reports["as"].Checks)
	assert.Contains(t, reports["extism"].Summary(), "self-test vector 2 (caphost_rate_select): response frame differs at byte ")
}

// TestWrongGuestFailsPrecisely runs the suite on the Extism twin of
// testdata/guests/wrongans, which gets exactly one thing wrong per kind:
// each kind fails exactly that check, with a detail naming the offending
// input, the same checks fail on the native wrongans, and the module keeps
// serving.
func TestWrongGuestFailsPrecisely(t *testing.T) {
	ctx := context.Background()
	gs := flavours(t, "wrongans", "wrongans-extism")
	ext := gs["extism"]
	rep := conformance.Run(ctx, ext)
	require.False(t, rep.OK())
	kinds := conformancetest.ExactFailures(t, rep, map[string]conformancetest.Failure{
		"codec wrong.profile: readable versions are accepted": {Kind: abi.KindCodec,
			Detail: []string{"version 1: got ok, want corrupt"}},
		"region wrong.region: canonicalize answers bounded key parts": {Kind: abi.KindCacheRegion,
			Detail: []string{"attrs 3: ", "guest wrongans-extism export caphost_cache_canonicalize: " + string(plugins.ClassTrap),
				"index out of range [1024] with length 256"}},
		"select handles unknown plans, tiers and routes": {Kind: abi.KindRatePolicy,
			Detail: []string{"plan=conformance-unknown-plan", "export caphost_rate_select: " + string(plugins.ClassTrap),
				"invalid memory address or nil pointer dereference"}},
		"template wrong.welcome v1: parameters are escaped in HTML parts": {Kind: abi.KindRenderer,
			Detail: []string{"en/email part html"}},
	})
	for _, k := range []abi.Kind{abi.KindCodec, abi.KindCacheRegion, abi.KindRatePolicy, abi.KindRenderer} {
		assert.Greater(t, kinds[k], 1, "kind %s ran its suite", k)
	}
	for _, c := range rep.Checks {
		if c.Name == "select handles unknown plans, tiers and routes" {
			assert.NotContains(t, c.Detail, "tier=conformance-unknown-tier", "known plans and unknown tiers answered")
		}
	}

	// The native wrongans fails the same checks; the details of the checks
	// that are not traps (whose text is the engine's) are identical.
	nat := conformance.Run(ctx, gs["native"])
	require.Equal(t, outcomes(nat), outcomes(rep))
	for i, c := range rep.Checks {
		if c.Status == plugins.CheckFail && !strings.Contains(c.Detail, string(plugins.ClassTrap)) {
			assert.Equal(t, nat.Checks[i].Detail, c.Detail, c.Name)
		}
	}

	// The module keeps serving after the trapped calls.
	_, err := plugins.RateSelect(ctx, ext, &abi.RateSelectRequest{Route: "/", Method: "GET", APIKeyPlan: "pro"})
	require.NoError(t, err)
}
