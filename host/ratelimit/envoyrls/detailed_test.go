package envoyrls_test

import (
	"log/slog"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/internal/redistest"
)

const detailedYAML = `domain: api
descriptors:
  - key: path
    value: "/users/*"
    detailed_metric: true
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: remote_address
    value: 50.0.0.5
    detailed_metric: true
    rate_limit: {unit: month, requests_per_unit: 0}
  - key: remote_address
    detailed_metric: true
    rate_limit: {unit: month, requests_per_unit: 5}
  - key: tenant
    rate_limit: {unit: month, requests_per_unit: 5}
`

func parseConfig(t *testing.T, file, body string) *rlsconfig.Config {
	t.Helper()
	d, err := rlsconfig.Parse(file, []byte(body))
	require.NoError(t, err)
	c, err := rlsconfig.New(d)
	require.NoError(t, err)
	return c
}

// ruleSeries reads caphost_envoy_rls_rule_descriptors_total as
// rule -> result -> count.
func (f *fixture) ruleSeries(t *testing.T) map[string]map[string]float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "caphost_envoy_rls_rule_descriptors_total" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if out[labels["rule"]] == nil {
				out[labels["rule"]] = map[string]float64{}
			}
			out[labels["rule"]][labels["result"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestDetailedMetric: rules with detailed_metric: true count their
// outcomes under their configuration key path — configured values and
// wildcard patterns, never a request's values — and the others do not.
// The load logs which rule each policy id and label stands for; a reload
// that drops a rule's detailed_metric drops its series.
func TestDetailedMetric(t *testing.T) {
	var logs logtest.Buffer
	srv := redistest.StartStandalone(t)
	f := serve(t, srv, envoyrls.Options{Log: slog.New(slog.NewJSONHandler(&logs, nil))}, parseConfig(t, "api.yaml", detailedYAML))

	// Each answer below needs no shared window: fresh counters, or a
	// limit of 0.
	for _, c := range []struct {
		d    []string
		want rlsv3.RateLimitResponse_Code
	}{
		{[]string{"path", "/users/1"}, rlsv3.RateLimitResponse_OK},
		{[]string{"path", "/users/2"}, rlsv3.RateLimitResponse_OK},
		{[]string{"remote_address", "50.0.0.5"}, rlsv3.RateLimitResponse_OVER_LIMIT},
		{[]string{"remote_address", "192.0.2.1"}, rlsv3.RateLimitResponse_OK},
		{[]string{"tenant", "t1"}, rlsv3.RateLimitResponse_OK},
	} {
		assert.Equal(t, c.want, f.call(t, "api", 0, desc(c.d...)).OverallCode, c.d)
	}
	assert.Equal(t, map[string]map[string]float64{
		`api path="/users/*"`:           {"ok": 2},
		`api remote_address="50.0.0.5"`: {"over_limit": 1},
		`api remote_address`:            {"ok": 1},
	}, f.ruleSeries(t))

	for _, w := range []string{
		`"msg":"envoy rate-limit rule","policy":"envoy-`,
		`"rule":"api path=\"/users/*\"","where":"api.yaml:3: descriptors[0]","detailed_metric":true`,
		`"rule":"api tenant","where":"api.yaml:14: descriptors[3]","detailed_metric":false`,
	} {
		assert.Contains(t, logs.String(), w)
	}
	// A limit of 0 needs no policy; its label is still mapped.
	assert.Contains(t, logs.String(), `"policy":"","rule":"api remote_address=\"50.0.0.5\"","where":"api.yaml:7: descriptors[1]"`)
	assert.NotContains(t, logs.String(), "/users/1")

	require.NoError(t, f.svc.Reload(parseConfig(t, "api.yaml", `domain: api
descriptors:
  - key: path
    value: "/users/*"
    rate_limit: {unit: month, requests_per_unit: 1}
  - key: remote_address
    detailed_metric: true
    rate_limit: {unit: month, requests_per_unit: 5}
`)))
	assert.Equal(t, map[string]map[string]float64{`api remote_address`: {"ok": 1}}, f.ruleSeries(t),
		"the labels are the served configuration's")
}
