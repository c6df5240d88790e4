package host_test

import (
	"os"
	"testing"

	"github.com/caphost/caphost/internal/guesttest"
)

// Guest binaries are built once per test binary and compiled once into a
// wazero cache dir that every host in the tests uses
// (guests.compile-cache-dir): see internal/guesttest.
var testGuests = []guesttest.Guest{
	{Name: "rate-v1", Pkg: "guests/rate-policy"},
	{Name: "rate-v2", Pkg: "guests/rate-policy", LDFlags: "-X=main.policyRevision=v2"},
	{Name: "ratebomb", Pkg: "host/testdata/guests/ratebomb", Hostile: true},
	{Name: "ratereuse", Pkg: "host/testdata/guests/ratereuse"},
	{Name: "ratedrop", Pkg: "host/testdata/guests/ratedrop"},
	// The Extism twin of rate-v1: same policies, same answers.
	{Name: "rate-extism", Pkg: "guests/rate-policy-extism"},
	// The cache's reference guests.
	{Name: "codec", Pkg: "guests/codec"},
	{Name: "cache-region", Pkg: "guests/cache-region"},
	{Name: "cache-region-v2", Pkg: "guests/cache-region", LDFlags: "-X=main.policyRevision=v2"},
	// The notify capability's reference renderer.
	{Name: "renderer", Pkg: "guests/renderer"},
	{Name: "altrenderer", Pkg: "host/notify/render/testdata/guests/altrenderer"},
}

// harness is the built guests: wasm by name and the warmed cache.
type harness struct {
	wasm     map[string][]byte
	cacheDir string
}

// th is set once by TestMain before any test runs and only read afterwards.
var th harness

func TestMain(m *testing.M) {
	os.Exit(guesttest.Main(m, guesttest.Options{Root: "..", Guests: testGuests, Race: raceEnabled,
		Set: func(h *guesttest.Harness) {
			th.cacheDir, th.wasm = h.CacheDir, map[string][]byte{}
			for _, g := range testGuests {
				th.wasm[g.Name] = h.Wasm(g.Name)
			}
		}}))
}
