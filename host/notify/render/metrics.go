package render

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome is how a render ended (a closed set: the outcome label).
type Outcome string

// Outcomes, one per error class of this package.
const (
	OutcomeOK             Outcome = "ok"
	OutcomeInvalidRequest Outcome = "invalid_request" // ErrInvalidRequest, ErrInvalidParams, ErrParamsRefused
	OutcomeNotFound       Outcome = "not_found"       // template, version, locale or channel
	OutcomeRenderFailed   Outcome = "render_failed"   // ErrRenderFailed
	OutcomeInvalidOutput  Outcome = "invalid_output"  // ErrInvalidOutput
)

func outcomes() []Outcome {
	return []Outcome{OutcomeOK, OutcomeInvalidRequest, OutcomeNotFound, OutcomeRenderFailed, OutcomeInvalidOutput}
}

// outcomeOf classifies err.
func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrInvalidOutput):
		return OutcomeInvalidOutput
	case errors.Is(err, ErrTemplateNotFound), errors.Is(err, ErrVersionNotFound),
		errors.Is(err, ErrLocaleNotFound), errors.Is(err, ErrChannelNotFound):
		return OutcomeNotFound
	case errors.Is(err, ErrInvalidRequest), errors.Is(err, ErrInvalidParams), errors.Is(err, ErrParamsRefused):
		return OutcomeInvalidRequest
	}
	return OutcomeRenderFailed
}

// metrics are the render stage's instruments. Labels are closed sets of
// this package (channel, outcome, rule, class) and never a template
// parameter, a recipient or a rendered byte; a request for a channel the
// host does not know counts as "other".
type metrics struct {
	renders  *prometheus.CounterVec   // channel, outcome
	seconds  *prometheus.HistogramVec // channel
	rejected *prometheus.CounterVec   // rule
	failures *prometheus.CounterVec   // class
	fallback *prometheus.CounterVec   // channel
}

// failureClasses is the closed set of FailureError classes counted; any
// other class counts as "other".
func failureClasses() []string {
	return []string{"trap", "deadline", "canceled", "memory", "output-too-large", "malformed-output",
		"input-too-large", "host-call-limit", "bad-host-call", "not-declared", "pool-timeout", "closed",
		"unavailable", "swapping", "not-found", "unsupported", "internal", "other"}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		renders: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "notify",
			Name: "renders_total", Help: "Renders by channel and outcome."}, []string{"channel", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "caphost", Subsystem: "notify",
			Name: "render_seconds", Help: "Render latency (validation, guest call, verification) by channel.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 4, 9)}, []string{"channel"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "notify",
			Name: "render_output_rejected_total", Help: "Renderer answers refused by the host, by rule."}, []string{"rule"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "notify",
			Name: "render_failures_total", Help: "Renderer failures by class."}, []string{"class"}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "caphost", Subsystem: "notify",
			Name: "render_locale_fallbacks_total", Help: "Renders served in another locale than asked for, by channel."}, []string{"channel"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.renders, m.seconds, m.rejected, m.failures, m.fallback} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	// Pre-create every series so dashboards see zeros, not gaps.
	for _, ch := range append(Channels(), "other") {
		for _, o := range outcomes() {
			m.renders.WithLabelValues(string(ch), string(o))
		}
		m.seconds.WithLabelValues(string(ch))
		m.fallback.WithLabelValues(string(ch))
	}
	for _, r := range outputRules() {
		m.rejected.WithLabelValues(string(r))
	}
	for _, c := range failureClasses() {
		m.failures.WithLabelValues(c)
	}
	return m, nil
}

func channelLabel(c Channel) string {
	if c.Valid() {
		return string(c)
	}
	return "other"
}

func (m *metrics) observe(c Channel, d time.Duration, res *Result, err error) {
	ch := channelLabel(c)
	m.renders.WithLabelValues(ch, string(outcomeOf(err))).Inc()
	m.seconds.WithLabelValues(ch).Observe(d.Seconds())
	if res != nil && !strings.EqualFold(res.Locale, res.RequestedLocale) {
		m.fallback.WithLabelValues(ch).Inc()
	}
	var oe *OutputError
	var fe *FailureError
	switch {
	case errors.As(err, &oe):
		m.rejected.WithLabelValues(string(oe.Rule)).Inc()
	case errors.As(err, &fe):
		class := "other"
		for _, c := range failureClasses() {
			if c == fe.Class {
				class = c
			}
		}
		m.failures.WithLabelValues(class).Inc()
	}
}
