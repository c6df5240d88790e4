// Package host is caphost's composition root: it turns a loaded
// configuration into a running host — the Redis runtime for the selected
// roles, Prometheus instruments on a private registry, readiness — and owns
// their lifecycle. Services embed caphost through New; the daemon and the
// CLI go through the same functions, so there is one path from configuration
// to Redis.
//
// Capability facades (host/cache, host/ratelimit, ...) are built on a Host;
// operator actions that need no running host (listing, verifying and
// deploying the program catalog, probing) live in operate.go.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"

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

// New assembles a host from cfg. It creates Redis clients only for the
// roles cfg selects (and dials nothing until first use); with no role
// selected it creates no client, goroutine or health dependency at all.
func New(ctx context.Context, cfg *config.Config, opts ...Option) (*Host, error) {
	o := options{log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.reg == nil {
		o.reg = prometheus.NewRegistry()
		o.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	h := &Host{cfg: cfg, log: o.log, reg: o.reg}
	if len(cfg.Redis.Roles) == 0 {
		return h, nil
	}
	cat, err := commands.Default()
	if err != nil {
		return nil, err
	}
	deps := make([]string, 0, len(cfg.Redis.Deployments))
	for id := range cfg.Redis.Deployments {
		deps = append(deps, id)
	}
	sort.Strings(deps)
	m, err := metrics.NewRedis(o.reg, deps, cat.Names())
	if err != nil {
		return nil, fmt.Errorf("caphost: metrics: %w", err)
	}
	rt, err := runtime.New(ctx, cfg.Redis, runtime.WithLogger(o.log), runtime.WithObserver(m))
	if err != nil {
		return nil, err
	}
	h.rt = rt
	h.checker = health.NewChecker(health.RuntimeSource(rt), cfg.Redis, health.Options{})
	return h, nil
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

// Close drains and closes the Redis runtime (once; later calls return the
// first result).
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		if h.rt != nil {
			h.closeErr = h.rt.Close(ctx)
		}
	})
	return h.closeErr
}
