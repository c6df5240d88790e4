package notify

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/plugins/transport"
)

// Submit outcomes, the label of caphost_notify_intents_total (a closed
// set).
const (
	SubmitNew           = "submitted"
	SubmitDuplicate     = "duplicate"
	SubmitConflict      = "conflict"
	SubmitInvalid       = "invalid"
	SubmitRenderFailed  = "render-failed"
	SubmitUnavailable   = "unavailable"
	SubmitIndeterminate = "indeterminate"
)

func submitOutcomes() []string {
	return []string{SubmitNew, SubmitDuplicate, SubmitConflict, SubmitInvalid, SubmitRenderFailed,
		SubmitUnavailable, SubmitIndeterminate}
}

// metrics are the capability's instruments (the render stage registers
// its own, caphost_notify_render*). Every label is a closed set or a
// configured name: outcome and state names, transport names from the
// configuration, shard indexes, quarantine reasons. A recipient, a
// parameter or rendered content is never a label.
type metrics struct {
	intents       *prometheus.CounterVec // outcome
	bestEffort    *prometheus.CounterVec // outcome
	dispatched    *prometheus.CounterVec // transport, outcome
	retries       *prometheus.CounterVec // transport
	quarantined   *prometheus.CounterVec // reason
	unopened      prometheus.Counter
	final         *prometheus.CounterVec   // state
	backlog       *prometheus.GaugeVec     // shard, kind
	reclaimed     *prometheus.CounterVec   // shard
	reclaimRTT    *prometheus.CounterVec   // shard
	reclaimLaps   *prometheus.CounterVec   // shard
	restarts      *prometheus.CounterVec   // transport, cause
	launches      *prometheus.CounterVec   // transport, result
	brokerRefused *prometheus.CounterVec   // transport, reason
	callSeconds   *prometheus.HistogramVec // transport, outcome
	sandboxes     *sandboxCollector        // transport, restricted
}

func newMetrics(reg prometheus.Registerer, transports []string, shards int) (*metrics, error) {
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "caphost", Subsystem: "notify", Name: name, Help: help}
	}
	m := &metrics{
		intents:     prometheus.NewCounterVec(opts("intents_total", "Durable submits by outcome."), []string{"outcome"}),
		bestEffort:  prometheus.NewCounterVec(opts("best_effort_total", "Best-effort sends by the outcome of the last transport tried (fail-open: none of them failed the caller)."), []string{"outcome"}),
		dispatched:  prometheus.NewCounterVec(opts("dispatch_total", "Dispatcher transport calls by transport and submission certainty."), []string{"transport", "outcome"}),
		retries:     prometheus.NewCounterVec(opts("retries_total", "Further attempts after a definite rejection (retry or fallback), by the transport of the next attempt."), []string{"transport"}),
		quarantined: prometheus.NewCounterVec(opts("quarantined_total", "Stream entries moved to quarantine, by reason."), []string{"reason"}),
		unopened: prometheus.NewCounter(opts("unopened_total",
			"Stream entries left pending because their plan is sealed with a key version this process does not hold (a key roll-out that has not reached it).")),
		final: prometheus.NewCounterVec(opts("final_total", "Intents this process brought to a final state, by state."), []string{"state"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "caphost", Subsystem: "notify", Name: "backlog",
			Help: "Per shard: entries delivered to the group and not acknowledged (pending), and entries not yet delivered (lag; -1 unknown)."},
			[]string{"shard", "kind"}),
		reclaimed:   prometheus.NewCounterVec(opts("reclaimed_total", "Per shard: pending entries taken over from another consumer (a dead or stalled one) after min-idle."), []string{"shard"}),
		reclaimRTT:  prometheus.NewCounterVec(opts("reclaim_round_trips_total", "Per shard: XAUTOCLAIM calls of the reclaim scans (at most 4 per reclaim page)."), []string{"shard"}),
		reclaimLaps: prometheus.NewCounterVec(opts("reclaim_laps_total", "Per shard: reclaim scans that reached the end of the pending entries list (a lap of the PEL ended; the cursor went back to its start)."), []string{"shard"}),
		restarts:    prometheus.NewCounterVec(opts("transport_restarts_total", "Transport plugin restarts by cause."), []string{"transport", "cause"}),
		launches:    prometheus.NewCounterVec(opts("transport_launches_total", "Transport plugin launches (first and restarts) by result."), []string{"transport", "result"}),
		brokerRefused: prometheus.NewCounterVec(opts("transport_broker_refused_total", brokerRefusedHelp),
			[]string{"transport", "reason"}),
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "caphost", Subsystem: "notify",
			Name: "transport_call_seconds", Help: "Transport plugin call latency by transport and submission certainty.",
			Buckets: prometheus.ExponentialBuckets(250e-6, 4, 10)}, []string{"transport", "outcome"}),
		sandboxes: newSandboxCollector(),
	}
	// Pre-create the closed label sets so dashboards and alerts see zeros.
	for _, o := range submitOutcomes() {
		m.intents.WithLabelValues(o)
	}
	outcomes := []transport.Outcome{transport.Accepted, transport.RejectedDefinite, transport.Indeterminate}
	for _, o := range outcomes {
		m.bestEffort.WithLabelValues(o.String())
	}
	for _, t := range transports {
		for _, o := range outcomes {
			m.dispatched.WithLabelValues(t, o.String())
		}
		m.retries.WithLabelValues(t)
		m.brokerRefused.WithLabelValues(t, "not-declared") // the two to alert on
		m.brokerRefused.WithLabelValues(t, "address-class")
	}
	for _, r := range []string{intent.ReasonDeliveries, intent.ReasonUndecodable} {
		m.quarantined.WithLabelValues(r)
	}
	for _, s := range []intent.State{intent.Delivered, intent.Failed, intent.Quarantined, intent.Indeterminate} {
		m.final.WithLabelValues(s.String())
	}
	for i := range shards {
		m.backlog.WithLabelValues(strconv.Itoa(i), "pending")
		m.backlog.WithLabelValues(strconv.Itoa(i), "lag")
		m.reclaimed.WithLabelValues(strconv.Itoa(i))
		m.reclaimRTT.WithLabelValues(strconv.Itoa(i))
		m.reclaimLaps.WithLabelValues(strconv.Itoa(i))
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.intents, m.bestEffort, m.dispatched, m.retries, m.quarantined,
			m.unopened, m.final, m.backlog, m.reclaimed, m.reclaimRTT, m.reclaimLaps, m.restarts, m.launches,
			m.brokerRefused, m.callSeconds, m.sandboxes} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// dispatchObserver turns the dispatcher's events into metrics.
