package lease

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// otherPurpose is the purpose label of every purpose beyond the allowlist
// (or, without one, beyond the first MaxPurposes seen).
const otherPurpose = "other"

// resultError labels an operation that ended in an error (corrupt state, a
// closed client, the caller's context) rather than an outcome.
const resultError = "error"

// Lost-lease causes (the cause label of caphost_lease_lost_total).
const (
	causeExpired = "expired" // the local validity ran out before a renew extended it
	causeLost    = "lost"    // Redis answered that the attempt no longer holds it
	causeUnknown = "unknown" // a renew or release reply was lost
)

// metrics are the client's instruments. Label values are a purpose of the
// configured allowlist (or one of the first MaxPurposes seen), "other", or a
// closed enum of this package: never a resource, an operation id or an owner
// token.
type metrics struct {
	acquires *prometheus.CounterVec   // purpose, result
	inspects *prometheus.CounterVec   // purpose, result
	renews   *prometheus.CounterVec   // purpose, result
	releases *prometheus.CounterVec   // purpose, result
	lost     *prometheus.CounterVec   // purpose, cause
	wait     *prometheus.HistogramVec // purpose, held

	mu    sync.Mutex
	fixed bool // the allowlist is the label set
	seen  map[string]bool
}

func newMetrics(reg prometheus.Registerer, purposes []string) (*metrics, error) {
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "lease", Name: name, Help: help}, labels)
	}
	m := &metrics{
		acquires: c("acquires_total", "Lease acquires by purpose and outcome (acquired, replayed_same_operation, contended, owner_operation_conflict, unavailable, indeterminate, error).", "purpose", "result"),
		inspects: c("inspects_total", "Lease inspections by purpose and outcome.", "purpose", "result"),
		renews:   c("renews_total", "Lease renews by purpose and outcome (renewed, lost, unavailable, indeterminate, error).", "purpose", "result"),
		releases: c("releases_total", "Lease releases by purpose and outcome (released, already_absent, not_owner, already_released, unavailable, indeterminate, error).", "purpose", "result"),
		lost: c("lost_total", "Leases that stopped being usable without a release, by purpose and cause (expired, lost, unknown).",
			"purpose", "cause"),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "caphost", Subsystem: "lease", Name: "acquire_wait_seconds",
			Help:    "Time an acquire took, retries and backoff of its bounded wait included, by purpose and whether it ended held.",
			Buckets: prometheus.ExponentialBucketsRange(0.0005, 600, 16)}, []string{"purpose", "held"}),
		seen: map[string]bool{},
	}
	for _, p := range purposes {
		m.seen[p] = true
		m.fixed = true
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.acquires, m.inspects, m.renews, m.releases, m.lost, m.wait} {
		if err := reg.Register(col); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("lease: metrics already registered on this registry (one Client per registry)")
			}
			return nil, err
		}
	}
	return m, nil
}

// purpose returns the label of a validated purpose: itself when it is on
// the allowlist (or, without one, among the first MaxPurposes seen),
// otherwise "other".
func (m *metrics) purpose(p string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[p] {
		return p
	}
	if m.fixed || len(m.seen) >= MaxPurposes {
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

func (m *metrics) acquired(purpose string, k AcquireKind, err error, took time.Duration) {
	p := m.purpose(purpose)
	m.acquires.WithLabelValues(p, label(k.String(), err)).Inc()
	held := "false"
	if err == nil && k.Held() {
		held = "true"
	}
	m.wait.WithLabelValues(p, held).Observe(took.Seconds())
}

func (m *metrics) inspected(purpose string, k AcquireKind, err error) {
	m.inspects.WithLabelValues(m.purpose(purpose), label(k.String(), err)).Inc()
}

func (m *metrics) renewed(p string, k RenewKind, err error) {
	m.renews.WithLabelValues(p, label(k.String(), err)).Inc()
}

func (m *metrics) released(p string, k ReleaseKind, err error) {
	m.releases.WithLabelValues(p, label(k.String(), err)).Inc()
}

// lostLabel counts a lease that stopped being usable: state Lost (by its
// cause) or Unknown.
func (m *metrics) lostLabel(p string, s State, cause error) {
	c := causeLost
	switch {
	case s == Unknown:
		c = causeUnknown
	case errors.Is(cause, ErrValidityExpired):
		c = causeExpired
	}
	m.lost.WithLabelValues(p, c).Inc()
}
