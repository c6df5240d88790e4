package ratelimit

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/policy"
)

// Decision label values of caphost_rate_decisions_total.
const (
	decisionAllow         = "allow"
	decisionDeny          = "deny"
	decisionUnavailable   = "unavailable"
	decisionIndeterminate = "indeterminate"
)

// unknownPolicy labels requests naming a policy outside the active set, so
// a caller-supplied id never becomes a series.
const unknownPolicy = "unknown"

// metrics are the limiter's instruments. Every label value comes from the
// frozen policy set (id, revision) or a closed enum in this package; a
// subject never does.
type metrics struct {
	decisions     *prometheus.CounterVec // policy, revision, decision
	enforcement   *prometheus.CounterVec // policy, source
	outcomes      *prometheus.CounterVec // policy, kind, reason
	indeterminate *prometheus.CounterVec // policy
	replays       *prometheus.CounterVec // policy
	clockUnsafe   *prometheus.CounterVec // policy
	shadowDeny    *prometheus.CounterVec // policy
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "rate", Name: name, Help: help}, labels)
	}
	m := &metrics{
		decisions:     c("decisions_total", "Rate-limit outcomes by policy, revision and decision.", "policy", "revision", "decision"),
		enforcement:   c("enforcement_total", "Rate decisions by enforcement source.", "policy", "source"),
		outcomes:      c("outcomes_total", "Rate-limit outcomes by kind and failure/degradation reason.", "policy", "kind", "reason"),
		indeterminate: c("indeterminate_total", "Rate evaluations whose result is unknown after a timeout.", "policy"),
		replays:       c("dedup_replays_total", "Rate evaluations answered by an evaluation-id dedup replay.", "policy"),
		clockUnsafe:   c("clock_unsafe_total", "Rate evaluations refused with CLOCK_UNSAFE.", "policy"),
		shadowDeny:    c("shadow_would_deny_total", "Shadow-policy evaluations that would have denied.", "policy"),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.decisions, m.enforcement, m.outcomes, m.indeterminate, m.replays, m.clockUnsafe, m.shadowDeny} {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("ratelimit: metrics already registered on this registry (one Limiter per registry)")
			}
			return nil, err
		}
	}
	return m, nil
}

// record counts one outcome.
func (m *metrics) record(o Outcome) {
	pol, rev := o.policy, o.revision
	if pol == "" {
		pol, rev = unknownPolicy, ""
	}
	var decision string
	switch o.kind {
	case Evaluated, Degraded:
		decision = decisionDeny
		if o.decision.Allowed {
			decision = decisionAllow
		}
		m.enforcement.WithLabelValues(pol, string(o.decision.Source)).Inc()
	case Unavailable:
		decision = decisionUnavailable
	case Indeterminate:
		decision = decisionIndeterminate
		m.indeterminate.WithLabelValues(pol).Inc()
	}
	m.decisions.WithLabelValues(pol, rev, decision).Inc()
	reason := string(o.category)
	if o.kind == Degraded {
		reason = string(o.reason)
	}
	if reason == "" {
		reason = "none"
	}
	m.outcomes.WithLabelValues(pol, o.kind.String(), reason).Inc()
	if o.replayed {
		m.replays.WithLabelValues(pol).Inc()
	}
}

// policyMetrics are one policy revision's counters for the common outcome
// (the global limiter decided), resolved once per swap so that a decision
// costs no label lookup. Resolving them creates the series at zero, which
// is also what a scraper wants.
type policyMetrics struct {
	allow, deny    prometheus.Counter // decisions_total
	global, shadow prometheus.Counter // enforcement_total by source
	evaluated      prometheus.Counter // outcomes_total{kind="evaluated",reason="none"}
	replays        prometheus.Counter
}

func (m *metrics) forPolicy(pol policy.RatePolicy) policyMetrics {
	return policyMetrics{
		allow:     m.decisions.WithLabelValues(pol.ID, pol.Revision, decisionAllow),
		deny:      m.decisions.WithLabelValues(pol.ID, pol.Revision, decisionDeny),
		global:    m.enforcement.WithLabelValues(pol.ID, string(SourceGlobalRedis)),
		shadow:    m.enforcement.WithLabelValues(pol.ID, string(SourceShadow)),
		evaluated: m.outcomes.WithLabelValues(pol.ID, Evaluated.String(), "none"),
		replays:   m.replays.WithLabelValues(pol.ID),
	}
}

// recordFor counts one outcome of cp (nil: unknown policy) exactly as
// record does, through cp's pre-resolved counters when it can.
func (m *metrics) recordFor(o Outcome, cp *compiledPolicy) {
	if cp == nil || o.kind != Evaluated || o.category != CategoryNone || o.policy != cp.pol.ID || o.revision != cp.pol.Revision {
		m.record(o)
		return
	}
	pm := &cp.m
	switch o.decision.Source {
	case SourceGlobalRedis:
		pm.global.Inc()
	case SourceShadow:
		pm.shadow.Inc()
	default:
		m.record(o)
		return
	}
	if o.decision.Allowed {
		pm.allow.Inc()
	} else {
		pm.deny.Inc()
	}
	pm.evaluated.Inc()
	if o.replayed {
		pm.replays.Inc()
	}
}
