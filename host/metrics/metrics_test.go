package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// The Prometheus instruments are what the runtime reports redirects to: a
// compile-time check that the optional interface is met, and a closed label
// set however the runtime's strings change.
var (
	_ runtime.RedirectObserver = (*Redis)(nil)
	_ runtime.SentinelObserver = (*Redis)(nil)
)

func TestSentinelDiscoveriesWithClosedLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewRedis(reg, []string{"coord"}, nil)
	require.NoError(t, err)
	for _, r := range []string{runtime.SentinelDiscovered, runtime.SentinelSwitched, runtime.SentinelUnchanged,
		runtime.SentinelNoQuorum, runtime.SentinelUnconfirmed} {
		m.SentinelDiscovery("coord", r)
		assert.Equal(t, 1.0, value(t, m.sentinel.WithLabelValues("coord", r)), r)
	}
	m.SentinelDiscovery("coord", "10.0.0.1:6379")
	assert.Equal(t, 1.0, value(t, m.sentinel.WithLabelValues("coord", unknownLabel)), "an unexpected result never becomes a series")
}

func TestClusterRedirectCountsWithClosedLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewRedis(reg, []string{"main"}, []string{"GET"})
	require.NoError(t, err)
	l := policy.Lanes()[0]

	m.ClusterRedirect("main", l, runtime.RedirectMoved, true)
	m.ClusterRedirect("main", l, runtime.RedirectMoved, true)
	m.ClusterRedirect("main", l, runtime.RedirectAsk, false)
	m.ClusterRedirect("elsewhere", l, "rogue-kind", true)

	assert.Equal(t, 2.0, value(t, m.redirects.WithLabelValues("main", string(l), "moved", "followed")))
	assert.Equal(t, 1.0, value(t, m.redirects.WithLabelValues("main", string(l), "ask", "not_followed")))
	assert.Equal(t, 1.0, value(t, m.redirects.WithLabelValues(unknownLabel, string(l), unknownLabel, "followed")),
		"an unknown deployment or kind never becomes a series of its own")
	assert.Equal(t, 0.0, value(t, m.redirects.WithLabelValues("main", string(l), "ask", "followed")),
		"pre-created at zero")

	// Every lane × kind × result exists before any redirect, plus the one
	// unknown series above.
	fams, err := reg.Gather()
	require.NoError(t, err)
	n := 0
	for _, f := range fams {
		if f.GetName() == "caphost_redis_cluster_redirects_total" {
			n = len(f.GetMetric())
		}
	}
	assert.Equal(t, len(policy.Lanes())*2*2+1, n)
}

func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var out dto.Metric
	require.NoError(t, c.Write(&out))
	return out.GetCounter().GetValue()
}
