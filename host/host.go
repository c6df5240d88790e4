// Package host is caphost's composition root: it turns a loaded
// configuration into a running host — the Redis runtime for the selected
// roles, Prometheus instruments on a private registry, readiness — and owns
// their lifecycle. Services embed caphost through New; the daemon and the
// CLI go through the same functions, so there is one path from configuration
// to Redis.
//
// New assembles, in order and only what configuration activates: the guest
// modules (plugins engine with the configured compile cache, a hot-swap
// manager, every module loaded and verified, file watchers with
// guests.watch), then the Redis runtime, then the capabilities (rate-limit:
// configured policies plus those declared by rate-policy guests, selected
// by the guest or by the configured routes). A successful swap of a
// rate-policy guest rebuilds the policy set without a restart; its policies
// are checked before the swap, so a candidate the limiter would refuse never
// serves (guests_wire.go, ratelimit_wire.go).
//
// Capability facades (host/cache, host/ratelimit, ...) are built on a Host;
// operator actions that need no running host (listing, verifying and
// deploying the program catalog, probing) live in operate.go.
//
// What may change here: the wiring of new capabilities and guests, in the
// same order (guests, runtime, capabilities) and with the same close order
// in reverse. What must not: guests never reach the runtime; a guest failure
// never turns into an allow.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/host/metrics"
	"github.com/caphost/caphost/policy/commands"
	"github.com/caphost/caphost/runtime"
)

// Host is an assembled caphost. It is safe for concurrent use; Close is the
// single close authority.
type Host struct {
	cfg     *config.Config
	log     *slog.Logger
	reg     *prometheus.Registry
	rt      *runtime.Runtime // nil when no role is selected
	checker *health.Checker
	guests  *guests // nil without guest modules
	// rate is set once during New; atomic because a watched guest swap may
	// already run while New is still wiring.
	rate atomic.Pointer[rateWire]

	closeOnce sync.Once
	closeErr  error
}

// Option configures New.
type Option func(*options)

type options struct {
	log *slog.Logger
	reg *prometheus.Registry
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegistry uses reg for every instrument instead of a new private
// registry (never the global default registry).
func WithRegistry(reg *prometheus.Registry) Option { return func(o *options) { o.reg = reg } }

// ErrNoRuntime is returned by Runtime when no Redis role is selected.
var ErrNoRuntime = errors.New("caphost: no redis role is selected")

// New assembles a host from cfg, in order: the guest modules (when any is
// configured; every load failure is reported at once), the Redis runtime,
// the active capabilities, and last the guest file watchers. It creates
// Redis clients only for the roles cfg selects (and dials nothing until
// first use); with no role selected it creates no client, goroutine or
// health dependency at all. On failure everything already built is closed.
func New(ctx context.Context, cfg *config.Config, opts ...Option) (*Host, error) {
	o := options{log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	if o.reg == nil {
		o.reg = prometheus.NewRegistry()
		o.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	h := &Host{cfg: cfg, log: o.log, reg: o.reg}
	if len(cfg.Guests.Modules) > 0 {
		g, err := newGuests(ctx, o.log, cfg.Guests, cfg.Security, cfg.TrustedKeys, o.reg, h.guestSwapped)
		if err != nil {
			return nil, err
		}
		h.guests = g
	}
	if err := h.newRuntime(ctx); err != nil {
		_ = h.Close(ctx)
		return nil, err
	}
	if c, ok := cfg.Capabilities[rateCapability]; ok {
		w, err := h.newRate(ctx, c)
		if err != nil {
			_ = h.Close(ctx)
			return nil, fmt.Errorf("caphost: rate-limit: %w", err)
		}
		h.rate.Store(w)
	}
	if h.guests != nil {
		if err := h.guests.watch(ctx); err != nil {
			_ = h.Close(ctx)
			return nil, err
		}
	}
	return h, nil
}

// guestSwapped runs after every swap attempt of a loaded module: a
// successful swap of a rate-policy guest rebuilds the rate policy set.
func (h *Host) guestSwapped(module string, ok bool) {
	w := h.rate.Load()
	if !ok || w == nil || !slices.Contains(w.mods, module) {
		return
	}
	w.reload(module)
}

// newRuntime creates the Redis runtime for the selected roles (none: no
// client, goroutine or health dependency at all).
func (h *Host) newRuntime(ctx context.Context) error {
	cfg, o := h.cfg, options{log: h.log, reg: h.reg}
	if len(cfg.Redis.Roles) == 0 {
		return nil
	}
	cat, err := commands.Default()
	if err != nil {
		return err
	}
	deps := make([]string, 0, len(cfg.Redis.Deployments))
	for id := range cfg.Redis.Deployments {
		deps = append(deps, id)
	}
	sort.Strings(deps)
	m, err := metrics.NewRedis(o.reg, deps, cat.Names())
	if err != nil {
		return fmt.Errorf("caphost: metrics: %w", err)
	}
	rt, err := runtime.New(ctx, cfg.Redis, runtime.WithLogger(o.log), runtime.WithObserver(m))
	if err != nil {
		return err
	}
	h.rt = rt
	h.checker = health.NewChecker(health.RuntimeSource(rt), cfg.Redis, health.Options{})
	return nil
}

// Runtime returns the Redis runtime, or ErrNoRuntime.
func (h *Host) Runtime() (*runtime.Runtime, error) {
	if h.rt == nil {
		return nil, ErrNoRuntime
	}
	return h.rt, nil
}

// Config returns the configuration the host was built from.
func (h *Host) Config() *config.Config { return h.cfg }

// Registry returns the host's Prometheus registry.
func (h *Host) Registry() *prometheus.Registry { return h.reg }

// Readiness reports the selected roles' health (always ready with no roles).
func (h *Host) Readiness(ctx context.Context) health.Report {
	if h.checker == nil {
		return health.Report{Status: health.Up, Ready: true}
	}
	return h.checker.Readiness(ctx)
}

// Probe runs the Redis startup probe (see runtime.Runtime.Probe).
func (h *Host) Probe(ctx context.Context) (runtime.ProbeReport, error) {
	if h.rt == nil {
		return runtime.ProbeReport{}, ErrNoRuntime
	}
	rep := h.rt.Probe(ctx)
	return rep, rep.Err()
}

// Handler serves the operations surface: /livez (never touches Redis),
// /readyz and /metrics.
func (h *Host) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /livez", health.LivezHandler())
	mux.Handle("GET /readyz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.checker == nil {
			health.LivezHandler().ServeHTTP(w, r)
			return
		}
		health.ReadyzHandler(h.checker).ServeHTTP(w, r)
	}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{Registry: h.reg}))
	return mux
}

