package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
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
//
// Every answer New makes itself is JSON, and none is a redirect: a path
// that is not canonical (see Canonical) is a 400 bad-path before any route
// sees it, so ServeMux never cleans it into a redirect; a path no route
// serves is a 404 not-found; another method is a 405 method-not-allowed
// with an Allow header.
func New(b Backend, opts Options) http.Handler {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	ops := onlyOf(b.Handler(), http.MethodGet, http.MethodHead)
	for _, p := range []string{"/livez", "/readyz", "/metrics"} {
		mux.Handle(p, ops)
	}
	routes := b.CapabilityRoutes()
	httpjson.Mount(mux, routes)
	if !opts.AdminToken.IsZero() && opts.Validate() == nil {
		a := newAdmin(b, opts, log)
		mux.Handle("/admin/guests", a.auth(only(http.MethodGet, http.HandlerFunc(a.list))))
		mux.Handle("/admin/guests/{name}", a.auth(only(http.MethodPut, http.HandlerFunc(a.swap))))
		mux.Handle("/admin/guests/{name}/rollback", a.auth(only(http.MethodPost, http.HandlerFunc(a.rollback))))
		mux.Handle("/admin/capabilities", a.auth(only(http.MethodGet, http.HandlerFunc(a.capabilities))))
	}
	notFound := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpjson.WriteError(w, httpjson.NewError(http.StatusNotFound, httpjson.CodeNotFound, "no such endpoint"))
	})
	mux.Handle("/", notFound)
	// A subtree pattern "/x/" makes ServeMux redirect "/x" to it; serve
	// the bare path instead, unless the capability does.
	for p := range routes {
		_, path, ok := strings.Cut(p, " ")
		if !ok {
			path = p
		}
		path = strings.TrimSpace(path)
		if bare, sub := strings.CutSuffix(path, "/"); sub && bare != "" && !servesPath(routes, bare) {
			mux.Handle(bare, notFound)
		}
	}
	badPath := httpjson.NewError(http.StatusBadRequest, CodeBadPath,
		"the path is not canonical: no empty, . or .. segment, no trailing slash (percent-encode such a key: %2E, %2F)")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Canonical(r.URL.EscapedPath()) {
			httpjson.WriteError(w, badPath)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// servesPath reports whether routes has a pattern for path, with or
// without a method.
func servesPath(routes map[string]http.Handler, path string) bool {
	for p := range routes {
		if _, pp, ok := strings.Cut(p, " "); ok {
			p = strings.TrimSpace(pp)
		}
		if p == path {
			return true
		}
	}
	return false
}

// Canonical reports whether an escaped request path is one New routes: "/",
// or "/" followed by segments that are neither empty nor a literal "." or
// "..". It is exactly the set of paths ServeMux would not clean (and so
// would not redirect). Percent-encoded segments are canonical whatever
// they decode to: %2E%2E, %2F and %2E are data, decoded once by the route
// that serves them.
func Canonical(escaped string) bool {
	if escaped == "/" {
		return true
	}
	rest, ok := strings.CutPrefix(escaped, "/")
	if !ok {
		return false
	}
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// only answers a JSON 405 for other methods (the mux's own 405 is text).
func only(method string, h http.Handler) http.Handler {
	return onlyOf(h, method)
}

// onlyOf is only for several methods.
func onlyOf(h http.Handler, methods ...string) http.Handler {
	notAllowed := httpjson.MethodNotAllowed(methods...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(methods, r.Method) {
			notAllowed.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
