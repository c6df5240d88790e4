package host_test

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

// Guest binaries are built once per test binary and compiled once into a
// wazero cache dir that every host in the tests uses (guests.compile-cache-dir):
// a Go guest takes ~0.5 s to compile, minutes under the race detector.
var testGuests = []struct {
	name, pkg, ldflags string
	hostile            bool // fails to load by design; compiling it still warms the cache
}{
	{"rate-v1", "guests/rate-policy", "", false},
	{"rate-v2", "guests/rate-policy", "-X=main.policyRevision=v2", false},
	{"ratebomb", "host/testdata/guests/ratebomb", "", true},
	{"ratereuse", "host/testdata/guests/ratereuse", "", false},
	{"ratedrop", "host/testdata/guests/ratedrop", "", false},
	// The Extism twin of rate-v1: same policies, same answers.
	{"rate-extism", "guests/rate-policy-extism", "", false},
}

type harness struct {
	dir      string // built .wasm files, <name>.wasm
	wasm     map[string][]byte
	cacheDir string
}

// th is set once by TestMain before any test runs and only read afterwards.
var th harness

const (
	warmEnv   = "CAPHOST_HOST_TEST_WARM_DIR"
	guestsEnv = "CAPHOST_HOST_TEST_GUESTS_DIR"
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	if warm := os.Getenv(warmEnv); warm != "" {
		// Warm-up child: compile the parent's guests into its cache, exit.
		if err := compileAll(os.Getenv(guestsEnv), warm); err != nil {
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
	th.dir, th.cacheDir = dir, filepath.Join(dir, "wazero-cache")
	if th.wasm, err = buildGuests(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if raceEnabled {
		// wazero's compiler is very slow under -race; a non-race run of this
		// package's test binary fills the cache and race runs load from it.
		cmd := exec.Command("go", "test", "-count=1", "-run", "^$", ".")
		cmd.Env = append(os.Environ(), warmEnv+"="+th.cacheDir, guestsEnv+"="+dir)
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "warming the wazero cache: %v\n%s", err, b)
			return 1
		}
	} else if err := compileAll(dir, th.cacheDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// compileAll loads every built guest through a real engine of its flavour
// on cacheDir, so the cache holds exactly what the host's engines will
// look up.
func compileAll(guestDir, cacheDir string) error {
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
	for _, g := range testGuests {
		b, err := os.ReadFile(filepath.Join(guestDir, g.name+".wasm"))
		if err != nil {
			return err
		}
		var e plugins.Loader = nat
		if plugins.DetectFlavour(b) == plugins.FlavourExtism {
			e = ext
		}
		// Every grant: the imports a guest may link change nothing compiled.
		m, err := e.LoadGuest(ctx, g.name, b, plugins.Limits{Grants: plugins.AllGrants})
		if g.hostile {
			if err == nil {
				_ = m.Close(ctx)
				return fmt.Errorf("%s: hostile guest loaded", g.name)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", g.name, err)
		}
		_ = m.Close(ctx)
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
	for i, g := range testGuests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			file := filepath.Join(dir, g.name+".wasm")
			args := []string{"build", "-buildmode=c-shared", "-o", file}
			if g.ldflags != "" {
				args = append(args, "-ldflags="+g.ldflags)
			}
			cmd := exec.Command(goBin, append(args, "./"+g.pkg)...)
			cmd.Dir = ".."
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("build %s: %v\n%s", g.pkg, err, b)
				return
			}
			b, err := os.ReadFile(file)
			if err != nil {
				errs[i] = err
				return
			}
			mu.Lock()
			out[g.name] = b
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
