package conformance_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caphost/caphost/internal/guesttest"
	"github.com/caphost/caphost/plugins"
)

// The reference guests and the hostile test guests are built once per test
// binary and compiled into the cache every test engine uses
// (internal/guesttest).
var testGuests = []guesttest.Guest{
	{Name: "codec", Pkg: "guests/codec"},
	{Name: "cache-region", Pkg: "guests/cache-region"},
	{Name: "rate-policy", Pkg: "guests/rate-policy"},
	{Name: "renderer", Pkg: "guests/renderer"},
	{Name: "wrongans", Pkg: "testdata/guests/wrongans"},
	{Name: "kthcall", Pkg: "plugins/conformance/testdata/guests/kthcall"},
}

// harness is the built guests: wasm by name and the warmed cache.
type harness struct {
	wasm     map[string][]byte
	cacheDir string
}

// th is set once by TestMain before any test runs and only read afterwards.
var th harness

func TestMain(m *testing.M) {
	os.Exit(guesttest.Main(m, guesttest.Options{Root: filepath.Join("..", ".."), Guests: testGuests, Race: raceEnabled,
		Set: func(h *guesttest.Harness) {
			th.cacheDir, th.wasm = h.CacheDir, map[string][]byte{}
			for _, g := range testGuests {
				th.wasm[g.Name] = h.Wasm(g.Name)
			}
		}}))
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
