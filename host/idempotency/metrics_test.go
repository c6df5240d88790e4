package idempotency

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/internal/clocktest"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/programs"
)

// TestMetricsCountOutcomes: claims, executions by kind, takeovers,
// renewals, response bytes and sidecar steps are counted on the injected
// registry, labelled by route only; a second executor on one registry is
// refused.
func TestMetricsCountOutcomes(t *testing.T) {
	srv := redistest.StartStandalone(t)
	reg := prometheus.NewRegistry()
	e, err := New(newRuntime(t, srv.Addr()), Config{}, WithRegisterer(reg))
	require.NoError(t, err)
	ctx := ctxT(t)
	ok := func(context.Context) Result { return Committed([]byte("0123456789")) }

	ex, err := e.Execute(ctx, request(t, "m1", "{}"), ok)
	require.NoError(t, err)
	require.Equal(t, Executed, ex.Kind)
	ex, err = e.Execute(ctx, request(t, "m1", "{}"), ok)
	require.NoError(t, err)
	require.Equal(t, Replayed, ex.Kind)
	ex, err = e.Execute(ctx, request(t, "m2", "{}"), func(context.Context) Result { return RetryableNoEffect(nil) })
	require.NoError(t, err)
	require.Equal(t, FailedRetryable, ex.Kind)
	ex, err = e.Execute(ctx, request(t, "m2", "{}"), ok)
	require.NoError(t, err)
	require.Equal(t, Executed, ex.Kind)
	assert.Equal(t, int64(2), ex.Attempt, "the retry took the record over")

	r := "create-payment"
	assert.Equal(t, 2.0, value(t, e.m.claims.WithLabelValues(r, "acquired")))
	assert.Equal(t, 1.0, value(t, e.m.claims.WithLabelValues(r, "completed_replay")))
	assert.Equal(t, 1.0, value(t, e.m.claims.WithLabelValues(r, "taken_over_claimed")))
	assert.Equal(t, 1.0, value(t, e.m.takeovers.WithLabelValues(r)))
	assert.Equal(t, 2.0, value(t, e.m.executions.WithLabelValues(r, "executed")))
	assert.Equal(t, 1.0, value(t, e.m.executions.WithLabelValues(r, "replayed")))
	assert.Equal(t, 1.0, value(t, e.m.executions.WithLabelValues(r, "failed_retryable")))

	a, err := owner.NewAttempt("side")
	require.NoError(t, err)
	s := Scope{Route: r, Principal: []byte("tenant-7"), Key: "m3"}
	c, err := e.Claim(ctx, Request{Scope: s, Fingerprint: FingerprintOf("POST", "/", "", nil), Attempt: a})
	require.NoError(t, err)
	require.True(t, c.Owned)
	st, err := e.Start(ctx, s, a, c.Attempt)
	require.NoError(t, err)
	require.Equal(t, "STARTED", st.Status)
	rn, err := e.Renew(ctx, s, a, c.Attempt)
	require.NoError(t, err)
	require.Equal(t, "RENEWED", rn.Status)
	_, err = e.Complete(ctx, s, a, c.Attempt, []byte("abc"))
	require.NoError(t, err)
	assert.Equal(t, 1.0, value(t, e.m.renewals.WithLabelValues(r, "renewed")))
	assert.Equal(t, 1.0, value(t, e.m.steps.WithLabelValues(r, "complete", "completed")))
	assert.Equal(t, 1.0, value(t, e.m.steps.WithLabelValues(r, "claim", "acquired")))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var bytesCount uint64
	for _, mf := range mfs {
		if mf.GetName() == "caphost_idempotency_response_bytes" {
			for _, m := range mf.GetMetric() {
				bytesCount += m.GetHistogram().GetSampleCount()
			}
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				assert.NotContains(t, []string{"tenant-7", "m1", "m2", "m3"}, l.GetValue(), "never a principal or key")
			}
		}
	}
	assert.Equal(t, uint64(4), bytesCount, "three stored responses and one replay")

	_, err = New(newRuntime(t, srv.Addr()), Config{}, WithRegisterer(reg))
	assert.ErrorContains(t, err, "already registered")
}

