package conformance_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/conformance"
	"github.com/caphost/caphost/plugins/conformance/conformancetest"
)

// bundled returns the guest's bytes with its reference vectors
// (guests/<name>/selftest.json) in the self-test section. The section
// changes no code, so a module loaded from the plain bytes runs them.
func bundled(t *testing.T, name string) ([]byte, int) {
	t.Helper()
	f, err := vectors.ReadFile(filepath.Join("..", "..", "guests", name, "selftest.json"))
	require.NoError(t, err)
	sec, err := f.Section()
	require.NoError(t, err)
	return abi.AppendSelfTestSection(th.wasm[name], sec), len(sec.Vectors)
}

// checksOf lists "[kind] name: status" for every check of rep.
func checksOf(rep conformance.Report) map[string]plugins.CheckStatus {
	out := map[string]plugins.CheckStatus{}
	for _, c := range rep.Checks {
		out["["+string(c.Kind)+"] "+c.Name] = c.Status
	}
	return out
}

func TestReferenceGuestsConform(t *testing.T) {
	ctx := context.Background()
	// Checks that must be among each kind's results, so the suite is known
	// to have exercised the kind rather than passed vacuously.
	expected := map[string][]string{
		"codec": codecChecks("user-profile", "product", "search-page"),
		"cache-region": {
			"[cache-region] region products: canonicalize answers bounded key parts",
			"[cache-region] region products: canonicalize and admit are deterministic",
			"[cache-region] region products: admit answers",
			"[cache-region] region products: unknown region is not-found",
			"[cache-region] region search-results: canonicalize answers bounded key parts",
			"[cache-region] region search-results: canonicalize and admit are deterministic",
			"[cache-region] region search-results: admit answers",
			"[cache-region] region search-results: unknown region is not-found",
		},
		"rate-policy": {
			"[rate-policy] select answers on the attribute matrix",
			"[rate-policy] select returns declared policy ids with bounded costs",
			"[rate-policy] select is deterministic",
			"[rate-policy] select handles unknown plans, tiers and routes",
		},
		"renderer": {
			"[renderer] template welcome v1: every locale and channel renders",
			"[renderer] template welcome v1: parameters are escaped in HTML parts",
			"[renderer] template welcome v1: output is bounded",
			"[renderer] template welcome v1: rendering is deterministic for a fixed now",
			"[renderer] template welcome v1: unknown locale is not-found",
			"[renderer] unknown template is not-found",
		},
	}
	for name, want := range expected {
		t.Run(name, func(t *testing.T) {
			m := load(t, name)
			wasm, n := bundled(t, name)
			rep := conformance.RunWithSelfTest(ctx, m, wasm)
			require.True(t, rep.OK(), rep.Summary())
			assert.Equal(t, "ok", rep.Summary())
			got := checksOf(rep)
			for _, c := range want {
				assert.Equal(t, plugins.CheckPass, got[c], c)
			}
			vectorsRun := 0
			for _, c := range rep.Checks {
				assert.Equal(t, plugins.CheckPass, c.Status, "%s: %s", c.Name, c.Detail)
				if c.Kind == "" {
					assert.True(t, strings.HasPrefix(c.Name, "self-test vector "), c.Name)
					vectorsRun++
				}
			}
			assert.Equal(t, n, vectorsRun, "every bundled vector ran")

			// Without vectors the same suite runs, minus the self-test.
			plain := conformance.Run(ctx, m)
			require.True(t, plain.OK(), plain.Summary())
			assert.Len(t, plain.Checks, len(rep.Checks)-n)
		})
	}
}

// codecChecks lists the suite's five checks for each schema.
func codecChecks(schemas ...string) []string {
	var out []string
	for _, s := range schemas {
		p := "[codec] codec " + s + ": "
		out = append(out, p+"encode/decode round trip at the write version", p+"readable versions are accepted",
			p+"garbage decodes as corrupt", p+"unknown versions are schema-mismatch", p+"unknown schema is not-found")
	}
	return out
}

// Every schema of the codec refuses the suite's generic sample values ({},
// null, "", 0: a profile, a product and a search page each need members), so
// only the bundled codec_encode vectors let the round-trip checks run.
func TestCodecRoundTripUsesBundledSamples(t *testing.T) {
	ctx := context.Background()
	m := load(t, "codec")
	plain := conformance.Run(ctx, m)
	wasm, _ := bundled(t, "codec")
	rep := conformance.RunWithSelfTest(ctx, m, wasm)
	for _, s := range []string{"user-profile", "product", "search-page"} {
		check := "[codec] codec " + s + ": encode/decode round trip at the write version"
		assert.Equal(t, plugins.CheckSkip, checksOf(plain)[check], plain.Summary())
		assert.Equal(t, plugins.CheckPass, checksOf(rep)[check], rep.Summary())
	}
}

