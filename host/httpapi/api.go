package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/policy"
)

// Bounds of the API.
const (
	// MaxGuestBytes bounds a PUT /admin/guests/{name} body (a wasm module).
	MaxGuestBytes = 64 << 20
	// MinAdminTokenBytes is the shortest admin token New accepts; shorter
	// tokens are guessable.
	MinAdminTokenBytes = 16
	// SignatureHeader carries the optional detached signature of a swapped
	// module: the base64 (standard or URL alphabet, padding optional) of the
	// .sig JSON document that `caphost guest sign` writes.
	SignatureHeader = "Caphost-Guest-Signature"
)

// Backend is what the API needs from a host; *host.Host implements it.
type Backend interface {
	// Handler serves /livez, /readyz and /metrics.
	Handler() http.Handler
	// CapabilityRoutes returns every registered capability's HTTP API by
	// ServeMux pattern (a disabled capability's patterns answer 503
	// capability-disabled).
	CapabilityRoutes() map[string]http.Handler
	// Capabilities reports every capability's actual state; GuestKinds
	// every guest kind's card readiness and consumers.
	Capabilities(ctx context.Context) []capability.Status
	GuestKinds() []host.GuestKind
	// Guests lists the loaded guest slots.
	Guests() []host.GuestStatus
	// SwapGuest replaces the named guest's module; on failure the previous
	// generation keeps serving.
	SwapGuest(ctx context.Context, name string, wasm, signature []byte) (host.GuestStatus, error)
	// RollbackGuest makes the named guest's previous verified generation
	// serve again; on failure the current one keeps serving.
	RollbackGuest(ctx context.Context, name string) (host.GuestStatus, error)
}

// ErrAdminTokenTooShort is returned by Options.Validate.
var ErrAdminTokenTooShort = errors.New("httpapi: admin token is shorter than 16 bytes")

// Options configures New.
type Options struct {
	// AdminToken guards /admin/...; zero means the admin endpoints are not
	// served at all (404), so an unconfigured daemon exposes no admin surface.
	AdminToken policy.Secret
	// Log receives bounded diagnostics (never a subject or a token).
	// Default slog.Default().
	Log *slog.Logger
	// UploadTimeout bounds reading one PUT /admin/guests/{name} body;
	// zero means DefaultUploadTimeout.
	UploadTimeout time.Duration
}

// Validate reports configuration mistakes New would otherwise paper over.
func (o Options) Validate() error {
	if !o.AdminToken.IsZero() && o.AdminToken.Len() < MinAdminTokenBytes {
		return ErrAdminTokenTooShort
	}
	return nil
}

// New returns the daemon's handler: the host's operations endpoints,
// every capability's HTTP API (each capability serves its own routes; see
// host.Host.CapabilityRoutes), and the admin endpoints. An admin token
// shorter than MinAdminTokenBytes disables the admin endpoints (callers
// should run Options.Validate first and refuse to start).
func New(b Backend, opts Options) http.Handler {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	ops := b.Handler()
	for _, p := range []string{"/livez", "/readyz", "/metrics"} {
		mux.Handle(p, ops)
	}
	httpjson.Mount(mux, b.CapabilityRoutes())
	if !opts.AdminToken.IsZero() && opts.Validate() == nil {
		a := newAdmin(b, opts, log)
		mux.Handle("/admin/guests", a.auth(only(http.MethodGet, http.HandlerFunc(a.list))))
		mux.Handle("/admin/guests/{name}", a.auth(only(http.MethodPut, http.HandlerFunc(a.swap))))
		mux.Handle("/admin/guests/{name}/rollback", a.auth(only(http.MethodPost, http.HandlerFunc(a.rollback))))
		mux.Handle("/admin/capabilities", a.auth(only(http.MethodGet, http.HandlerFunc(a.capabilities))))
	}
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpjson.WriteError(w, httpjson.NewError(http.StatusNotFound, httpjson.CodeNotFound, "no such endpoint"))
	}))
	return mux
}

// only answers a JSON 405 for other methods (the mux's own 405 is text).
func only(method string, h http.Handler) http.Handler {
	notAllowed := httpjson.MethodNotAllowed(method)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			notAllowed.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
