package fenced

import (
	"errors"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
)

// otherPurpose is the purpose label of every purpose beyond the allowlist
// (or, without one, beyond the first lease.MaxPurposes seen).
const otherPurpose = "other"

// resultError labels an operation that ended in an error (corrupt state,
// the caller's context) rather than an outcome.
const resultError = "error"

// Causes of caphost_fenced_lease_lost_total.
const (
	causeExpired     = "expired"      // the local validity ran out before a renew extended it
	causeLost        = "lost"         // Redis answered that the attempt no longer holds it
	causeFenceBroken = "fence_broken" // the counter no longer matches the token
	causeUnknown     = "unknown"      // a renew or release reply was lost
)

// metrics are the client's instruments. Label values are a purpose of the
// configured allowlist (or one of the first lease.MaxPurposes seen),
// "other", or a closed enum of this package: never a resource, an epoch,
// a counter, an operation id or an owner token.
type metrics struct {
	acquires    *prometheus.CounterVec // purpose, result
	inspects    *prometheus.CounterVec // purpose, result
	renews      *prometheus.CounterVec // purpose, result
	releases    *prometheus.CounterVec // purpose, result
	lost        *prometheus.CounterVec // purpose, cause
	issued      *prometheus.CounterVec // purpose
	regressions *prometheus.CounterVec // purpose, operation

	mu    sync.Mutex
	fixed bool
	seen  map[string]bool
}

func newMetrics(reg prometheus.Registerer, purposes []string) (*metrics, error) {
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "fenced_lease", Name: name, Help: help}, labels)
	}
	m := &metrics{
		acquires: c("acquires_total", "Fenced lease acquires by purpose and outcome (acquired, replayed_same_operation, contended, owner_operation_conflict, fence_counter_missing, epoch_mismatch, registration_conflict, fence_regression, fence_exhausted, unavailable, indeterminate, not_replicated, error).", "purpose", "result"),
		inspects: c("inspects_total", "Fenced lease inspections by purpose and outcome.", "purpose", "result"),
		renews:   c("renews_total", "Fenced lease renews by purpose and outcome (renewed, lost, unavailable, indeterminate, error).", "purpose", "result"),
		releases: c("releases_total", "Fenced lease releases by purpose and outcome (released, already_absent, not_owner, already_released, unavailable, indeterminate, error).", "purpose", "result"),
		lost: c("lost_total", "Fenced leases that stopped being usable without a release, by purpose and cause (expired, lost, fence_broken, unknown).",
			"purpose", "cause"),
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "fence", Name: "issued_total",
			Help: "Fencing tokens issued (fenced acquires that incremented the counter and handed the token out), by purpose."}, []string{"purpose"}),
		regressions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "fence", Name: "regressions_total",
			Help: "FENCE_REGRESSION answers (a counter below a live token: Redis lost increments), by purpose and operation. Alert on any."},
			[]string{"purpose", "operation"}),
		seen: map[string]bool{},
	}
	for _, p := range purposes {
		m.seen[p] = true
		m.fixed = true
	}
	if reg == nil {
		return m, nil
	}
	if err := register(reg, m.acquires, m.inspects, m.renews, m.releases, m.lost, m.issued, m.regressions); err != nil {
		return nil, err
	}
	return m, nil
}

func register(reg prometheus.Registerer, cols ...prometheus.Collector) error {
	for _, col := range cols {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return errors.New("fenced: metrics already registered on this registry (one per registry)")
			}
			return err
		}
	}
	return nil
}

// purpose returns the label of a validated purpose.
func (m *metrics) purpose(p string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[p] {
		return p
	}
	if m.fixed || len(m.seen) >= lease.MaxPurposes {
		return otherPurpose
	}
	m.seen[p] = true
	return p
}

func label(name string, err error) string {
	if err != nil {
		return resultError
	}
	return strings.ToLower(name)
}

func (m *metrics) acquired(p string, k AcquireKind, err error) {
	m.acquires.WithLabelValues(p, label(k.String(), err)).Inc()
	if err != nil {
		return
	}
	switch k {
	case Acquired:
		m.issued.WithLabelValues(p).Inc()
	case Regression:
		m.regressions.WithLabelValues(p, "acquire").Inc()
	}
}

func (m *metrics) inspected(p string, k AcquireKind, err error) {
	m.inspects.WithLabelValues(p, label(k.String(), err)).Inc()
	if err == nil && k == Regression {
		m.regressions.WithLabelValues(p, "inspect").Inc()
	}
}

func (m *metrics) renewed(p string, k lease.RenewKind, regressed bool, err error) {
	m.renews.WithLabelValues(p, label(k.String(), err)).Inc()
	if regressed {
		m.regressions.WithLabelValues(p, "renew").Inc()
	}
}

func (m *metrics) released(p string, k lease.ReleaseKind, regressed bool, err error) {
	m.releases.WithLabelValues(p, label(k.String(), err)).Inc()
	if regressed {
		m.regressions.WithLabelValues(p, "release").Inc()
	}
}

// ended counts a lease that stopped being usable: state Lost (by its
// cause) or Unknown. A release is not a loss.
func (m *metrics) ended(p string, s State, cause error) {
	c := causeLost
	switch {
	case s == Released:
		return
	case s == Unknown:
		c = causeUnknown
	case errors.Is(cause, lease.ErrValidityExpired):
		c = causeExpired
	case errors.Is(cause, ErrFenceBroken):
		c = causeFenceBroken
	}
	m.lost.WithLabelValues(p, c).Inc()
}

// DecisionMetrics counts a protected resource's token decisions
// (host/fence's Guard and Store) as caphost_fence_decisions_total{outcome}:
// admitted, readmitted, stale, epoch_retired, epoch_unregistered,
// not_active, unknown_resource, invalid — every series created up front,
// so the set is bounded and a zero rate is visible. A rising stale rate
// is the alert for paused holders and for a regressed counter alike.
type DecisionMetrics struct {
	decisions *prometheus.CounterVec
}

// decisionOutcomes are the outcomes fence reports, in its order.
func decisionOutcomes() []fence.Outcome {
	return []fence.Outcome{fence.Admitted, fence.Readmitted, fence.Stale, fence.EpochRetired,
		fence.EpochUnregistered, fence.NotActive, fence.UnknownResource, fence.Invalid}
}

// NewDecisionMetrics registers the decision counter on reg (nil: counted,
// not registered). Pass Observer to fence.NewGuard or fence.NewStore with
// fence.WithObserver.
func NewDecisionMetrics(reg prometheus.Registerer) (*DecisionMetrics, error) {
	m := &DecisionMetrics{decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "fence",
		Name: "decisions_total", Help: "Fencing token decisions of the protected resource, by outcome (admitted, readmitted, stale, epoch_retired, epoch_unregistered, not_active, unknown_resource, invalid)."},
		[]string{"outcome"})}
	for _, o := range decisionOutcomes() {
		m.decisions.WithLabelValues(strings.ToLower(o.String()))
	}
	if reg != nil {
		if err := register(reg, m.decisions); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observer returns the fence.Observer that counts decisions. An outcome
// outside fence's list (none today) is counted as invalid, so the label
// set stays closed.
func (m *DecisionMetrics) Observer() fence.Observer {
	known := decisionOutcomes()
	return func(o fence.Outcome) {
		name := "invalid"
		for _, k := range known {
			if k == o {
				name = strings.ToLower(o.String())
				break
			}
		}
		m.decisions.WithLabelValues(name).Inc()
	}
}