// The reference guests are one product: every region guests/cache-region
// declares is stored with a schema guests/codec declares, and that schema
// writes payloads the region's max_bytes can hold (the bundled product and
// search-page samples).
func TestReferenceRegionsHaveTheirCodecs(t *testing.T) {
	ctx := context.Background()
	codec, regions := load(t, "codec"), load(t, "cache-region")
	schemas := map[string]bool{}
	for _, c := range codec.Description().Codecs {
		schemas[c.SchemaID] = true
	}
	f, err := vectors.ReadFile(filepath.Join("..", "..", "guests", "codec", "selftest.json"))
	require.NoError(t, err)
	for _, r := range regions.Description().Regions {
		require.True(t, schemas[r.Codec], "region %s: codec %q is not declared by guests/codec", r.ID, r.Codec)
		sampled := false
		for _, v := range f.Vectors {
			req, ok := v.Request.(*abi.CodecEncodeRequest)
			if !ok || req.Schema != r.Codec || v.Status != abi.CodeOK {
				continue
			}
			enc, err := plugins.CodecEncode(ctx, codec, req)
			require.NoError(t, err, v.Name)
			assert.LessOrEqual(t, int64(len(enc.Payload)), r.MaxBytes, v.Name)
			sampled = true
		}
		assert.True(t, sampled, "region %s: guests/codec bundles no %s sample", r.ID, r.Codec)
	}
}

// TestWrongGuestFailsPrecisely runs the suite on testdata/guests/wrongans,
// which gets exactly one thing wrong per kind: each kind fails exactly that
// check, with a detail naming the offending input, and nothing else.
func TestWrongGuestFailsPrecisely(t *testing.T) {
	ctx := context.Background()
	m := load(t, "wrongans")
	rep := conformance.Run(ctx, m)
	require.False(t, rep.OK())
	kinds := conformancetest.ExactFailures(t, rep, map[string]conformancetest.Failure{
		"codec wrong.profile: readable versions are accepted": {Kind: abi.KindCodec,
			Detail: []string{"version 1: got ok, want corrupt"}},
		"region wrong.region: canonicalize answers bounded key parts": {Kind: abi.KindCacheRegion,
			Detail: []string{"attrs 3: ", "wrongans", string(plugins.ClassTrap)}},
		"select handles unknown plans, tiers and routes": {Kind: abi.KindRatePolicy,
			Detail: []string{"plan=conformance-unknown-plan", string(plugins.ClassTrap)}},
		"template wrong.welcome v1: parameters are escaped in HTML parts": {Kind: abi.KindRenderer,
			Detail: []string{"en/email part html"}},
	})
	// A trap's long detail does not crowd the other failures out of the
	// bounded summary a rejected swap reports.
	assert.LessOrEqual(t, len(rep.Summary()), 512)
	for _, k := range []abi.Kind{abi.KindCodec, abi.KindCacheRegion, abi.KindRatePolicy, abi.KindRenderer} {
		assert.Greater(t, kinds[k], 1, "kind %s ran its suite", k)
	}
	// The rate-policy failures are the unknown plans only: known plans,
	// unknown tiers and unknown routes answered.
	for _, c := range rep.Checks {
		if c.Name == "select handles unknown plans, tiers and routes" {
			assert.NotContains(t, c.Detail, "tier=conformance-unknown-tier")
		}
	}

	// The module keeps serving after the trapped calls.
	_, err := m.RateSelect(ctx, &abi.RateSelectRequest{Route: "/", Method: "GET", APIKeyPlan: "pro"})
	require.NoError(t, err)
}

// kthcall answers an input alike when asked twice in a row, and differently
// on that input's third call when another input came between: a check made
// of back-to-back pairs accepts it. The suite repeats every input
// interleaved with the others and compares every answer with the first, so
// it fails the determinism check, and only that check.
func TestInterleavedNondeterminismIsRefused(t *testing.T) {
	ctx := context.Background()
	// The guest's behaviour, shown on a module of its own.
	m := load(t, "kthcall")
	sel := func(route string) uint32 {
		r, err := m.RateSelect(ctx, &abi.RateSelectRequest{Route: route, Method: "GET"})
		require.NoError(t, err)
		return r.Selections[0].Cost
	}
	assert.Equal(t, []uint32{1, 1}, []uint32{sel("/"), sel("/")}, "a back-to-back pair agrees")
	sel("/other")
	assert.Equal(t, uint32(2), sel("/"), "the third call after another input differs")

	rep := conformance.Run(ctx, load(t, "kthcall"))
	conformancetest.ExactFailures(t, rep, map[string]conformancetest.Failure{
		"select is deterministic": {Kind: abi.KindRatePolicy, Detail: []string{": call 3 differs from call 1", "and 92 more"}},
	})
}
