package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
)

// inspectGuests builds the reference guests once per test binary and, under
// -race, warms a wazero cache through host/guests' non-race warm-up mode
// (compiling Go guests under -race takes minutes).
var inspectGuests = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "caphost-cli-guests-")
	if err != nil {
		return "", err
	}
	for name, pkg := range map[string]string{"rate-policy": "guests/rate-policy", "cache-region": "guests/cache-region",
		"ratebad": "plugins/testdata/guests/ratebad", "rate-policy-extism": "guests/rate-policy-extism"} {
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, name+".wasm"), "./"+pkg)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s (needs Go 1.26+ on PATH): %v\n%s", pkg, err, b)
		}
	}
	// rate-policy-vectors.wasm is rate-policy as `make guests` writes it:
	// with guests/rate-policy/selftest.json bundled.
	f, err := vectors.ReadFile("../../guests/rate-policy/selftest.json")
	if err != nil {
		return "", err
	}
	sec, err := f.Section()
	if err != nil {
		return "", err
	}
	plain, err := os.ReadFile(filepath.Join(dir, "rate-policy.wasm"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "rate-policy-vectors.wasm"), abi.AppendSelfTestSection(plain, sec), 0o644); err != nil {
		return "", err
	}
	// rate-policy-extism-vectors.wasm is the Extism twin as `make guests`
	// writes it: with the same vectors bundled.
	ext, err := os.ReadFile(filepath.Join(dir, "rate-policy-extism.wasm"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "rate-policy-extism-vectors.wasm"), abi.AppendSelfTestSection(ext, sec), 0o644); err != nil {
		return "", err
	}
	// rate-policy-wrongvec.wasm carries vector 2 with a wrong answer.
	f.Vectors[2].Response.(*abi.RateSelectResponse).Selections[0].PolicyID = "pro.write"
	if sec, err = f.Section(); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "rate-policy-wrongvec.wasm"), abi.AppendSelfTestSection(plain, sec), 0o644); err != nil {
		return "", err
	}
	cache := filepath.Join(dir, "cache")
	if raceEnabled {
		cmd := exec.Command("go", "test", "-count=1", "-run", "^$", "./host/guests")
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "CAPHOST_GUESTS_TEST_WARM_DIR="+cache, "CAPHOST_GUESTS_TEST_WASM_DIR="+dir)
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("warming the wazero cache: %v\n%s", err, b)
		}
	}
	return dir, nil
})

func guestFiles(t *testing.T) (dir, cache string) {
	t.Helper()
	dir, err := inspectGuests()
	require.NoError(t, err)
	return dir, filepath.Join(dir, "cache")
}

func TestGuestInspect(t *testing.T) {
	dir, cache := guestFiles(t)
	code, out, errOut := cli(t, "guest", "inspect", "--cache-dir", cache, filepath.Join(dir, "rate-policy.wasm"))
	require.Equal(t, 0, code, out+errOut)
	for _, want := range []string{"module: rate-policy", "flavour: native", "abi: 1.1", "kinds: rate-policy", "self-test vectors: 0",
		"rate-policy pro.read revision 1 token-bucket limit 600 window 60000ms burst 150 max-cost 5",
		"caphost_rate_select(i32,i32)->i64", "wasi_snapshot_preview1.random_get(i32,i32)->i32"} {
		assert.Contains(t, out, want)
	}
	assert.Regexp(t, `sha256: [0-9a-f]{64}\n`, out)

	code, out, errOut = cli(t, "guest", "inspect", "--cache-dir", cache, filepath.Join(dir, "rate-policy-extism-vectors.wasm"))
	require.Equal(t, 0, code, out+errOut)
	for _, want := range []string{"module: rate-policy", "flavour: extism", "abi: 1.1", "kinds: rate-policy", "self-test vectors: 8",
		"rate-policy pro.read revision 1 token-bucket limit 600 window 60000ms burst 150 max-cost 5",
		"caphost_rate_select()->i32", "extism:host/env.input_length()->i64"} {
		assert.Contains(t, out, want)
	}

	bad := filepath.Join(t.TempDir(), "bad.wasm")
	require.NoError(t, os.WriteFile(bad, []byte("\x00asm\x01\x00\x00\x00garbage"), 0o644))
	code, out, _ = cli(t, "guest", "inspect", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "FAILED: ")
	code, _, _ = cli(t, "guest", "inspect")
	assert.Equal(t, 2, code)
}

func TestGuestTest(t *testing.T) {
	dir, cache := guestFiles(t)
	code, out, errOut := cli(t, "guest", "test", "--cache-dir", cache, filepath.Join(dir, "cache-region.wasm"))
	require.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, "PASS [cache-region] region products: canonicalize answers bounded key parts")
	assert.Contains(t, out, "SKIP self-test vectors: module bundles no self-test vectors")
	assert.Contains(t, out, "ok: ")

	// A module with bundled vectors runs and reports each of them.
	code, out, errOut = cli(t, "guest", "test", "--cache-dir", cache, filepath.Join(dir, "rate-policy-vectors.wasm"))
	require.Equal(t, 0, code, out+errOut)
	for i := range 8 {
		assert.Contains(t, out, fmt.Sprintf("PASS self-test vector %d (caphost_rate_select)\n", i))
	}
	assert.Contains(t, out, "PASS [rate-policy] select is deterministic")
	assert.NotContains(t, out, "SKIP")
	code, out, _ = cli(t, "guest", "test", "--cache-dir", cache, filepath.Join(dir, "rate-policy-wrongvec.wasm"))
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "FAIL self-test vector 2 (caphost_rate_select): response frame differs at byte ")
	assert.Contains(t, out, "PASS self-test vector 1 (caphost_rate_select)\n")
	assert.Contains(t, out, "FAILED: 1 of ")

	// The Extism flavour runs the same vectors and suite.
	code, out, errOut = cli(t, "guest", "test", "--cache-dir", cache, filepath.Join(dir, "rate-policy-extism-vectors.wasm"))
	require.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, "flavour: extism\n")
	for i := range 8 {
		assert.Contains(t, out, fmt.Sprintf("PASS self-test vector %d (caphost_rate_select)\n", i))
	}
	assert.Contains(t, out, "PASS [rate-policy] select is deterministic")
	assert.Contains(t, out, "ok: 12 checks")

	code, out, _ = cli(t, "guest", "test", "--cache-dir", cache, filepath.Join(dir, "ratebad.wasm"))
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "FAIL [rate-policy] select is deterministic")
	assert.True(t, strings.Contains(out, "FAILED: 1 of"), out)
}
