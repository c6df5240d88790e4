package envoyrls_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/internal/redistest"
)

// Month windows (30 days, aligned to the epoch) keep every count of these
// tests in one window.
const (
	monthly2 = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 2}\n"
	monthly5 = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 5}\n"
	withJ    = monthly2 + "  - key: j\n    rate_limit: {unit: month, requests_per_unit: 1}\n"
)

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
}

// reloads reads caphost_envoy_rls_reloads_total{result}.
func (f *fixture) reloads(t *testing.T, result string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "caphost_envoy_rls_reloads_total" {
			for _, m := range mf.Metric {
				if m.Label[0].GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no reload series %q", result)
	return 0
}

// TestReloadFiles walks a configuration through reloads: a bad file is
// refused with its problems and the old mapping keeps serving (and
// counting); an unchanged rule keeps its counter across a reload that
// adds another; a changed limit starts fresh; a removed rule stops
// limiting. Every outcome is counted.
func TestReloadFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "d.yaml")
	writeFile(t, file, monthly2)
	cfg, err := rlsconfig.LoadFiles([]string{file})
	require.NoError(t, err)
	f := serve(t, redistest.StartStandalone(t), envoyrls.Options{}, cfg)
	const month = rlsv3.RateLimitResponse_RateLimit_MONTH

	status1(t, f.call(t, "d", 0, desc("k", "x")), 0, rlsv3.RateLimitResponse_OK, 2, month, 1)
	status1(t, f.call(t, "d", 0, desc("k", "x")), 0, rlsv3.RateLimitResponse_OK, 2, month, 0)

	// A bad file: refused, located, counted; the old rule still answers.
	writeFile(t, file, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n")
	err = f.svc.ReloadFiles([]string{file})
	require.ErrorIs(t, err, rlsconfig.ErrInvalid)
	assert.Contains(t, err.Error(), "d.yaml:4: descriptors[0].rate_limit.unit: invalid unit")
	assert.Equal(t, 1.0, f.reloads(t, "failed"))
	status1(t, f.call(t, "d", 0, desc("k", "x")), 0, rlsv3.RateLimitResponse_OVER_LIMIT, 2, month, 0)
	// So is a missing file, and a rule caphost cannot serve.
	require.Error(t, f.svc.ReloadFiles([]string{filepath.Join(dir, "missing.yaml")}))
	writeFile(t, file, monthly2+"    caphost: {failure_mode: local-emergency}\n")
	err = f.svc.ReloadFiles([]string{file})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "local-emergency needs degraded-provider")
	assert.Equal(t, 3.0, f.reloads(t, "failed"))
	assert.Zero(t, f.reloads(t, "ok"))

	// Adding a rule keeps k's counter (same place, same behaviour).
	writeFile(t, file, withJ)
	require.NoError(t, f.svc.ReloadFiles([]string{file}))
	assert.Equal(t, 1.0, f.reloads(t, "ok"))
	status1(t, f.call(t, "d", 0, desc("k", "x")), 0, rlsv3.RateLimitResponse_OVER_LIMIT, 2, month, 0)
	status1(t, f.call(t, "d", 0, desc("j", "y")), 0, rlsv3.RateLimitResponse_OK, 1, month, 0)

	// A new limit is a new revision: fresh state.
	writeFile(t, file, monthly5)
	require.NoError(t, f.svc.ReloadFiles([]string{file}))
	status1(t, f.call(t, "d", 0, desc("k", "x")), 0, rlsv3.RateLimitResponse_OK, 5, month, 4)
	r := f.call(t, "d", 0, desc("j", "y"))
	assert.Nil(t, r.Statuses[0].CurrentLimit, "a removed rule no longer limits")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode)

	// Reloading what is served changes nothing.
	require.NoError(t, f.svc.ReloadFiles([]string{file}))
	status1(t, f.call(t, "d", 0, desc("k", "x")), 0, rlsv3.RateLimitResponse_OK, 5, month, 3)
	assert.Equal(t, 3.0, f.reloads(t, "ok"))
}

// TestReloadUnderLoad swaps between two configurations while clients
// call: every answer comes from one of them, whole (its limit and an
// allowed code), and no call fails. Run under -race it also checks the
// swap's memory ordering.
func TestReloadUnderLoad(t *testing.T) {
	a, err := rlsconfig.Parse("a.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 1000000}\n"))
	require.NoError(t, err)
	b, err := rlsconfig.Parse("b.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 2000000}\n    caphost: {algorithm: sliding-counter}\n"))
	require.NoError(t, err)
	ca, err := rlsconfig.New(a)
	require.NoError(t, err)
	cb, err := rlsconfig.New(b)
	require.NoError(t, err)
	f := serve(t, redistest.StartStandalone(t), envoyrls.Options{}, ca)

	const clients, calls, swaps = 4, 50, 20
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range clients {
		wg.Go(func() {
			<-start
			for range calls {
				resp, err := f.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("k", "x")}})
				if !assert.NoError(t, err) {
					return
				}
				st := resp.Statuses[0]
				assert.Equal(t, rlsv3.RateLimitResponse_OK, st.Code)
				if assert.NotNil(t, st.CurrentLimit) {
					assert.Contains(t, []uint32{1000000, 2000000}, st.CurrentLimit.RequestsPerUnit)
				}
			}
		})
	}
	close(start)
	for i := range swaps {
		c := ca
		if i%2 == 0 {
			c = cb
		}
		require.NoError(t, f.svc.Reload(c))
	}
	wg.Wait()
	assert.Equal(t, float64(swaps), f.reloads(t, "ok"))
	assert.Zero(t, f.count(t, "unavailable"), "no request lost its policy to a swap")
}
