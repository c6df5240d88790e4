package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/policy"
)

// Bounds of the API.
const (
	// MaxEvaluateBodyBytes bounds a POST /v1/ratelimit/evaluate body.
	MaxEvaluateBodyBytes = 64 << 10
	// MaxGuestBytes bounds a PUT /admin/guests/{name} body (a wasm module).
	MaxGuestBytes = 64 << 20
	// MinAdminTokenBytes is the shortest admin token New accepts; shorter
	// tokens are guessable.
	MinAdminTokenBytes = 16
	// DefaultBudget bounds an evaluation without deadline-ms.
	DefaultBudget = 250 * time.Millisecond
	// MaxDeadline bounds deadline-ms.
	MaxDeadline = 10 * time.Second
	// SignatureHeader carries the optional detached signature of a swapped
	// module: the base64 (standard or URL alphabet, padding optional) of the
	// .sig JSON document that `caphost guest sign` writes.
	SignatureHeader = "Caphost-Guest-Signature"
)

// Backend is what the API needs from a host; *host.Host implements it.
type Backend interface {
	// Handler serves /livez, /readyz and /metrics.
	Handler() http.Handler
	// RateLimit returns the limiter and selector, or an error matching
	// host.ErrCapabilityDisabled when the capability is off.
	RateLimit() (*ratelimit.Limiter, ratelimit.Selector, error)
	// Concurrency returns the concurrency-permit limiter of the rate-limit
	// capability, or an error matching host.ErrCapabilityDisabled.
	Concurrency() (*ratelimit.ConcurrencyLimiter, error)
	// Guests lists the loaded guest slots.
	Guests() []host.GuestStatus
	// SwapGuest replaces the named guest's module; on failure the previous
	// generation keeps serving.
	SwapGuest(ctx context.Context, name string, wasm, signature []byte) (host.GuestStatus, error)
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
	// Budget bounds an evaluation without deadline-ms (default DefaultBudget).
	Budget time.Duration
}

// Validate reports configuration mistakes New would otherwise paper over.
func (o Options) Validate() error {
	if !o.AdminToken.IsZero() && o.AdminToken.Len() < MinAdminTokenBytes {
		return ErrAdminTokenTooShort
	}
	return nil
}

type api struct {
	b      Backend
	log    *slog.Logger
	budget time.Duration
	admin  *admin // nil without a token
}

// New returns the daemon's handler. An admin token shorter than
// MinAdminTokenBytes disables the admin endpoints (callers should run
// Options.Validate first and refuse to start).
func New(b Backend, opts Options) http.Handler {
	a := &api{b: b, log: opts.Log, budget: opts.Budget}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.budget <= 0 {
		a.budget = DefaultBudget
	}
	if !opts.AdminToken.IsZero() && opts.Validate() == nil {
		a.admin = newAdmin(b, opts.AdminToken, a.log)
	}
	mux := http.NewServeMux()
	ops := b.Handler()
	for _, p := range []string{"/livez", "/readyz", "/metrics"} {
		mux.Handle(p, ops)
	}
	mux.Handle("/v1/ratelimit/evaluate", only(http.MethodPost, http.HandlerFunc(a.evaluate)))
	for _, op := range []string{"acquire", "renew", "release"} {
		mux.Handle("/v1/concurrency/"+op, only(http.MethodPost, a.concurrency(op)))
	}
	if a.admin != nil {
		mux.Handle("/admin/guests", a.admin.auth(only(http.MethodGet, http.HandlerFunc(a.admin.list))))
		mux.Handle("/admin/guests/{name}", a.admin.auth(only(http.MethodPut, http.HandlerFunc(a.admin.swap))))
	}
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "no such endpoint"))
	}))
	return mux
}

// only answers a JSON 405 for other methods (the mux's own 405 is text).
func only(method string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use "+method))
			return
		}
		h.ServeHTTP(w, r)
	})
}
