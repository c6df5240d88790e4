package ratelimit

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// concurrencyMetrics are the concurrency limiter's instruments. Label
// values come from the policy set (id) or closed enums of this package
// (operation, result, category); a subject or an owner token never does.
type concurrencyMetrics struct {
	ops  *prometheus.CounterVec // policy, operation, result, category
	lost *prometheus.CounterVec // policy
}

// Result label values beyond PermitStatus names.
const (
	resultUnavailable   = "unavailable"
	resultIndeterminate = "indeterminate"
)

func newConcurrencyMetrics(reg prometheus.Registerer) (*concurrencyMetrics, error) {
	m := &concurrencyMetrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "rate",
			Name: "concurrency_operations_total",
			Help: "Concurrency-permit operations by policy, operation, result and failure category."},
			[]string{"policy", "operation", "result", "category"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "rate",
			Name: "concurrency_leases_lost_total",
			Help: "In-process concurrency leases lost while active (validity ran out or a renew found the permit gone)."},
			[]string{"policy"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.ops, m.lost} {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("ratelimit: concurrency metrics already registered on this registry (one ConcurrencyLimiter per registry)")
			}
			return nil, err
		}
	}
	return m, nil
}

// record counts one outcome.
func (m *concurrencyMetrics) record(o ConcurrencyOutcome) {
	pol := o.policy
	if pol == "" {
		pol = unknownPolicy
	}
	result := o.status.String()
	switch o.kind {
	case Unavailable:
		result = resultUnavailable
	case Indeterminate:
		result = resultIndeterminate
	}
	cat := string(o.category)
	if cat == "" {
		cat = "none"
	}
	m.ops.WithLabelValues(pol, o.op.String(), result, cat).Inc()
}
