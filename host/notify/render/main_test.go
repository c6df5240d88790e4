package render

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/guesttest"
	"github.com/caphost/caphost/plugins"
)

// th holds the built guests; set once by TestMain.
var th *guesttest.Harness

func TestMain(m *testing.M) {
	// A fuzz worker runs only the fuzz targets, which need no guest:
	// building three guests per worker would take its first half minute.
	if slices.ContainsFunc(os.Args, func(a string) bool { return strings.HasPrefix(a, "-test.fuzzworker") }) {
		os.Exit(m.Run())
	}
	os.Exit(guesttest.Main(m, guesttest.Options{Root: "../../..", Race: raceEnabled, Set: func(h *guesttest.Harness) { th = h },
		Guests: []guesttest.Guest{
			{Name: "renderer", Pkg: "guests/renderer"},
			{Name: "badrenderer", Pkg: "host/notify/render/testdata/guests/badrenderer"},
			{Name: "altrenderer", Pkg: "host/notify/render/testdata/guests/altrenderer"},
		}}))
}

// testNow is 2026-11-29T09:00:00Z.
var testNow = time.UnixMilli(1795942800000).UTC()

// newManager loads mods (module name → built guest) through a Manager
// with every check (self-test, conformance) on.
func newManager(t testing.TB, lim plugins.Limits, mods ...[2]string) *plugins.Manager {
	t.Helper()
	ctx := context.Background()
	eng, err := plugins.NewEngine(plugins.Config{CacheDir: th.CacheDir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = eng.Close(ctx) })
	mgr := plugins.NewManager(eng, plugins.ManagerOptions{Verify: plugins.AcceptAnyModule, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = mgr.Close(ctx) })
	for _, m := range mods {
		require.NoError(t, mgr.Load(ctx, m[0], th.Wasm(m[1]), lim))
	}
	return mgr
}

// generous is a call deadline no loaded test machine reaches with a
// correct guest: answers, not deadlines, are on trial.
var generous = plugins.Limits{CallTimeout: 10 * time.Second}

// newRenderer renders with the reference guest (module "renderer") and the
// hostile one (module "bad").
func newRenderer(t testing.TB, o Options) (*Renderer, *plugins.Manager) {
	t.Helper()
	mgr := newManager(t, generous, [2]string{"renderer", "renderer"}, [2]string{"bad", "badrenderer"})
	o.Guests = mgr
	if o.Modules == nil {
		o.Modules = []string{"renderer", "bad"}
	}
	if o.Clock == nil {
		o.Clock = func() time.Time { return testNow }
	}
	r, err := New(o)
	require.NoError(t, err)
	return r, mgr
}

// counter is the value of one counter series.
func counter(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// builtGuest is the wasm of a guest TestMain built.
func builtGuest(name string) []byte { return th.Wasm(name) }

// compileCache is the wazero cache TestMain warmed.
func compileCache() string { return th.CacheDir }
