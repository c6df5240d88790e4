package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// metric reads counters as /metrics exposes them: labels sorted, several
// series summed, other metrics sharing a name prefix ignored.
func TestMetric(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`# HELP caphost_cache_l1_events_total L1 events.
# TYPE caphost_cache_l1_events_total counter
caphost_cache_l1_events_total{event="hit",region="products"} 7
caphost_cache_l1_events_total{event="hit",region="search-results"} 100
caphost_cache_l1_events_total{event="miss",region="products"} 3
caphost_cache_l1_events_total_extra{event="hit",region="products"} 1000
caphost_cache_hints_total{direction="in",result="received"} 2
caphost_cache_hints_total{direction="out",result="received"} 5
`))
	}))
	defer srv.Close()
	r := &replica{name: "A", base: srv.URL}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		want []string
		sum  float64
	}{
		{"caphost_cache_l1_events_total", []string{`region="products"`, `event="hit"`}, 7},
		{"caphost_cache_l1_events_total", []string{`event="hit"`}, 107},
		{"caphost_cache_l1_events_total", nil, 110},
		{"caphost_cache_hints_total", []string{`direction="in"`, `result="received"`}, 2},
		{"caphost_cache_hints_total", []string{`result="received"`}, 7},
		{"caphost_cache_lookups_total", nil, 0},
	} {
		got, err := metric(ctx, srv.Client(), r, c.name, c.want...)
		require.NoError(t, err)
		assert.Equal(t, c.sum, got, "%s %v", c.name, c.want)
	}
}

func TestPercentile(t *testing.T) {
	ds := make([]time.Duration, 32)
	for i := range ds {
		ds[i] = time.Duration(32-i) * time.Millisecond // unsorted
	}
	assert.Equal(t, 16*time.Millisecond, percentile(ds, 50))
	assert.Equal(t, 32*time.Millisecond, percentile(ds, 99), "nearest rank: p99 of 32 samples is the largest")
	assert.Equal(t, 32*time.Millisecond, percentile(ds, 100))
	assert.Equal(t, time.Millisecond, percentile(ds, 1))
	assert.Equal(t, time.Duration(0), percentile(nil, 50))
	assert.Equal(t, "1.8ms", ms(1800*time.Microsecond))
	assert.Equal(t, "142ms", ms(141600*time.Microsecond))
}
