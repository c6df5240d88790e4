package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caphost/caphost/third_party/wazero"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
	"github.com/caphost/caphost/plugins"
)

// The rate-policy guest is built once per test binary. Under -race wazero
// compiles a Go guest very slowly, so a non-race run of this package's test
// binary (warm-up mode) first compiles every module the tests load into a
// shared cache.
type harness struct {
	dir      string
	base     []byte // rate-policy.wasm as go build wrote it
	vectors  string // path of the reference vectors file
	cacheDir string
}

var th harness

const (
	warmEnv  = "CAPHOST_SELFTESTPACK_TEST_WARM_DIR"
	guestEnv = "CAPHOST_SELFTESTPACK_TEST_GUEST"
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	th.vectors = filepath.Join("..", "..", "..", "guests", "rate-policy", "selftest.json")
	if warm := os.Getenv(warmEnv); warm != "" {
		b, err := os.ReadFile(os.Getenv(guestEnv))
		if err == nil {
			th.base = b
			err = compileAll(warm)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	dir, err := os.MkdirTemp("", "caphost-selftestpack-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	th.dir, th.cacheDir = dir, filepath.Join(dir, "wazero-cache")
	file := filepath.Join(dir, "rate-policy.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", file, "./guests/rate-policy")
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build guests/rate-policy (needs Go 1.26+ on PATH): %v\n%s", err, b)
		return 1
	}
	if th.base, err = os.ReadFile(file); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if raceEnabled {
		cmd := exec.Command("go", "test", "-count=1", "-run", "^$", ".")
		cmd.Env = append(os.Environ(), warmEnv+"="+th.cacheDir, guestEnv+"="+file)
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "warming the wazero cache: %v\n%s", err, b)
			return 1
		}
	}
	return m.Run()
}

// wrongVectors is the reference vectors file with the first answer's cost
// changed from 1 to 2: a file the guest disagrees with.
func wrongVectors() ([]byte, error) {
	b, err := os.ReadFile(th.vectors)
	if err != nil {
		return nil, err
	}
	wrong := bytes.Replace(b, []byte(`"cost": 1`), []byte(`"cost": 2`), 1)
	if bytes.Equal(wrong, b) {
		return nil, fmt.Errorf("%s has no cost 1 to change", th.vectors)
	}
	return wrong, nil
}

// loadedModules are the exact bytes the tests load: the plain guest
// (record), and the guest bundled with the reference and the wrong vectors.
func loadedModules() (map[string][]byte, error) {
	out := map[string][]byte{"plain": th.base}
	wrong, err := wrongVectors()
	if err != nil {
		return nil, err
	}
	ref, err := os.ReadFile(th.vectors)
	if err != nil {
		return nil, err
	}
	for name, js := range map[string][]byte{"bundled": ref, "wrong": wrong} {
		f, err := vectors.Parse(js)
		if err != nil {
			return nil, err
		}
		sec, err := f.Section()
		if err != nil {
			return nil, err
		}
		if out[name], err = bundleSection(th.base, sec); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func compileAll(cacheDir string) error {
	mods, err := loadedModules()
	if err != nil {
		return err
	}
	ctx := context.Background()
	e, err := plugins.NewEngine(plugins.Config{CacheDir: cacheDir})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	for name, b := range mods {
		m, err := e.Load(ctx, name, b, plugins.Limits{})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		_ = m.Close(ctx)
	}
	return nil
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"-cache-dir", th.cacheDir}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeTemp(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

func TestBundleVerifiesAndIsIdempotent(t *testing.T) {
	mod := writeTemp(t, "rate-policy.wasm", th.base)
	code, out, errOut := runCLI(t, "-vectors", th.vectors, mod)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "bundled 8 self-test vectors")
	assert.Contains(t, out, "vectors all pass")

	got, err := os.ReadFile(mod)
	require.NoError(t, err)
	f, err := vectors.ReadFile(th.vectors)
	require.NoError(t, err)
	want, err := f.Section()
	require.NoError(t, err)
	sec, err := abi.ReadSelfTestSection(got)
	require.NoError(t, err)
	assert.Equal(t, want, sec)
	assert.Equal(t, th.base, got[:len(th.base)], "the code is untouched; the section is appended")

	// Bundling a bundled module replaces its section (go build leaves an
	// up-to-date output alone, so `make guests` re-bundles the same file).
	code, _, errOut = runCLI(t, "-vectors", th.vectors, mod)
	require.Equal(t, 0, code, errOut)
	again, err := os.ReadFile(mod)
	require.NoError(t, err)
	assert.Equal(t, got, again)

	// -out leaves the input alone.
	plain := writeTemp(t, "plain.wasm", th.base)
	dst := filepath.Join(t.TempDir(), "out.wasm")
	code, _, errOut = runCLI(t, "-verify=false", "-vectors", th.vectors, "-out", dst, plain)
	require.Equal(t, 0, code, errOut)
	b, err := os.ReadFile(plain)
	require.NoError(t, err)
	assert.Equal(t, th.base, b)
	b, err = os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, got, b)
}

func TestBundleRefusesVectorsTheGuestDisagreesWith(t *testing.T) {
	wrong, err := wrongVectors()
	require.NoError(t, err)
	vec := writeTemp(t, "selftest.json", wrong)
	mod := writeTemp(t, "rate-policy.wasm", th.base)
	code, out, errOut := runCLI(t, "-vectors", vec, mod)
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "the module does not answer its vectors")
	assert.Contains(t, errOut, `vector 0 "pro API key, read route: pro.read at cost 1, keyed by the API key": fail: response frame differs`)
	assert.NotContains(t, errOut, "vector 1 ", "only the changed vector fails")
	b, err := os.ReadFile(mod)
	require.NoError(t, err)
	assert.Equal(t, th.base, b, "nothing is written when a vector fails")
}

