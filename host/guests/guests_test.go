package guests

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
	"github.com/caphost/caphost/plugins"
)

func TestInspect(t *testing.T) {
	ctx := context.Background()
	in, err := Inspect(ctx, testWasm["cache-region"], Options{CacheDir: testCache})
	require.NoError(t, err)
	assert.Len(t, in.SHA256, 64)
	assert.Equal(t, "1.1", in.ABI, "the SDK builds guests at the host's ABI")
	assert.Equal(t, "cache-region", in.Module)
	assert.Equal(t, []string{"cache-region"}, in.Kinds)
	assert.Contains(t, in.Exports, "caphost_cache_canonicalize(i32,i32)->i64")
	assert.Contains(t, in.Exports, "caphost_abi_version()->i32")
	assert.Contains(t, in.Imports, "wasi_snapshot_preview1.random_get(i32,i32)->i32")
	require.Len(t, in.Declarations, 2)
	assert.Contains(t, in.Declarations[0], "cache-region products key-version 1 ttl soft 30000ms hard 600000ms negative 5000ms")

	_, err = Inspect(ctx, []byte("not wasm"), Options{})
	var ge *plugins.GuestError
	require.True(t, errors.As(err, &ge), "%v", err)
}

func TestConformanceOfReferenceGuests(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"rate-policy", "codec", "renderer", "cache-region"} {
		t.Run(name, func(t *testing.T) {
			rep, err := Test(ctx, testWasm[name], Options{CacheDir: testCache})
			require.NoError(t, err)
			assert.True(t, rep.OK(), "%+v", rep.Checks)
			assert.Greater(t, len(rep.Checks), 2)
			for _, c := range rep.Checks {
				if c.Status == "skip" {
					t.Logf("skipped: %s: %s", c.Name, c.Detail)
				}
			}
		})
	}
}

func TestConformanceCatchesNondeterminism(t *testing.T) {
	rep, err := Test(context.Background(), testWasm["ratebad"], Options{CacheDir: testCache})
	require.NoError(t, err)
	assert.False(t, rep.OK())
	var failed []string
	for _, c := range rep.Checks {
		if c.Status == "fail" {
			failed = append(failed, c.Name)
		}
	}
	assert.Equal(t, []string{"select is deterministic"}, failed)
}

// TestExtismFlavour: a module built with the Extism Go PDK is recognised by
// its imports, loaded through plugins/extism, and tested with the same
// self-test vectors and conformance suite as its native twin.
func TestExtismFlavour(t *testing.T) {
	ctx := context.Background()
	in, err := Inspect(ctx, testWasm["rate-policy-extism"], Options{CacheDir: testCache})
	require.NoError(t, err)
	assert.Equal(t, FlavourExtism, in.Flavour)
	assert.Equal(t, "rate-policy", in.Module)
	assert.Equal(t, []string{"rate-policy"}, in.Kinds)
	assert.Contains(t, in.Exports, "caphost_rate_select()->i32")
	assert.Contains(t, in.Imports, "extism:host/env.input_length()->i64")
	nat, err := Inspect(ctx, testWasm["rate-policy"], Options{CacheDir: testCache})
	require.NoError(t, err)
	assert.Equal(t, FlavourNative, nat.Flavour)
	assert.Equal(t, nat.Declarations, in.Declarations)

	// Bundled with the native twin's vectors, as `make guests` does.
	f, err := vectors.ReadFile("../../guests/rate-policy/selftest.json")
	require.NoError(t, err)
	sec, err := f.Section()
	require.NoError(t, err)
	wasm := abi.AppendSelfTestSection(testWasm["rate-policy-extism"], sec)
	rep, err := Test(ctx, wasm, Options{CacheDir: testCache})
	require.NoError(t, err)
	assert.Equal(t, FlavourExtism, rep.Flavour)
	assert.True(t, rep.OK(), "%+v", rep.Checks)
	var names []string
	for _, c := range rep.Checks {
		assert.Equal(t, "pass", c.Status, "%s: %s", c.Name, c.Detail)
		names = append(names, c.Name)
	}
	assert.Len(t, names, len(f.Vectors)+4, "every vector and the four rate-policy checks")
	assert.Contains(t, names, "self-test vector 7 (caphost_rate_select)")
	assert.Contains(t, names, "select is deterministic")
}
