// Package host is caphost's composition root: it turns a loaded
// configuration into a running host — the guest modules, the Redis runtime
// for the selected roles, the capabilities, Prometheus instruments on a
// private registry, readiness — and owns their lifecycle. Services embed
// caphost through New; the daemon and the CLI go through the same
// functions, so there is one path from configuration to Redis.
//
// Every capability is a module (host/internal/module) registered in one
// list (host/internal/builtin): New decodes each active capability's block
// with the capability's own strict decoder, provisions the capabilities in
// registration order on the guests and the runtime, validates them, and
// serves their HTTP routes and descriptors; a failure at any step closes
// everything already built, in reverse. A disabled capability creates
// nothing. Guest swaps reach the capabilities that consume the swapped kind
// through the hooks they register (guests_wire.go).
//
// Capability facades (host/ratelimit, ...) are reached through accessors
// such as RateLimit; operator actions that need no running host (listing,
// verifying and deploying the program catalog, probing) live in operate.go.
//
// What may change here: new accessors for new capabilities, the
// operations surface. What must not: the order (guests, runtime,
// capabilities; closed in reverse), that guests never reach the runtime,
// and that a guest failure never turns into an allow.
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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/host/internal/builtin"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/host/metrics"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/commands"
	"github.com/caphost/caphost/runtime"
)

// Host is an assembled caphost. It is safe for concurrent use; Close is the
// single close authority.
type Host struct {
	cfg *config.Config
	log *slog.Logger
	reg *prometheus.Registry
	// treg is the host's own view of reg: what the host registered leaves
	// the registry again when it closes (also after a failed New), so an
	// embedder can build hosts on one registry one after another.
	treg    *trackedRegisterer
	rt      *runtime.Runtime // nil when no role is selected
	checker *health.Checker
	ready   readinessOptions // the startup handshake (readiness.go)
	guests  *guests          // nil without guest modules
	// caps holds every registered capability in registration order; an
	// inactive one has a nil mod. Fixed once New returns.
	caps []*capEntry

	closeOnce sync.Once
	closeErr  error
}

// capEntry is one registered capability in a host.
type capEntry struct {
	info module.Info
	mod  module.Module      // nil: disabled
	reg  *trackedRegisterer // the capability's view of the registry
	prov bool               // Provision was called (Close is owed)
}

// Option configures New.
type Option func(*options)

type options struct {
	log   *slog.Logger
	reg   *prometheus.Registry
	ready readinessOptions
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegistry uses reg for every instrument instead of a new private
// registry (never the global default registry).
func WithRegistry(reg *prometheus.Registry) Option { return func(o *options) { o.reg = reg } }

// ErrNoRuntime is returned by Runtime when no Redis role is selected.
var ErrNoRuntime = errors.New("caphost: no redis role is selected")

// ErrCapabilityDisabled is returned by a capability accessor when the
// configuration does not activate that capability.
var ErrCapabilityDisabled = errors.New("caphost: capability is not active")

// New assembles a host from cfg, in order: the guest modules (when any is
// configured; every load failure is reported at once), the Redis runtime,
// the active capabilities (decoded, provisioned and validated in
// registration order), and last the guest file watchers. It creates Redis
// clients only for the roles cfg selects (and dials nothing until first
// use); with no role selected it creates no client, goroutine or health
// dependency at all. A capability block that does not decode is a
// *policy.ValidationError listing every problem. On failure everything
// already built is closed.
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
	h := &Host{cfg: cfg, log: o.log, reg: o.reg, treg: &trackedRegisterer{Registerer: o.reg}, ready: o.ready}
	// Decode first: a block that does not decode must not cost a guest
	// compilation or a Redis client.
	if err := h.decodeCapabilities(); err != nil {
		return nil, err
	}
	if len(cfg.Guests.Modules) > 0 {
		g, err := newGuests(ctx, o.log, cfg.Guests, cfg.Security, cfg.TrustedKeys, h.treg, h.guestSwapped)
		if err != nil {
			h.treg.unregisterAll()
			return nil, err
		}
		h.guests = g
	}
	if err := h.newRuntime(ctx); err != nil {
		_ = h.Close(ctx)
		return nil, err
	}
	if err := h.startHandshake(ctx); err != nil {
		_ = h.Close(ctx)
		return nil, err
	}
	if err := h.provisionCapabilities(ctx); err != nil {
		_ = h.Close(ctx)
		return nil, err
	}
	if h.guests != nil {
		if err := h.guests.watch(ctx); err != nil {
			_ = h.Close(ctx)
			return nil, err
		}
	}
	return h, nil
}

