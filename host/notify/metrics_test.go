package notify

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/notify/dispatch"
)

// TestReclaimMetrics: the dispatcher's reclaim figures reach the
// per-shard counters, which exist at zero for every shard from the start.
func TestReclaimMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, []string{"webhook"}, 2)
	require.NoError(t, err)
	var o dispatch.Observer = dispatchObserver{m}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	for _, n := range []string{"caphost_notify_reclaimed_total", "caphost_notify_reclaim_round_trips_total", "caphost_notify_reclaim_laps_total"} {
		assert.Equal(t, 2, series[n], "%s: pre-created for each shard", n)
	}
	o.Reclaimed(1, 3, 2, false)
	o.Reclaimed(1, 0, 0, true)
	o.Reclaimed(0, 1, 1, true)
	for _, c := range []struct {
		v     *prometheus.CounterVec
		shard string
		want  float64
	}{
		{m.reclaimed, "1", 3}, {m.reclaimRTT, "1", 2}, {m.reclaimLaps, "1", 1},
		{m.reclaimed, "0", 1}, {m.reclaimRTT, "0", 1}, {m.reclaimLaps, "0", 1},
	} {
		var got dto.Metric
		require.NoError(t, c.v.WithLabelValues(c.shard).Write(&got))
		assert.Equal(t, c.want, got.GetCounter().GetValue())
	}
}

// TestBrokerRefusedMetric: a transport's connect broker refusals are
// counted by reason; not-declared and address-class, the two to alert
// on, exist at zero from the start.
func TestBrokerRefusedMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, []string{"webhook"}, 1)
	require.NoError(t, err)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var series []string
	for _, mf := range mfs {
		if mf.GetName() != "caphost_notify_transport_broker_refused_total" {
			continue
		}
		for _, c := range mf.GetMetric() {
			for _, l := range c.GetLabel() {
				if l.GetName() == "reason" {
					series = append(series, l.GetValue())
				}
			}
			assert.Zero(t, c.GetCounter().GetValue())
		}
	}
	assert.ElementsMatch(t, []string{"not-declared", "address-class"}, series, "the series before any refusal")
	var got dto.Metric
	o := transportObserver{m}
	o.BrokerRefused("webhook", "not-declared")
	o.BrokerRefused("webhook", "not-declared")
	o.BrokerRefused("webhook", "busy")
	require.NoError(t, m.brokerRefused.WithLabelValues("webhook", "not-declared").Write(&got))
	assert.Equal(t, 2.0, got.GetCounter().GetValue())
	require.NoError(t, m.brokerRefused.WithLabelValues("webhook", "busy").Write(&got))
	assert.Equal(t, 1.0, got.GetCounter().GetValue())
}
