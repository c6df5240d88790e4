package lease

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/clocktest"
)

// TestMetricsCountOutcomes: every acquire, renew and release outcome is
// counted under its purpose, a handle that leaves ACTIVE without a release
// is counted lost by cause, and the wait histogram observes every acquire.
func TestMetricsCountOutcomes(t *testing.T) {
	srv := startRedis(t)
	clk := clocktest.New()
	reg := prometheus.NewRegistry()
	c, err := New(newRuntime(t, srv.Addr()), Config{Purposes: []string{"nightly-cleanup"}}, WithRegisterer(reg), WithClock(clk.Now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	_, err = New(newRuntime(t, srv.Addr()), Config{}, WithRegisterer(reg))
	assert.ErrorContains(t, err, "already registered", "one client per registry")
	ctx := ctxT(t)
	const p = "nightly-cleanup"

	a, err := c.Acquire(ctx, req(attempt(t, "a"), 10*time.Second))
	require.NoError(t, err)
	_, err = c.Acquire(ctx, req(attempt(t, "b"), 10*time.Second))
	require.NoError(t, err)
	_, err = c.Acquire(ctx, Request{Purpose: "other-job", Resource: []byte("x"), TTL: time.Second, Attempt: attempt(t, "c")})
	require.ErrorIs(t, err, ErrInvalidRequest, "not on the allowlist")
	kind, err := a.Handle.Renew(ctx)
	require.NoError(t, err)
	require.Equal(t, Renewed, kind)
	clk.Advance(time.Minute)
	assert.Equal(t, Lost, a.Handle.State(), "the validity ran out")
	rel, err := a.Handle.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReleaseDone, rel, "still ours on the server: freed early")

	b, err := c.Acquire(ctx, req(attempt(t, "d"), 10*time.Second))
	require.NoError(t, err)
	require.NoError(t, srv.Admin().Del(ctx, b.Handle.key.Redis()).Err())
	kind, err = b.Handle.Renew(ctx)
	require.NoError(t, err)
	require.Equal(t, RenewLost, kind)

	acq := func(result string) float64 { return value(t, c.m.acquires.WithLabelValues(p, result)) }
	assert.Equal(t, 2.0, acq("acquired"))
	assert.Equal(t, 1.0, acq("contended"))
	assert.Equal(t, 1.0, value(t, c.m.renews.WithLabelValues(p, "renewed")))
	assert.Equal(t, 1.0, value(t, c.m.renews.WithLabelValues(p, "lost")))
	assert.Equal(t, 1.0, value(t, c.m.releases.WithLabelValues(p, "released")))
	assert.Equal(t, 1.0, value(t, c.m.lost.WithLabelValues(p, "expired")))
	assert.Equal(t, 1.0, value(t, c.m.lost.WithLabelValues(p, "lost")))
	assert.Equal(t, 2, series(c.m.acquires), "an invalid request is refused before any outcome")

	assert.Equal(t, 2, gathered(t, reg, "caphost_lease_acquire_wait_seconds"), "held and not held")
	for _, name := range []string{"caphost_lease_acquires_total", "caphost_lease_renews_total", "caphost_lease_releases_total",
		"caphost_lease_lost_total", "caphost_lease_acquire_wait_seconds"} {
		assert.Positive(t, gathered(t, reg, name), "%s is registered on the injected registry", name)
	}
}

// TestMetricLabelsAreBounded: without an allowlist the first MaxPurposes
// purposes get their own label and the rest share "other"; no label ever
// holds a resource, an operation id or an owner token.
func TestMetricLabelsAreBounded(t *testing.T) {
	srv := startRedis(t)
	reg := prometheus.NewRegistry()
	c, err := New(newRuntime(t, srv.Addr()), Config{}, WithRegisterer(reg))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := ctxT(t)
	var secrets []string
	for i := range MaxPurposes + 10 {
		a := attempt(t, fmt.Sprintf("operation-%d", i))
		res := fmt.Sprintf("resource-%d", i)
		secrets = append(secrets, a.Owner().Reveal(), a.OperationID(), res)
		got, err := c.Acquire(ctx, Request{Purpose: fmt.Sprintf("job-%d", i), Resource: []byte(res), TTL: time.Second, Attempt: a})
		require.NoError(t, err)
		require.Equal(t, Acquired, got.Kind)
		_, err = got.Handle.Release(ctx)
		require.NoError(t, err)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	purposes := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				for _, s := range secrets {
					assert.NotContains(t, l.GetValue(), s, "%s{%s}", mf.GetName(), l.GetName())
				}
				if l.GetName() == "purpose" {
					purposes[l.GetValue()] = true
				}
				assert.NotContains(t, strings.ToLower(l.GetName()), "owner")
			}
		}
	}
	assert.Len(t, purposes, MaxPurposes+1, "the first MaxPurposes and other")
	assert.True(t, purposes[otherPurpose])
	assert.Equal(t, 10.0, value(t, c.m.acquires.WithLabelValues(otherPurpose, "acquired")))
}