// TestLostRepliesAreCounted: a reply lost through a stalling proxy (the
// program reaches Redis, its reply never comes back) increments
// indeterminate_total for the step that lost it: Execute's claim, start
// and watchdog renew, and the stateless renew and release. Each step is
// measured as the counter's change around it.
func TestLostRepliesAreCounted(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	cfg := redistest.ExampleConfig(p.Addr(), policy.RoleCoordination)
	dep := cfg.Deployments["main"]
	dep.Timeouts.Command, dep.Timeouts.Connect, dep.Timeouts.Acquire = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	cfg.Deployments["main"] = dep
	e, err := New(newRuntimeFrom(t, cfg), Config{})
	require.NoError(t, err)
	clk := newFakeClock()
	clk.install(e)
	ctx := ctxT(t)
	const r = "create-payment"
	ok := func(context.Context) Result { return Committed([]byte("ok")) }
	never := func(context.Context) Result { t.Error("must not run"); return Committed(nil) }
	// warm runs one request with the proxy passing, so that the step under
	// test is sent on a live pooled connection (and the scripts are loaded).
	warms := 0
	warm := func() {
		t.Helper()
		p.Passthrough()
		warms++
		ex, err := e.Execute(ctx, request(t, fmt.Sprintf("warm-%d", warms), "{}"), ok)
		require.NoError(t, err)
		require.Equal(t, Executed, ex.Kind)
	}
	delta := func(step string, do func()) float64 {
		t.Helper()
		before := value(t, e.m.indeterminate.WithLabelValues(r, step))
		do()
		return value(t, e.m.indeterminate.WithLabelValues(r, step)) - before
	}

	warm()
	assert.Equal(t, 1.0, delta("claim", func() {
		p.Stall()
		ex, err := e.Execute(ctx, request(t, "lost-claim", "{}"), never)
		require.NoError(t, err)
		assert.Equal(t, Indeterminate, ex.Kind)
	}), "claim")

	warm()
	assert.Equal(t, 1.0, delta("start", func() {
		e.beforeStart = p.Stall
		defer func() { e.beforeStart = nil }()
		ex, err := e.Execute(ctx, request(t, "lost-start", "{}"), never)
		require.NoError(t, err)
		assert.Equal(t, Indeterminate, ex.Kind)
	}), "start")

	warm()
	renewed := make(chan error, 1)
	e.afterRenew = func(_ programs.IdemRenewStatus, err error) { renewed <- err }
	assert.Equal(t, 1.0, delta("renew", func() {
		ex, err := e.Execute(ctx, request(t, "lost-renew", "{}"), func(context.Context) Result {
			p.Stall()
			clk.Advance(DefaultLease / 3) // the watchdog's renew is due
			assert.Error(t, clocktest.Recv(t, renewed), "the renew's reply is lost")
			p.Passthrough()
			return Committed([]byte("ok"))
		})
		require.NoError(t, err)
		assert.Equal(t, Executed, ex.Kind, "a lost renew reply inside the validity does not stop the action")
	}), "watchdog renew")
	e.afterRenew = nil

	// The stateless steps, on an attempt claimed and started by hand.
	warm()
	a, err := owner.NewAttempt("stateless")
	require.NoError(t, err)
	s := Scope{Route: r, Principal: []byte("tenant-7"), Key: "stateless"}
	c, err := e.Claim(ctx, Request{Scope: s, Fingerprint: FingerprintOf("POST", "/", "", nil), Attempt: a})
	require.NoError(t, err)
	require.True(t, c.Owned)
	assert.Equal(t, 1.0, delta("renew", func() {
		p.Stall()
		res, err := e.Renew(ctx, s, a, c.Attempt)
		require.NoError(t, err)
		assert.Equal(t, StatusIndeterminate, res.Status)
	}), "stateless renew")
	warm()
	assert.Equal(t, 1.0, delta("release", func() {
		p.Stall()
		res, err := e.Release(ctx, s, a, c.Attempt)
		require.NoError(t, err)
		assert.Equal(t, StatusIndeterminate, res.Status)
	}), "stateless release")
}

// TestMetricLabelsAreBounded: without an allowlist the first MaxRoutes
// routes get their own label and the rest share "other"; with one, every
// route is on it and nothing else becomes a label.
func TestMetricLabelsAreBounded(t *testing.T) {
	srv := redistest.StartStandalone(t)
	e := newExecutor(t, srv.Addr(), Config{})
	ctx := ctxT(t)
	for i := range MaxRoutes + 10 {
		r := request(t, "k", "{}")
		r.Scope.Route = fmt.Sprintf("route-%d", i)
		_, err := e.Execute(ctx, r, func(context.Context) Result { return Committed(nil) })
		require.NoError(t, err)
	}
	assert.Equal(t, MaxRoutes+1, series(e.m.executions), "64 routes and other")
	assert.Equal(t, 10.0, value(t, e.m.executions.WithLabelValues(otherRoute, "executed")))

	allow := newExecutor(t, srv.Addr(), Config{Routes: []string{"create-payment"}})
	assert.Equal(t, "create-payment", allow.m.route("create-payment"))
	assert.Equal(t, otherRoute, allow.m.route("unlisted"))
	r := request(t, "k2", "{}")
	r.Scope.Route = "unlisted"
	_, err := allow.Execute(ctx, r, func(context.Context) Result { t.Error("must not run"); return Committed(nil) })
	assert.ErrorIs(t, err, ErrUnknownRoute)
	assert.ErrorIs(t, err, ErrInvalidRequest)
	assert.Zero(t, series(allow.m.executions), "a refused request is no execution and makes no label")
}

// value reads one counter.
func value(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	return d.GetCounter().GetValue()
}

// series counts the series a collector holds.
func series(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 1024)
	c.Collect(ch)
	close(ch)
	return len(ch)
}
