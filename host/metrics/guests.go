package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// GuestClasses lists the failure classes the guest instruments accept as
// label values (plugins' closed set); anything else is reported as
// "unknown".
func GuestClasses() []plugins.Class {
	return []plugins.Class{
		plugins.ClassTrap, plugins.ClassDeadline, plugins.ClassCanceled, plugins.ClassMemory,
		plugins.ClassOutputTooLarge, plugins.ClassMalformedOutput, plugins.ClassInputTooLarge,
		plugins.ClassHostCallLimit, plugins.ClassBadHostCall, plugins.ClassABIMismatch,
		plugins.ClassForbiddenImport, plugins.ClassInvalidModule, plugins.ClassInvalidDescription,
		plugins.ClassNotDeclared, plugins.ClassPoolTimeout, plugins.ClassClosed,
	}
}

// Swap results (the result label of caphost_guest_swaps_total).
const (
	SwapOK     = "ok"
	SwapFailed = "failed"
)

// Guests holds the guest instruments. It implements plugins.Observer (calls,
// errors, latency, pools, instances, dropped logs) and plugins.SwapObserver
// (generations and swaps). Module names come from configuration and exports
// from the ABI: a module the host was not configured with is reported as
// "unknown", so a guest can never mint a series.
type Guests struct {
	calls      *prometheus.CounterVec   // module, export
	errors     *prometheus.CounterVec   // module, export, class
	duration   *prometheus.HistogramVec // module, export
	instances  *prometheus.GaugeVec     // module, state
	lifecycle  *prometheus.CounterVec   // module, event
	logDropped *prometheus.CounterVec   // module
	generation *prometheus.GaugeVec     // module
	swaps      *prometheus.CounterVec   // module, result

	modules map[string]bool
	classes map[plugins.Class]bool
}

// NewGuests creates and registers the guest instruments for the configured
// modules and pre-creates every label combination.
func NewGuests(reg prometheus.Registerer, modules []string) (*Guests, error) {
	m := &Guests{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "guest", Name: "calls_total",
			Help: "Guest export calls finished (answered or failed).",
		}, []string{"module", "export"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "guest", Name: "call_errors_total",
			Help: "Guest export calls that failed, by failure class.",
		}, []string{"module", "export", "class"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "caphost", Subsystem: "guest", Name: "call_duration_seconds",
			Help:    "Latency of guest export calls including the wait for a pooled instance.",
			Buckets: []float64{.000001, .000005, .00001, .00005, .0001, .0005, .001, .005, .01, .05, .1, .5},
		}, []string{"module", "export"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "caphost", Subsystem: "guest", Name: "instances",
			Help: "Live guest instances per module, in use or idle in the pool.",
		}, []string{"module", "state"}),
		lifecycle: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "guest", Name: "instance_events_total",
			Help: "Guest instances started and discarded (after a failure, on recycling or on close).",
		}, []string{"module", "event"}),
		logDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "guest", Name: "log_dropped_total",
			Help: "Guest log lines dropped by rate limiting or the per-call bound.",
		}, []string{"module"}),
		generation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "caphost", Subsystem: "guest", Name: "generation",
			Help: "Generation number of the module version currently serving.",
		}, []string{"module"}),
		swaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "guest", Name: "swaps_total",
			Help: "Guest load and hot-swap attempts by result (a failed swap leaves the old generation serving).",
		}, []string{"module", "result"}),
		modules: set(modules),
		classes: map[plugins.Class]bool{},
	}
	for _, c := range GuestClasses() {
		m.classes[c] = true
	}
	for _, c := range []prometheus.Collector{m.calls, m.errors, m.duration, m.instances, m.lifecycle, m.logDropped, m.generation, m.swaps} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, mod := range modules {
		for e := abi.ExportDescribe; e.Valid(); e++ {
			m.calls.WithLabelValues(mod, exportLabel(e))
			m.duration.WithLabelValues(mod, exportLabel(e))
		}
		for _, s := range []string{"in-use", "idle"} {
			m.instances.WithLabelValues(mod, s)
		}
		for _, ev := range []string{"started", "discarded"} {
			m.lifecycle.WithLabelValues(mod, ev)
		}
		m.logDropped.WithLabelValues(mod)
		m.generation.WithLabelValues(mod)
		for _, r := range []string{SwapOK, SwapFailed} {
			m.swaps.WithLabelValues(mod, r)
		}
	}
	return m, nil
}