// decodeCapabilities creates a module for every active capability and runs
// its strict decode, collecting every problem of every capability.
func (h *Host) decodeCapabilities() error {
	var ps policy.Problems
	for _, info := range builtin.Capabilities() {
		e := &capEntry{info: info}
		h.caps = append(h.caps, e)
		c, ok := h.cfg.Capabilities[info.ID]
		if !ok {
			continue
		}
		e.mod = info.New()
		e.mod.Decode(c.ModuleBlock(h.cfg), &ps)
	}
	for name := range h.cfg.Capabilities {
		if _, ok := builtin.Lookup(name); !ok {
			// config.Load refuses these; a hand-built Config may not.
			ps.Add("capabilities."+name, policy.RuleCapabilityUnknown, "not implemented by this host")
		}
	}
	ps.Sort()
	if err := ps.Err(); err != nil {
		h.caps = nil
		return err
	}
	for _, e := range h.caps {
		if e.mod == nil {
			continue
		}
		d := e.mod.Descriptor()
		if err := d.Validate(); err != nil {
			return fmt.Errorf("caphost: %s: %w", e.info.ID, err)
		}
		if d.Readiness != e.info.Readiness || d.Capability != e.info.ID {
			return fmt.Errorf("caphost: %s: descriptor disagrees with its registration (%s %s, registered %s %s)",
				e.info.ID, d.Capability, d.Readiness, e.info.ID, e.info.Readiness)
		}
	}
	return nil
}

// provisionCapabilities provisions, then validates, every active
// capability in registration order. The caller closes the host on error,
// which closes every capability that was provisioned, in reverse.
func (h *Host) provisionCapabilities(ctx context.Context) error {
	var gs module.Guests
	if h.guests != nil {
		gs = h.guests
	}
	for _, e := range h.caps {
		if e.mod == nil {
			continue
		}
		if h.rt == nil {
			return fmt.Errorf("caphost: %s: %w", e.info.ID, ErrNoRuntime)
		}
		e.reg = &trackedRegisterer{Registerer: h.reg}
		e.prov = true
		env := module.Env{Log: h.log.With("capability", e.info.ID), Registerer: e.reg, Runtime: h.rt, Guests: gs}
		if err := e.mod.Provision(ctx, env); err != nil {
			return fmt.Errorf("caphost: %s: %w", e.info.ID, err)
		}
	}
	for _, e := range h.caps {
		if e.mod == nil {
			continue
		}
		if err := e.mod.Validate(ctx); err != nil {
			return fmt.Errorf("caphost: %s: %w", e.info.ID, err)
		}
		if err := checkRoutes(e); err != nil {
			return err
		}
	}
	return nil
}

// checkRoutes holds a module to the patterns it registered: the daemon
// answers 503 on exactly those while the capability is disabled.
func checkRoutes(e *capEntry) error {
	routes := e.mod.Routes()
	if routes == nil {
		return nil
	}
	want := map[string]bool{}
	for _, p := range e.info.Routes {
		want[p] = true
	}
	for p := range routes {
		if !want[p] {
			return fmt.Errorf("caphost: %s: route %q is not in its registration", e.info.ID, p)
		}
		delete(want, p)
	}
	if len(want) > 0 {
		return fmt.Errorf("caphost: %s: registered routes without a handler: %d", e.info.ID, len(want))
	}
	return nil
}

// active returns the provisioned module of capability id, or nil.
func (h *Host) active(id string) module.Module {
	for _, e := range h.caps {
		if e.info.ID == id && e.mod != nil && e.prov {
			return e.mod
		}
	}
	return nil
}

// guestSwapped runs after every swap attempt of a loaded module.
func (h *Host) guestSwapped(module string, ok bool) {
	if ok && h.guests != nil {
		h.guests.notifySwapped(module)
	}
}

