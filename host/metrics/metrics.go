// Package metrics owns caphost's Prometheus instruments. Every label has a
// closed, pre-registered value set — deployment ids from configuration, lanes,
// catalog command names, certainty outcomes, guard reasons — so that no key,
// subject, tenant, token or session id can ever become a series.
//
// The runtime reports through the runtime.Observer interface; this package is
// its Prometheus implementation. Nothing here registers with the global
// default registry: the host passes its own Registerer.
package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
)

// unknownLabel replaces any label value outside its pre-registered set.
const unknownLabel = "unknown"

// pipelineLabel is the runtime's command label for multi-command pipelines
// (runtime.PipelineLabel; not imported to keep this package's view of the
// runtime to its Observer contract).
const pipelineLabel = "pipeline"

// Redis holds the runtime's instruments and implements runtime.Observer.
type Redis struct {
	commands   *prometheus.CounterVec   // deployment, lane, command, outcome
	duration   *prometheus.HistogramVec // deployment, lane
	rejections *prometheus.CounterVec   // lane, command, reason
	replyBytes *prometheus.HistogramVec // lane
	inFlight   *prometheus.GaugeVec     // deployment, lane
	slotMap    *prometheus.CounterVec   // deployment, lane
	redirects  *prometheus.CounterVec   // deployment, lane, kind, result
	sentinel   *prometheus.CounterVec   // deployment, result

	deployments map[string]bool
	commandSet  map[string]bool
}

// NewRedis creates and registers the runtime instruments. deployments and
// commands are the only label values accepted for those labels (anything else
// is reported as "unknown"); every combination is pre-created so dashboards
// see zeros instead of gaps.
func NewRedis(reg prometheus.Registerer, deployments, commands []string) (*Redis, error) {
	m := &Redis{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "redis", Name: "commands_total",
			Help: "Redis commands completed, by certainty outcome.",
		}, []string{"deployment", "lane", "command", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "caphost", Subsystem: "redis", Name: "command_duration_seconds",
			Help:    "Latency of Redis commands including admission wait.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"deployment", "lane"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "guard", Name: "rejections_total",
			Help: "Commands the guard refused before sending (or whose reply exceeded the budget).",
		}, []string{"lane", "command", "reason"}),
		replyBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "caphost", Subsystem: "redis", Name: "reply_bytes",
			Help:    "Size of decoded Redis replies.",
			Buckets: prometheus.ExponentialBuckets(16, 4, 10),
		}, []string{"lane"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "caphost", Subsystem: "lane", Name: "in_flight",
			Help: "Commands admitted and not yet finished, per lane.",
		}, []string{"deployment", "lane"}),
		slotMap: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "redis", Name: "slot_map_refreshes_total",
			Help: "Cluster slot-map refreshes requested after a topology-class failure (at most one per lane every 250 ms).",
		}, []string{"deployment", "lane"}),
		redirects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "redis", Name: "cluster_redirects_total",
			Help: "Cluster MOVED/ASK replies, by whether the runtime followed them once (result followed) or could not (result not_followed: nothing was resent).",
		}, []string{"deployment", "lane", "kind", "result"}),
		sentinel: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caphost", Subsystem: "redis", Name: "sentinel_discoveries_total",
			Help: "Sentinel discoveries of a deployment's primary, by result (discovered, switched, unchanged, no-quorum, unconfirmed).",
		}, []string{"deployment", "result"}),
		deployments: set(deployments),
		commandSet:  set(append(slices.Clone(commands), pipelineLabel)),
	}
	for _, c := range []prometheus.Collector{m.commands, m.duration, m.rejections, m.replyBytes, m.inFlight, m.slotMap, m.redirects, m.sentinel} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.precreate(deployments, commands)
	return m, nil
}

func set(vs []string) map[string]bool {
	s := make(map[string]bool, len(vs))
	for _, v := range vs {
		s[v] = true
	}
	return s
}