// Close shuts the host down once (later calls return the first result), in
// this order:
//  1. the guest manager: file watchers stop first, so no swap races the
//     shutdown, then the serving generations drain (in-flight guest calls
//     finish; new ones fail with plugins.ErrManagerClosed);
//  2. the Redis runtime drains: a request asks its guest before it calls
//     Redis, so once guest calls are done the remaining Redis calls finish
//     and new ones fail as not sent;
//  3. the plugins engine last: closing it interrupts any module still
//     running and releases the compilation cache, which nothing needs once
//     no module can be loaded or swapped.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		var errs []error
		if h.guests != nil {
			errs = append(errs, h.guests.closeManager(ctx))
			h.log.Debug("host close: guests drained")
		}
		if h.rt != nil {
			errs = append(errs, h.rt.Close(ctx))
			h.log.Debug("host close: runtime drained")
		}
		if h.guests != nil {
			errs = append(errs, h.guests.closeEngine(ctx))
			h.log.Debug("host close: guest engine closed")
		}
		h.closeErr = errors.Join(errs...)
	})
	return h.closeErr
}

// Guests describes every guest module, sorted by name (nil without guests).
func (h *Host) Guests() []GuestStatus {
	if h.guests == nil {
		return nil
	}
	return h.guests.status()
}

// SwapGuest hot-swaps the named module to wasm. signature is the detached
// signature document (the .sig JSON) or nil. The candidate is verified (a
// trusted signature, or security.allow-unsigned-swaps without trusted
// keys), compiled, its description, self-test and conformance checked and,
// for a rate-policy guest, its policies checked against the limiter, and
// only then swapped in; on any failure the serving generation keeps serving
// and the error is a *plugins.SwapError (errors.Is: ErrSwapUnauthorized,
// ErrGuestPolicies, ErrGuestKindChange, a plugins.Class, ...). An unknown
// name is plugins.ErrUnknownModule; no guests at all is ErrNoGuests.
func (h *Host) SwapGuest(ctx context.Context, name string, wasm, signature []byte) (GuestStatus, error) {
	if h.guests == nil {
		return GuestStatus{}, ErrNoGuests
	}
	err := h.guests.swap(ctx, name, wasm, signature)
	for _, s := range h.guests.status() {
		if s.Name == name {
			return s, err
		}
	}
	return GuestStatus{}, err
}
