package ratelimit

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
)

// moduleRunner serves one loaded module as every guest name.
type moduleRunner struct{ m *plugins.Module }

func (r moduleRunner) Use(_ context.Context, _ string, fn func(plugins.Guest) error) error {
	return fn(r.m)
}

// referenceGuest loads the reference rate-policy guest as `make guests`
// builds it, compiled through the same cache (so a -race run loads it in
// milliseconds instead of compiling it for minutes).
func referenceGuest(t *testing.T) *plugins.Module {
	t.Helper()
	build := filepath.Join("..", "..", "build")
	wasm, err := os.ReadFile(filepath.Join(build, "guests", "rate-policy.wasm"))
	if err != nil {
		t.Fatalf("the reference rate-policy guest is not built: run `make guests` first (%v)", err)
	}
	e, err := plugins.NewEngine(plugins.Config{CacheDir: filepath.Join(build, "wazero-cache"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	// The machine is shared and -race is slow: a generous call deadline.
	m, err := e.Load(context.Background(), "rate-policy", wasm, plugins.Limits{CallTimeout: 5 * time.Second})
	require.NoError(t, err)
	return m
}

// guestHost is the reference guest selecting for a limiter on a private
// redis-server, behind the sidecar and the middleware.
type guestHost struct {
	*sidecarHost
	mw http.Handler
}

func newGuestHost(t *testing.T) *guestHost {
	t.Helper()
	m := referenceGuest(t)
	sel := NewGuestSelector(moduleRunner{m}, "rate-policy")
	cfg := Config{Provider: ProviderRedis, RedisRole: policy.RoleCoordination, DegradedProvider: DegradedDisabled}
	set, err := cfg.CompileWithGuests(map[string][]policy.RatePolicyDecl{"rate-policy": GuestPolicyDecls(m.Description())})
	require.NoError(t, err)
	srv := redistest.StartStandalone(t)
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	reg := prometheus.NewRegistry()
	rt := newRuntime(t, srv.Addr())
	l, err := New(rt, cfg, set, WithRegisterer(reg), WithLogger(log))
	require.NoError(t, err)
	sc := NewSidecar(l, sel, nil, SidecarOptions{Log: log, Budget: 5 * time.Second})
	mux := http.NewServeMux()
	httpjson.Mount(mux, sc.Routes())
	ex := &HeaderExtractor{APIKeyHeader: "X-Api-Key", APIKeyPlanHeader: "X-Plan"}
	mw := Middleware(l, sel, ex, MiddlewareOptions{Log: log, Budget: 5 * time.Second})(okHandler)
	return &guestHost{sidecarHost: &sidecarHost{fixture: &fixture{srv: srv, rt: rt, l: l, reg: reg}, sc: sc, mux: mux, log: logs}, mw: mw}
}

// TestGuestInvalidRequestIsTheCallersError: the reference guest answers
// invalid-request for method BREW. That is the caller's error: the sidecar
// answers 400 request-refused (no Retry-After: repeating it cannot
// succeed) and the middleware 400, never 503 selector-unavailable. Other
// selector failures (here the guest call's context has ended) stay 503
// and never allow.
func TestGuestInvalidRequestIsTheCallersError(t *testing.T) {
	h := newGuestHost(t)
	_, err := h.sc.sel.Select(ctxT(t), Attributes{Route: "/x", Method: "BREW"})
	require.ErrorIs(t, err, ErrSelectionRefused)
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
	assert.NotErrorIs(t, err, ErrGuestSelect, "a deliberate answer is not a guest failure")

	rec, m := h.post(t, "/v1/ratelimit/evaluate", `{"attributes":{"route":"/search","method":"BREW","api-key-plan":"pro"},"subject":{"api-key":"k"}}`)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Equal(t, "request-refused", m["code"])
	assert.Empty(t, rec.Header().Get("Retry-After"))
	assert.NotContains(t, m["message"], "unknown method", "the guest's detail is not repeated")

	rec, m = h.post(t, "/v1/ratelimit/evaluate", `{"attributes":{"route":"/search","method":"GET","api-key-plan":"pro"},"subject":{"api-key":"k"}}`)
	require.Equal(t, http.StatusOK, rec.Code, "%v", m)
	assert.Equal(t, true, m["allowed"])
	assert.Equal(t, "pro-read", m["policy"])

	serve := func(method string, ctx context.Context) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, method, "/search", nil)
		r.Header.Set("X-Api-Key", "k")
		r.Header.Set("X-Plan", "pro")
		w := httptest.NewRecorder()
		h.mw.ServeHTTP(w, r)
		return w
	}
	w := serve("BREW", context.Background())
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Empty(t, w.Header().Get("Retry-After"))
	assert.Equal(t, http.StatusTeapot, serve(http.MethodGet, context.Background()).Code)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	w = serve(http.MethodPost, ended)
	assert.Equal(t, http.StatusServiceUnavailable, w.Code, "a failed guest call never allows")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	_, err = h.l.Decide(ended, h.sc.sel, Query{Attributes: Attributes{Route: "/orders", Method: "POST", APIKeyPlan: "pro"}, Identity: Identity{APIKey: "k"}})
	require.ErrorIs(t, err, ErrSelector)
	assert.NotErrorIs(t, err, ErrSelectionRefused)
	assert.False(t, strings.Contains(h.log.String(), "unknown method"), "guest messages stay out of the host log")
}
