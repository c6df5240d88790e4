package wasmtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/caphost/caphost/internal/guesttest"
)

// The test guests are built once per test binary and compiled into the cache
// every test engine uses (internal/guesttest).
var testGuests = []guesttest.Guest{
	{Name: "garbage", Pkg: "abi/guest/wasmtest/testdata/garbage"},
}

// th is set once by TestMain before any test runs and only read afterwards.
var th *guesttest.Harness

func TestMain(m *testing.M) {
	os.Exit(guesttest.Main(m, guesttest.Options{Root: filepath.Join("..", "..", ".."), Guests: testGuests, Race: raceEnabled,
		Set: func(h *guesttest.Harness) { th = h }}))
}