func TestRecordReproducesTheReviewedVectors(t *testing.T) {
	ref, err := os.ReadFile(th.vectors)
	require.NoError(t, err)
	// Drop every recorded answer: recording must restore them exactly.
	f, err := vectors.Parse(ref)
	require.NoError(t, err)
	for i := range f.Vectors {
		f.Vectors[i].Recorded, f.Vectors[i].Response, f.Vectors[i].Detail = false, nil, ""
	}
	blank, err := f.Marshal()
	require.NoError(t, err)
	require.NotContains(t, string(blank), `"response"`)
	vec := writeTemp(t, "selftest.json", blank)
	mod := writeTemp(t, "rate-policy.wasm", th.base)

	code, out, errOut := runCLI(t, "-record", "-vectors", vec, mod)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "8 of 8 vectors changed; review the answers")
	assert.Contains(t, out, `recorded vector 7 "an unknown method is refused as invalid-request": invalid-request`)
	got, err := os.ReadFile(vec)
	require.NoError(t, err)
	assert.Equal(t, string(ref), string(got))

	code, out, _ = runCLI(t, "-record", "-vectors", vec, mod)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "0 of 8 vectors changed")

	other := writeTemp(t, "other.json", bytes.Replace(ref, []byte(`"module": "rate-policy"`), []byte(`"module": "codec"`), 1))
	code, _, errOut = runCLI(t, "-record", "-vectors", other, mod)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `the vectors are for module "codec", the module describes itself as "rate-policy"`)
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"x.wasm"},
		{"-vectors", "v.json"},
		{"-vectors", "v.json", "a.wasm", "b.wasm"},
		{"-record", "-out", "o.wasm", "-vectors", "v.json", "a.wasm"},
		{"-nope"},
	} {
		code, _, errOut := runCLI(t, args...)
		assert.Equal(t, 2, code, "%v", args)
		assert.Contains(t, errOut, "usage: selftestpack", "%v", args)
	}
	code, _, errOut := runCLI(t, "-vectors", filepath.Join(t.TempDir(), "missing.json"), "x.wasm")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no such file")
	bad := writeTemp(t, "bad.wasm", []byte("\x00asm\x01\x00\x00\x00\x01\xff"))
	code, _, errOut = runCLI(t, "-vectors", th.vectors, bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "overruns the module")
}

