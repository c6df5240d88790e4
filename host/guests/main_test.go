package guests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Guests are built once per test binary. Under -race, wazero's compiler
// takes minutes per Go guest, so a non-race run of this package's tests in
// warm-up mode (WarmEnv) first fills a compilation cache the tests share;
// cmd/caphost's tests use the same warm-up.
var testGuests = map[string]string{
	"rate-policy":  "guests/rate-policy",
	"codec":        "guests/codec",
	"renderer":     "guests/renderer",
	"cache-region": "guests/cache-region",
	"ratebad":      "plugins/testdata/guests/ratebad",
	// The Extism flavour's reference guest (go-pdk, same toolchain).
	"rate-policy-extism": "guests/rate-policy-extism",
}

const (
	// warmEnv names the cache dir a warm-up run compiles into before exiting.
	warmEnv = "CAPHOST_GUESTS_TEST_WARM_DIR"
	// wasmEnv names the directory of *.wasm files a warm-up run compiles.
	wasmEnv = "CAPHOST_GUESTS_TEST_WASM_DIR"
)

var (
	testWasm  = map[string][]byte{}
	testCache string
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	if warm := os.Getenv(warmEnv); warm != "" {
		if err := compileDir(os.Getenv(wasmEnv), warm); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	dir, err := os.MkdirTemp("", "caphost-host-guests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for name, pkg := range testGuests {
		file := filepath.Join(dir, name+".wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", file, "./"+pkg)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s (needs Go 1.26+ on PATH): %v\n%s", pkg, err, b)
			return 1
		}
		if testWasm[name], err = os.ReadFile(file); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	testCache = filepath.Join(dir, "wazero-cache")
	if raceEnabled {
		cmd := exec.Command("go", "test", "-count=1", "-run", "^$", ".")
		cmd.Env = append(os.Environ(), warmEnv+"="+testCache, wasmEnv+"="+dir)
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "warming the wazero cache: %v\n%s", err, b)
			return 1
		}
	}
	return m.Run()
}

// compileDir loads every module in wasmDir once, filling cacheDir.
func compileDir(wasmDir, cacheDir string) error {
	files, err := filepath.Glob(filepath.Join(wasmDir, "*.wasm"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("warm-up: no modules in %q (%v)", wasmDir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		// A module that fails to load still got compiled, which is all the
		// warm-up needs.
		if _, err := Inspect(context.Background(), b, Options{CacheDir: cacheDir}); err != nil && !strings.Contains(err.Error(), "guest") {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	return nil
}
