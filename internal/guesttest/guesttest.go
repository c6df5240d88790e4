// Package guesttest builds guest modules for a package's tests, once per
// test binary, and fills a wazero compilation cache with them so that every
// engine the tests create loads them in milliseconds (a Go guest takes ~0.5 s
// to compile, minutes under the race detector).
//
// Under -race the cache is filled by a non-race run of the same test
// package in warm-up mode (the child only compiles, runs no test), which the
// race binary then reads.
//
// It is test-support code only; production packages never import it.
//
// What may change here: options. What must not: that a missing toolchain or
// a failing build fails the test binary (never a skip).
package guesttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/extism"
)

// Guest is one module to build.
type Guest struct {
	// Name is the built file's base name (<Name>.wasm) and the key of Wasm.
	Name string
	// Pkg is the main package, relative to the module root
	// ("guests/codec").
	Pkg string
	// LDFlags are passed to go build (-ldflags).
	LDFlags string
	// Hostile marks a module that fails to load by design; compiling it
	// still warms the cache.
	Hostile bool
}

// Options configure Main.
type Options struct {
	// Root is the module root relative to the test's working directory
	// (the package directory), e.g. "../..".
	Root   string
	Guests []Guest
	// Race is whether this test binary runs with the race detector.
	Race bool
	// Set receives the harness before any test runs.
	Set func(*Harness)
}

// Harness holds the built modules and the cache directory.
type Harness struct {
	// Dir holds <name>.wasm for every guest.
	Dir string
	// CacheDir is the warmed compilation cache (plugins.Config.CacheDir).
	CacheDir string
	wasm     map[string][]byte
}

// Wasm returns the built module name.
func (h *Harness) Wasm(name string) []byte { return h.wasm[name] }

const (
	warmEnv = "CAPHOST_GUESTTEST_WARM_DIR"
	wasmEnv = "CAPHOST_GUESTTEST_WASM_DIR"
)

// Main is the body of a TestMain: it builds the guests into a temporary
// directory, warms the cache, hands the harness to o.Set, runs the tests and
// removes the directory. In warm-up mode it only compiles.
func Main(m *testing.M, o Options) int {
	if warm := os.Getenv(warmEnv); warm != "" {
		if err := compileAll(os.Getenv(wasmEnv), warm, o.Guests); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	dir, err := os.MkdirTemp("", "caphost-guesttest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	h := &Harness{Dir: dir, CacheDir: filepath.Join(dir, "wazero-cache")}
	if h.wasm, err = build(dir, o.Root, o.Guests); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if o.Race {
		cmd := exec.Command("go", "test", "-count=1", "-run", "^$", ".")
		cmd.Env = append(os.Environ(), warmEnv+"="+h.CacheDir, wasmEnv+"="+dir)
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "warming the wazero cache: %v\n%s", err, b)
			return 1
		}
	} else if err := compileAll(dir, h.CacheDir, o.Guests); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if o.Set != nil {
		o.Set(h)
	}
	return m.Run()
}

// compileAll loads every built guest through a real engine of its flavour
// on cacheDir, so the cache holds exactly what the tests' engines look up.
func compileAll(dir, cacheDir string, guests []Guest) error {
	ctx := context.Background()
	nat, err := plugins.NewEngine(plugins.Config{CacheDir: cacheDir})
	if err != nil {
		return err
	}
	defer nat.Close(ctx)
	ext, err := extism.NewEngine(plugins.Config{CacheDir: cacheDir})
	if err != nil {
		return err
	}
	defer ext.Close(ctx)
	for _, g := range guests {
		b, err := os.ReadFile(filepath.Join(dir, g.Name+".wasm"))
		if err != nil {
			return err
		}
		var e plugins.Loader = nat
		if plugins.DetectFlavour(b) == plugins.FlavourExtism {
			e = ext
		}
		// Every grant: the imports a guest may link change nothing compiled.
		mod, err := e.LoadGuest(ctx, g.Name, b, plugins.Limits{Grants: plugins.AllGrants})
		if g.Hostile {
			if err == nil {
				_ = mod.Close(ctx)
				return fmt.Errorf("%s: hostile guest loaded", g.Name)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", g.Name, err)
		}
		_ = mod.Close(ctx)
	}
	return nil
}

// build builds every guest, two at a time.
func build(dir, root string, guests []Guest) (map[string][]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("building test guests needs the Go toolchain on PATH (install Go 1.26+): %w", err)
	}
	out := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	errs := make([]error, len(guests))
	for i, g := range guests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			file := filepath.Join(dir, g.Name+".wasm")
			args := []string{"build", "-buildmode=c-shared", "-o", file}
			if g.LDFlags != "" {
				args = append(args, "-ldflags="+g.LDFlags)
			}
			cmd := exec.Command(goBin, append(args, "./"+g.Pkg)...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("build %s: %v\n%s", g.Pkg, err, b)
				return
			}
			b, err := os.ReadFile(file)
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			out[g.Name] = b
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
