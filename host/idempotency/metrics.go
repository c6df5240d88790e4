package idempotency

import (
	"errors"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// otherRoute is the route label of every route beyond the allowlist (or,
// without one, beyond the first MaxRoutes seen).
const otherRoute = "other"

// resultError labels a step that ended in an error (corrupt state, the
// caller's context) rather than an outcome.
const resultError = "error"

// WithRegisterer registers the executor's metrics on reg (nil: none
// registered; the executor still counts). One Executor per registry.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(e *Executor) { e.reg = reg }
}

// metrics are the executor's instruments. Label values are a route of the
// configured allowlist (or one of the first MaxRoutes seen), "other", or a
// closed enum of this package: never a key, a principal, a fingerprint,
// an operation id or an owner token.
type metrics struct {
	claims        *prometheus.CounterVec // route, result
	executions    *prometheus.CounterVec // route, kind
	takeovers     *prometheus.CounterVec // route
	indeterminate *prometheus.CounterVec // route, step
	renewals      *prometheus.CounterVec // route, result
	steps         *prometheus.CounterVec // route, step, result (the stateless API)
	respBytes     *prometheus.HistogramVec

	mu    sync.Mutex
	fixed bool
	seen  map[string]bool
}

func newMetrics(reg prometheus.Registerer, routes []string) (*metrics, error) {
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "idempotency", Name: name, Help: help}, labels)
	}
	m := &metrics{
		claims: c("claims_total", "Idempotency claims by route and outcome (acquired, replayed_acquire, taken_over_claimed, completed_replay, in_progress, recovery_required, fingerprint_mismatch, owner_operation_conflict, policy_mismatch, unavailable, indeterminate, error).",
			"route", "result"),
		executions: c("executions_total", "Executions (Execute and the middleware) by route and kind (executed, replayed, in_progress, fingerprint_mismatch, recovery_required, policy_mismatch, failed_retryable, abandoned, conflict, unavailable, indeterminate, error).",
			"route", "kind"),
		takeovers: c("takeovers_total", "Claims that took over a FAILED_RETRYABLE record or a CLAIMED one whose lease expired, by route.", "route"),
		indeterminate: c("indeterminate_total", "Steps whose reply was lost (claim, start, complete, fail, release, renew; a step that is repeated once after a lost reply counts when the repeat's is lost too), by route and step.",
			"route", "step"),
		renewals: c("renewals_total", "Processing lease renewals by route and outcome (renewed, already_renewed_same_operation, not_owner, not_in_progress, absent, unavailable, indeterminate, error).",
			"route", "result"),
		steps: c("sidecar_steps_total", "Stateless steps (the sidecar API) by route, step and outcome.", "route", "step", "result"),
		respBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "caphost", Subsystem: "idempotency", Name: "response_bytes",
			Help:    "Size of responses stored (source=complete) and replayed (source=replay), by route.",
			Buckets: prometheus.ExponentialBuckets(64, 4, 9)}, []string{"route", "source"}),
		seen: map[string]bool{},
	}
	for _, r := range routes {
		m.seen[r] = true
		m.fixed = true
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.claims, m.executions, m.takeovers, m.indeterminate, m.renewals, m.steps, m.respBytes} {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("idempotency: metrics already registered on this registry (one Executor per registry)")
			}
			return nil, err
		}
	}
	return m, nil
}

// route returns the label of a validated route.
func (m *metrics) route(r string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[r] {
		return r
	}
	if m.fixed || len(m.seen) >= MaxRoutes {
		return otherRoute
	}
	m.seen[r] = true
	return r
}

func lower(name string) string { return strings.ToLower(name) }

func (m *metrics) claimed(route, status string) {
	r := m.route(route)
	m.claims.WithLabelValues(r, lower(status)).Inc()
	switch status {
	case "TAKEN_OVER_CLAIMED":
		m.takeovers.WithLabelValues(r).Inc()
	case "INDETERMINATE":
		m.indeterminate.WithLabelValues(r, "claim").Inc()
	}
}

func (m *metrics) executed(route string, ex Execution, err error) {
	k := resultError
	if err == nil {
		k = lower(ex.Kind.String())
	}
	m.executions.WithLabelValues(m.route(route), k).Inc()
}

func (m *metrics) lost(route, step string) {
	m.indeterminate.WithLabelValues(m.route(route), step).Inc()
}

func (m *metrics) renewed(route, result string) {
	m.renewals.WithLabelValues(m.route(route), lower(result)).Inc()
}

func (m *metrics) step(route, step, result string) {
	m.steps.WithLabelValues(m.route(route), step, lower(result)).Inc()
}

func (m *metrics) bytes(route, source string, n int) {
	m.respBytes.WithLabelValues(m.route(route), source).Observe(float64(n))
}