type dispatchObserver struct{ m *metrics }

func (o dispatchObserver) Final(s intent.State) { o.m.final.WithLabelValues(s.String()).Inc() }
func (o dispatchObserver) Dispatched(t string, out transport.Outcome) {
	o.m.dispatched.WithLabelValues(t, out.String()).Inc()
}
func (o dispatchObserver) Retried(t string)          { o.m.retries.WithLabelValues(t).Inc() }
func (o dispatchObserver) Quarantined(reason string) { o.m.quarantined.WithLabelValues(reason).Inc() }
func (o dispatchObserver) Unopened()                 { o.m.unopened.Inc() }
func (o dispatchObserver) Backlog(shard int, pending, lag int64) {
	s := strconv.Itoa(shard)
	o.m.backlog.WithLabelValues(s, "pending").Set(float64(pending))
	o.m.backlog.WithLabelValues(s, "lag").Set(float64(lag))
}

// Reclaimed counts one reclaim's entries, round trips and finished lap.
func (o dispatchObserver) Reclaimed(shard, entries, trips int, wrapped bool) {
	s := strconv.Itoa(shard)
	o.m.reclaimed.WithLabelValues(s).Add(float64(entries))
	o.m.reclaimRTT.WithLabelValues(s).Add(float64(trips))
	if wrapped {
		o.m.reclaimLaps.WithLabelValues(s).Inc()
	}
}

// transportObserver turns a plugin's lifecycle, calls and connect
// broker refusals into metrics.
type transportObserver struct{ m *metrics }

var _ transport.BrokerObserver = transportObserver{}

func (o transportObserver) Restarting(name string, cause transport.RestartCause, _ time.Duration) {
	o.m.restarts.WithLabelValues(name, string(cause)).Inc()
}

func (o transportObserver) Launched(name string, err error) {
	res := "ok"
	if err != nil {
		res = "error"
	}
	o.m.launches.WithLabelValues(name, res).Inc()
}

func (o transportObserver) Delivered(name string, out transport.Outcome, took time.Duration) {
	o.m.callSeconds.WithLabelValues(name, out.String()).Observe(took.Seconds())
}

// BrokerRefused counts a dial request the plugin's connect broker
// refused (transport.BrokerObserver).
func (o transportObserver) BrokerRefused(name, reason string) {
	o.m.brokerRefused.WithLabelValues(name, reason).Inc()
}

// sandboxCollector reports, at each scrape, the sandbox every launched
// transport plugin's current process reported (transport.Plugin.
// Sandboxed): caphost_notify_transport_sandbox{transport,restricted},
// the Landlock ABI it confined itself with, 0 when none; restricted is
// transport.SandboxLevel.Restricted, a closed set
// ("fs,tcp,sockets,hosts,paths", "none"…). It is read live, so a
// restarted plugin's report shows.
type sandboxCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	plugins map[string]*transport.Plugin
}

func newSandboxCollector() *sandboxCollector {
	return &sandboxCollector{plugins: map[string]*transport.Plugin{}, desc: prometheus.NewDesc(
		"caphost_notify_transport_sandbox",
		"Landlock ABI each transport plugin confined itself with (0: none), and what it restricts (fs, tcp, udp, sockets, hosts, paths).",
		[]string{"transport", "restricted"}, nil)}
}

// add reports p under its transport name from now on.
func (c *sandboxCollector) add(name string, p *transport.Plugin) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.plugins[name] = p
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, p := range c.plugins {
		l := p.Sandboxed()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(l.LandlockABI), name, l.Restricted())
	}
}

const brokerRefusedHelp = "Dial requests a transport plugin's connect broker refused, by reason (not-declared: a target the plugin " +
	"did not declare at configure; address-class: a declared name resolved to another class of address than at start, " +
	"as DNS rebinding does)."
