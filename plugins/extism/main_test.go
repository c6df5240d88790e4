package extism

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/caphost/caphost/plugins"
)

// Guests are built once per test binary; both flavours' engines share one
// compilation cache dir so each guest is compiled once per run.
var testGuests = map[string]string{
	"rate-policy":        "guests/rate-policy",
	"rate-policy-extism": "guests/rate-policy-extism",
	"echo":               "testdata/guests/echo",
	"testguest":          "plugins/extism/testdata/guests/testguest",
	"wrongans":           "testdata/guests/wrongans",
	"wrongans-extism":    "plugins/extism/testdata/guests/wrongans",
}

type harness struct {
	wasm     map[string][]byte
	cacheDir string
}

// th is set once by TestMain before any test runs and only read afterwards.
var th harness

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

// warmEnv names the cache dir a warm-up run fills before exiting.
const warmEnv = "CAPHOST_EXTISM_TEST_WARM_DIR"

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "caphost-extism-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if th.wasm, err = buildGuests(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if warm := os.Getenv(warmEnv); warm != "" {
		th.cacheDir = warm
		if err := loadAll(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	th.cacheDir = filepath.Join(dir, "wazero-cache")
	if raceEnabled {
		// wazero's compiler under -race takes minutes per Go guest; a
		// non-race run of this package's tests fills the cache (same
		// package, so the same cache key) in seconds.
		cmd := exec.Command("go", "test", "-count=1", "-run", "^$", ".")
		cmd.Env = append(os.Environ(), warmEnv+"="+th.cacheDir)
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "warming the wazero cache: %v\n%s", err, b)
			return 1
		}
	}
	return m.Run()
}

// loadAll loads every guest in both flavours, which compiles them into the cache.
func loadAll() error {
	ctx := context.Background()
	nat, err := plugins.NewEngine(plugins.Config{CacheDir: th.cacheDir})
	if err != nil {
		return err
	}
	defer nat.Close(ctx)
	ext, err := NewEngine(plugins.Config{CacheDir: th.cacheDir})
	if err != nil {
		return err
	}
	defer ext.Close(ctx)
	for _, n := range []string{"rate-policy", "echo", "wrongans"} {
		if _, err := nat.Load(ctx, n, th.wasm[n], plugins.Limits{}); err != nil {
			return err
		}
	}
	for _, n := range []string{"rate-policy-extism", "testguest", "wrongans-extism", "timeleak-extism"} {
		if _, err := ext.Load(ctx, n, th.wasm[n], plugins.Limits{Grants: plugins.AllGrants}); err != nil {
			return err
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
	errs := make(chan error, len(testGuests))
	sem := make(chan struct{}, 2)
	for name, pkg := range testGuests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			file := filepath.Join(dir, name+".wasm")
			cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", file, "./"+pkg)
			cmd.Dir = filepath.Join("..", "..")
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("build %s: %v\n%s", pkg, err, b)
				return
			}
			b, err := os.ReadFile(file)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			out[name] = b
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, err
	}
	return out, nil
}

func newNative(tb testing.TB, cfg plugins.Config) *plugins.Engine {
	tb.Helper()
	cfg.CacheDir = th.cacheDir
	e, err := plugins.NewEngine(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func newExtism(tb testing.TB, cfg plugins.Config) *Engine {
	tb.Helper()
	cfg.CacheDir = th.cacheDir
	e, err := NewEngine(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}