// exportLabel is the export's wasm name without the caphost_ prefix
// ("describe", "rate_select", ...), or "unknown".
func exportLabel(e abi.Export) string {
	if !e.Valid() {
		return unknownLabel
	}
	return strings.TrimPrefix(e.Name(), "caphost_")
}

func (m *Guests) module(name string) string {
	if m.modules[name] {
		return name
	}
	return unknownLabel
}

func (m *Guests) class(c plugins.Class) string {
	if m.classes[c] {
		return string(c)
	}
	return unknownLabel
}

// CallDone implements plugins.Observer.
func (m *Guests) CallDone(s plugins.CallStats) {
	mod, exp := m.module(s.Module), exportLabel(s.Export)
	m.calls.WithLabelValues(mod, exp).Inc()
	m.duration.WithLabelValues(mod, exp).Observe(s.Duration.Seconds())
	if s.Class != "" {
		m.errors.WithLabelValues(mod, exp, m.class(s.Class)).Inc()
	}
}

// PoolChanged implements plugins.Observer.
func (m *Guests) PoolChanged(module string, inUse, idle int) {
	mod := m.module(module)
	m.instances.WithLabelValues(mod, "in-use").Set(float64(inUse))
	m.instances.WithLabelValues(mod, "idle").Set(float64(idle))
}

// InstanceStarted implements plugins.Observer.
func (m *Guests) InstanceStarted(module string) {
	m.lifecycle.WithLabelValues(m.module(module), "started").Inc()
}

// InstanceDiscarded implements plugins.Observer.
func (m *Guests) InstanceDiscarded(module string) {
	m.lifecycle.WithLabelValues(m.module(module), "discarded").Inc()
}

// GuestEvent implements plugins.Observer. The host configures no countable
// events (plugins.Config.CountEvents is empty), so the engine never reports
// one; ignoring it keeps guest-chosen names out of the label space.
func (m *Guests) GuestEvent(string, string) {}

// LogDropped implements plugins.Observer.
func (m *Guests) LogDropped(module string) {
	m.logDropped.WithLabelValues(m.module(module)).Inc()
}

// Swapped implements plugins.SwapObserver. The failure class is logged by
// the manager; the metric only counts ok/failed so its label set stays
// closed whatever classes the manager reports.
func (m *Guests) Swapped(module string, _ uint64, ok bool, _ string) {
	r := SwapFailed
	if ok {
		r = SwapOK
	}
	m.swaps.WithLabelValues(m.module(module), r).Inc()
}

// ActiveGeneration implements plugins.SwapObserver.
func (m *Guests) ActiveGeneration(module string, generation uint64) {
	m.generation.WithLabelValues(m.module(module)).Set(float64(generation))
}

// RatePolicyReloads counts rebuilds of the rate policy set after a
// rate-policy guest swap (caphost_rate_policy_reloads_total{result}).
type RatePolicyReloads struct {
	c *prometheus.CounterVec
}

// NewRatePolicyReloads creates and registers the counter.
func NewRatePolicyReloads(reg prometheus.Registerer) (*RatePolicyReloads, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caphost", Subsystem: "rate", Name: "policy_reloads_total",
		Help: "Rate policy set rebuilds after a rate-policy guest swap, by result.",
	}, []string{"result"})
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	c.WithLabelValues(SwapOK)
	c.WithLabelValues(SwapFailed)
	return &RatePolicyReloads{c: c}, nil
}

// Record counts one rebuild.
func (r *RatePolicyReloads) Record(ok bool) {
	if ok {
		r.c.WithLabelValues(SwapOK).Inc()
		return
	}
	r.c.WithLabelValues(SwapFailed).Inc()
}
