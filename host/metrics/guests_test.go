package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/metrics"
	"github.com/caphost/caphost/plugins"
)

// Compile-time checks: the guest instruments are what the engine and the
// manager report to.
var (
	_ plugins.Observer     = (*metrics.Guests)(nil)
	_ plugins.SwapObserver = (*metrics.Guests)(nil)
)

func TestGuestMetricsBoundedLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	g, err := metrics.NewGuests(reg, []string{"rate-policy"})
	require.NoError(t, err)

	g.CallDone(plugins.CallStats{Module: "rate-policy", Export: abi.ExportRateSelect, Duration: time.Millisecond})
	g.CallDone(plugins.CallStats{Module: "rate-policy", Export: abi.ExportRateSelect, Class: plugins.ClassDeadline})
	g.CallDone(plugins.CallStats{Module: "rate-policy", Export: abi.ExportRateSelect, Class: plugins.Class("guest-invented")})
	g.CallDone(plugins.CallStats{Module: "not-configured", Export: abi.Export(200)})
	g.PoolChanged("rate-policy", 1, 3)
	g.InstanceStarted("rate-policy")
	g.InstanceDiscarded("rate-policy")
	g.LogDropped("rate-policy")
	g.GuestEvent("rate-policy", "guest-chosen-event")
	g.Swapped("rate-policy", 1, true, "")
	g.Swapped("rate-policy", 1, false, "self-test")
	g.ActiveGeneration("rate-policy", 7)

	assert.Equal(t, 3.0, valueOf(t, reg, "caphost_guest_calls_total", map[string]string{"module": "rate-policy", "export": "rate_select"}))
	assert.Equal(t, 1.0, valueOf(t, reg, "caphost_guest_call_errors_total", map[string]string{"class": "deadline"}))
	assert.Equal(t, 1.0, valueOf(t, reg, "caphost_guest_call_errors_total", map[string]string{"class": "unknown"}))
	assert.Equal(t, 1.0, valueOf(t, reg, "caphost_guest_calls_total", map[string]string{"module": "unknown", "export": "unknown"}))
	assert.Equal(t, 3.0, valueOf(t, reg, "caphost_guest_instances", map[string]string{"state": "idle"}))
	assert.Equal(t, 7.0, valueOf(t, reg, "caphost_guest_generation", map[string]string{"module": "rate-policy"}))
	assert.Equal(t, 1.0, valueOf(t, reg, "caphost_guest_swaps_total", map[string]string{"result": "failed"}))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				assert.NotContains(t, []string{"not-configured", "guest-invented", "guest-chosen-event", "self-test"}, lp.GetValue(), mf.GetName())
			}
		}
	}

	r, err := metrics.NewRatePolicyReloads(reg)
	require.NoError(t, err)
	r.Record(true)
	r.Record(false)
	r.Record(false)
	assert.Equal(t, 2.0, valueOf(t, reg, "caphost_rate_policy_reloads_total", map[string]string{"result": "failed"}))
	_, err = metrics.NewGuests(reg, nil)
	assert.Error(t, err, "registering twice on one registry fails")
}

func valueOf(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("%s %v not found", name, labels)
	return 0
}
