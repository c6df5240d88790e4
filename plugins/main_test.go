package plugins

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/caphost/caphost/third_party/wazero"
)

// Guest binaries are built once per test binary (go's build cache makes
// repeated runs cheap) and compiled once into a wazero cache dir shared by
// every test, because a Go guest takes ~0.5 s to compile.
var testGuests = []string{
	"guests/rate-policy", "guests/codec", "guests/renderer",
	"testdata/guests/echo", "testdata/guests/loop", "testdata/guests/membomb", "testdata/guests/trap",
	"testdata/guests/hugeout", "testdata/guests/malformed", "testdata/guests/abimajor",
	"testdata/guests/fsimport", "testdata/guests/sockimport", "testdata/guests/unknownimport",
}

// derivedGuests add test modules derived from the built ones (for example a
// built guest with a patched data slot) before anything is compiled, so the
// warm-up run caches them like every built guest. Test files append to it
// from init, as they do to testGuests.
var derivedGuests []func(wasm map[string][]byte) error

type harness struct {
	wasm     map[string][]byte
	cacheDir string
}

// th is set once by TestMain before any test runs and only read afterwards.
var th harness

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "caphost-guests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if th.wasm, err = buildGuests(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, derive := range derivedGuests {
		if err := derive(th.wasm); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// One compilation cache per test run: shared by every engine the tests
	// create, removed at exit so stale compiled guests never pile up.
	if warm := os.Getenv(warmEnv); warm != "" {
		if err := compileAll(warm); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	th.cacheDir = filepath.Join(dir, "wazero-cache")
	if raceEnabled {
		if err := warmCache(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// warmEnv names the cache dir a warm-up run compiles into before exiting.
const warmEnv = "CAPHOST_PLUGINS_TEST_WARM_DIR"

// warmCache runs this package's tests without the race detector in warm-up
// mode: wazero's compiler under -race takes minutes per Go guest, while code
// it finds in the cache loads in milliseconds. The same package's test
// binary is used because wazero names the cache directory after the version
// in the binary's build info, which differs between kinds of binaries.
func warmCache() error {
	cmd := exec.Command("go", "test", "-count=1", "-run", "^$", ".")
	cmd.Env = append(os.Environ(), warmEnv+"="+th.cacheDir)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("warming the wazero cache: %v\n%s", err, b)
	}
	return nil
}

// compileAll fills the cache at dir with every built guest.
func compileAll(dir string) error {
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return err
	}
	defer cache.Close(ctx)
	// Must match Engine.Load: the cache key covers close-on-context-done.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache).WithCloseOnContextDone(true))
	defer rt.Close(ctx)
	for name, b := range th.wasm {
		if _, err := rt.CompileModule(ctx, b); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func buildGuests(dir string) (map[string][]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("building test guests needs the Go toolchain on PATH (install Go 1.26+): %w", err)
	}
	out := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	errs := make([]error, len(testGuests))
	for i, pkg := range testGuests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			name := filepath.Base(pkg)
			file := filepath.Join(dir, name+".wasm")
			cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", file, "./"+pkg)
			cmd.Dir = ".."
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("build %s: %v\n%s", pkg, err, b)
				return
			}
			b, err := os.ReadFile(file)
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			out[name] = b
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// newEngine returns an engine on the shared compile cache, closed at cleanup.
func newEngine(tb testing.TB, cfg Config) *Engine {
	tb.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = th.cacheDir
	}
	e, err := NewEngine(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func load(tb testing.TB, e *Engine, name string, lim Limits) *Module {
	tb.Helper()
	wasm, ok := th.wasm[name]
	if !ok {
		tb.Fatalf("guest %s was not built", name)
	}
	m, err := e.Load(context.Background(), name, wasm, lim)
	if err != nil {
		tb.Fatalf("load %s: %v", name, err)
	}
	return m
}