// newRuntime creates the Redis runtime for the selected roles (none: no
// client, goroutine or health dependency at all).
func (h *Host) newRuntime(ctx context.Context) error {
	cfg := h.cfg
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
	m, err := metrics.NewRedis(h.treg, deps, cat.Names())
	if err != nil {
		return fmt.Errorf("caphost: metrics: %w", err)
	}
	tap := &readinessTap{Observer: m}
	rt, err := runtime.New(ctx, cfg.Redis, runtime.WithLogger(h.log), runtime.WithObserver(tap))
	if err != nil {
		return err
	}
	h.rt = rt
	if err := h.expectReplicaWaits(rt); err != nil {
		return err
	}
	h.checker = h.newChecker(rt)
	tap.checker.Store(h.checker)
	return nil
}

// replicaWaiter is a module whose decoded block asks for replica
// acknowledgements (WAIT) on its role: the fenced lease's replication
// profile.
type replicaWaiter interface {
	ReplicaWait() (runtime.ReplicaWaitProfile, bool)
}

// expectReplicaWaits registers every decoded module's replica-wait profile
// with the runtime before the startup handshake starts, so its first
// attempt already proves it (runtime.Runtime.ExpectReplicaWait). A
// profile on a role the configuration does not select is left to the
// capability's Provision, which reports that role.
func (h *Host) expectReplicaWaits(rt *runtime.Runtime) error {
	for _, e := range h.caps {
		w, ok := e.mod.(replicaWaiter)
		if !ok {
			continue
		}
		p, on := w.ReplicaWait()
		if !on || !slices.Contains(rt.Roles(), p.Role) {
			continue
		}
		if err := rt.ExpectReplicaWait(p); err != nil {
			return fmt.Errorf("caphost: %s: %w", e.info.ID, err)
		}
	}
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
//  2. the capabilities, in reverse registration order (their background
//     work stops; their instruments leave the registry);
//  3. the Redis runtime drains: a request asks its guest before it calls
//     Redis, so once guest calls are done the remaining Redis calls finish
//     and new ones fail as not sent;
//  4. the plugins engine last: closing it interrupts any module still
//     running and releases the compilation cache, which nothing needs once
//     no module can be loaded or swapped.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.stopHandshake()
		var errs []error
		if h.guests != nil {
			errs = append(errs, h.guests.closeManager(ctx))
			h.log.Debug("host close: guests drained")
		}
		for i := len(h.caps) - 1; i >= 0; i-- {
			e := h.caps[i]
			if e.mod == nil || !e.prov {
				continue
			}
			if err := e.mod.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("caphost: %s: close: %w", e.info.ID, err))
			}
			e.reg.unregisterAll()
		}
		if h.rt != nil {
			errs = append(errs, h.rt.Close(ctx))
			h.log.Debug("host close: runtime drained")
		}
		if h.guests != nil {
			errs = append(errs, h.guests.closeEngine(ctx))
			h.log.Debug("host close: guest engine closed")
		}
		h.treg.unregisterAll()
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
// for a kind a capability consumes, checked by that capability (a
// rate-policy guest's policies against the limiter), and only then swapped
// in; on any failure the serving generation keeps serving and the error is
// a *plugins.SwapError (errors.Is: ErrSwapUnauthorized, ErrGuestPolicies,
// ErrGuestKindChange, a plugins.Class, ...). An unknown name is
// plugins.ErrUnknownModule; no guests at all is ErrNoGuests.
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

// trackedRegisterer remembers what a capability registered so Close (also
// after a failed provision) leaves the registry as it found it.
type trackedRegisterer struct {
	prometheus.Registerer
	mu sync.Mutex
	cs []prometheus.Collector
}

// Register implements prometheus.Registerer.
func (t *trackedRegisterer) Register(c prometheus.Collector) error {
	if err := t.Registerer.Register(c); err != nil {
		return err
	}
	t.mu.Lock()
	t.cs = append(t.cs, c)
	t.mu.Unlock()
	return nil
}

// MustRegister implements prometheus.Registerer (it panics like the
// registry's own MustRegister; capabilities use Register).
func (t *trackedRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister implements prometheus.Registerer.
func (t *trackedRegisterer) Unregister(c prometheus.Collector) bool {
	return t.Registerer.Unregister(c)
}

func (t *trackedRegisterer) unregisterAll() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cs {
		t.Registerer.Unregister(c)
	}
	t.cs = nil
}