func (m *Redis) precreate(deployments, commands []string) {
	for _, d := range deployments {
		for _, r := range sentinelResults() {
			m.sentinel.WithLabelValues(d, r)
		}
	}
	for _, l := range policy.Lanes() {
		m.replyBytes.WithLabelValues(string(l))
		for _, d := range deployments {
			m.inFlight.WithLabelValues(d, string(l))
			m.duration.WithLabelValues(d, string(l))
			m.slotMap.WithLabelValues(d, string(l))
			for _, k := range []string{redirectMoved, redirectAsk} {
				for _, r := range []string{redirectFollowed, redirectNotFollowed} {
					m.redirects.WithLabelValues(d, string(l), k, r)
				}
			}
		}
	}
}

func (m *Redis) deployment(d string) string {
	if m.deployments[d] {
		return d
	}
	return unknownLabel
}

func (m *Redis) command(c string) string {
	if m.commandSet[c] {
		return c
	}
	return unknownLabel
}

func lane(l policy.Lane) string {
	if l.Valid() {
		return string(l)
	}
	return unknownLabel
}

// Admitted implements guard.Observer. Admission itself is counted through
// CommandDone; nothing to do here.
func (m *Redis) Admitted(policy.Lane, string) {}

// Rejected implements guard.Observer.
func (m *Redis) Rejected(l policy.Lane, command string, reason guard.Reason) {
	m.rejections.WithLabelValues(lane(l), m.command(command), reasonLabel(reason)).Inc()
}

// ReplyBytes implements guard.Observer.
func (m *Redis) ReplyBytes(l policy.Lane, n int) {
	m.replyBytes.WithLabelValues(lane(l)).Observe(float64(n))
}

// CommandDone implements runtime.Observer.
func (m *Redis) CommandDone(dep string, l policy.Lane, command string, o certainty.Outcome, d time.Duration) {
	dl := m.deployment(dep)
	m.commands.WithLabelValues(dl, lane(l), m.command(command), o.String()).Inc()
	m.duration.WithLabelValues(dl, lane(l)).Observe(d.Seconds())
}

// InFlight implements runtime.Observer.
func (m *Redis) InFlight(dep string, l policy.Lane, n int) {
	m.inFlight.WithLabelValues(m.deployment(dep), lane(l)).Set(float64(n))
}

// SlotMapRefresh implements runtime.Observer.
func (m *Redis) SlotMapRefresh(dep string, l policy.Lane) {
	m.slotMap.WithLabelValues(m.deployment(dep), lane(l)).Inc()
}

// Redirect kinds as the runtime reports them (runtime.RedirectMoved and
// runtime.RedirectAsk), and the result label of a redirect.
const (
	redirectMoved = "moved"
	redirectAsk   = "ask"

	redirectFollowed    = "followed"
	redirectNotFollowed = "not_followed"
)

// ClusterRedirect implements runtime.RedirectObserver.
func (m *Redis) ClusterRedirect(dep string, l policy.Lane, kind string, followed bool) {
	if kind != redirectMoved && kind != redirectAsk {
		kind = unknownLabel
	}
	r := redirectNotFollowed
	if followed {
		r = redirectFollowed
	}
	m.redirects.WithLabelValues(m.deployment(dep), lane(l), kind, r).Inc()
}

// sentinelResults are the runtime's Sentinel discovery results
// (runtime.SentinelDiscovered and the rest), the closed label set.
func sentinelResults() []string {
	return []string{"discovered", "switched", "unchanged", "no-quorum", "unconfirmed"}
}

// SentinelDiscovery implements runtime.SentinelObserver.
func (m *Redis) SentinelDiscovery(dep, result string) {
	if !slices.Contains(sentinelResults(), result) {
		result = unknownLabel
	}
	m.sentinel.WithLabelValues(m.deployment(dep), result).Inc()
}

func reasonLabel(r guard.Reason) string {
	if slices.Contains(guard.Reasons(), r) {
		return string(r)
	}
	return unknownLabel
}
