package conformance_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/caphost/caphost/plugins"
)

// The reference guests and the hostile test guests are built once per test
// binary. Under -race wazero compiles a Go guest very slowly, so a non-race
// run of this package's test binary (warm-up mode) first compiles them into
// the cache every test engine uses.
var testGuests = map[string]string{
	"codec":        "guests/codec",
	"cache-region": "guests/cache-region",
	"rate-policy":  "guests/rate-policy",
	"renderer":     "guests/renderer",
	"wrongans":     "testdata/guests/wrongans",
	"kthcall":      "plugins/conformance/testdata/guests/kthcall",
}

type harness struct {
	dir      string
	wasm     map[string][]byte
	cacheDir string
}

// th is set once by TestMain before any test runs and only read afterwards.
var th harness

const (
	warmEnv = "CAPHOST_CONFORMANCE_TEST_WARM_DIR"
	wasmEnv = "CAPHOST_CONFORMANCE_TEST_WASM_DIR"
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	if warm := os.Getenv(warmEnv); warm != "" {
		if err := compileAll(os.Getenv(wasmEnv), warm); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	dir, err := os.MkdirTemp("", "caphost-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	th.dir, th.cacheDir = dir, filepath.Join(dir, "wazero-cache")
	if th.wasm, err = buildGuests(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if raceEnabled {
		cmd := exec.Command("go", "test", "-count=1", "-run", "^$", ".")
		cmd.Env = append(os.Environ(), warmEnv+"="+th.cacheDir, wasmEnv+"="+dir)
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "warming the wazero cache: %v\n%s", err, b)
			return 1
		}
	}
	return m.Run()
}

func compileAll(wasmDir, cacheDir string) error {
	ctx := context.Background()
	e, err := plugins.NewEngine(plugins.Config{CacheDir: cacheDir})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	for name := range testGuests {
		b, err := os.ReadFile(filepath.Join(wasmDir, name+".wasm"))
		if err != nil {
			return err
		}
		m, err := e.Load(ctx, name, b, plugins.Limits{})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		_ = m.Close(ctx)
	}
	return nil
}

func buildGuests(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	var errs []error
	for name, pkg := range testGuests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			file := filepath.Join(dir, name+".wasm")
			cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", file, "./"+pkg)
			cmd.Dir = filepath.Join("..", "..")
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			b, err := cmd.CombinedOutput()
			if err == nil {
				b, err = os.ReadFile(file)
			} else {
				err = fmt.Errorf("build %s (needs Go 1.26+ on PATH): %v\n%s", pkg, err, b)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out[name] = b
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return out, nil
}

// load loads a built guest in an engine on the shared cache, closed at cleanup.
func load(t *testing.T, name string) *plugins.Module {
	t.Helper()
	e, err := plugins.NewEngine(plugins.Config{CacheDir: th.cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	// The suite compares answers, not deadlines: a loaded, race-instrumented
	// machine must not turn a slow call into a failed check.
	m, err := e.Load(context.Background(), name, th.wasm[name], plugins.Limits{CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return m
}