// minimal is an empty module with a type section (one func type () -> ())
// and a custom section "other", so stripping must keep both byte for byte.
var minimal = []byte("\x00asm\x01\x00\x00\x00" +
	"\x01\x04\x01\x60\x00\x00" +
	"\x00\x06\x05other")

func testVectors() *abi.SelfTestVectors {
	return &abi.SelfTestVectors{Vectors: []abi.SelfTestVector{
		{Export: abi.ExportRateSelect, Request: (&abi.RateSelectRequest{Route: "/", Method: "GET"}).AppendTo(nil), Response: abi.AppendErrorFrame(nil, abi.CodeInvalidRequest, "x")},
		{Export: abi.ExportRender, Request: bytes.Repeat([]byte{7}, 300), Response: []byte{0}}, // a size needing a 2-byte LEB128
	}}
}

func TestStripAndBundle(t *testing.T) {
	v := testVectors()
	once, err := bundleSection(minimal, v)
	require.NoError(t, err)
	assert.Equal(t, minimal, once[:len(minimal)])
	twice, err := bundleSection(once, v)
	require.NoError(t, err)
	assert.Equal(t, once, twice, "a bundle replaces the section")
	stripped, err := stripSelfTestSections(once)
	require.NoError(t, err)
	assert.Equal(t, minimal, stripped)
	got, err := abi.ReadSelfTestSection(once)
	require.NoError(t, err)
	assert.Equal(t, v, got)

	// A section that is not last is removed too; what follows is kept.
	mid := append(append([]byte(nil), once...), minimal[8:]...)
	stripped, err = stripSelfTestSections(mid)
	require.NoError(t, err)
	assert.Equal(t, append(append([]byte(nil), minimal...), minimal[8:]...), stripped)

	for name, bad := range map[string][]byte{
		"not wasm":      []byte("\x7fELF\x01\x00\x00\x00"),
		"short":         []byte("\x00asm"),
		"overrun":       []byte("\x00asm\x01\x00\x00\x00\x01\x05\x01"),
		"no size":       []byte("\x00asm\x01\x00\x00\x00\x01"),
		"long leb":      []byte("\x00asm\x01\x00\x00\x00\x01\x80\x80\x80\x80\x80\x00"),
		"name overruns": []byte("\x00asm\x01\x00\x00\x00\x00\x02\x05n"),
	} {
		_, err := stripSelfTestSections(bad)
		assert.Error(t, err, name)
		_, err = bundleSection(bad, v)
		assert.Error(t, err, name)
	}
}

// TestWazeroReadsTheSection checks the encoding against an independent
// reader: wazero must accept the bundled module and report the section with
// exactly the vectors message as its content.
func TestWazeroReadsTheSection(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCustomSections(true))
	defer rt.Close(ctx)
	v := testVectors()
	b, err := bundleSection(minimal, v)
	require.NoError(t, err)
	cm, err := rt.CompileModule(ctx, b)
	require.NoError(t, err)
	var names []string
	for _, s := range cm.CustomSections() {
		names = append(names, s.Name())
		if s.Name() == abi.SelfTestSection {
			assert.Equal(t, v.AppendTo(nil), s.Data())
		}
	}
	assert.Equal(t, []string{"other", abi.SelfTestSection}, names)
}

// FuzzStripSelfTestSections: whatever strip accepts has no self-test
// section left, and bundling onto it reads back the bundled vectors.
func FuzzStripSelfTestSections(f *testing.F) {
	f.Add(minimal)
	b, err := bundleSection(minimal, testVectors())
	require.NoError(f, err)
	f.Add(b)
	f.Add(append(b, b[8:]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		stripped, err := stripSelfTestSections(b)
		if err != nil {
			return
		}
		got, err := abi.ReadSelfTestSection(stripped)
		require.NoError(t, err)
		require.Nil(t, got)
		v := testVectors()
		bundled, err := bundleSection(b, v)
		require.NoError(t, err)
		got, err = abi.ReadSelfTestSection(bundled)
		require.NoError(t, err)
		require.Equal(t, v, got)
		again, err := stripSelfTestSections(bundled)
		require.NoError(t, err)
		require.Equal(t, stripped, again)
		require.True(t, strings.HasPrefix(string(bundled), string(stripped)))
	})
}
