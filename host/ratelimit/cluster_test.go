package ratelimit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestClusterExactAdmissionAndHierarchy proves on a 3+3 Cluster that the
// state and dedup keys of one subject share a slot (one program call), that
// admission stays exact, and that a hierarchy spanning slots evaluates
// sequentially.
func TestClusterExactAdmissionAndHierarchy(t *testing.T) {
	cl := redistest.StartCluster(t)
	rt := newRuntimeTopo(t, &policy.Cluster{Seeds: cl.Seeds()})
	cfg := Config{Provider: ProviderRedis}
	route := policy.RatePolicyDecl{ID: "route", Revision: "r1", Algorithm: policy.RateFixedWindow,
		Parameters: policy.RateParameters{Limit: 1, Window: policy.RateMaxWindow}, Dimensions: []policy.RateDimension{policy.DimRoute}}
	set := compile(t, cfg, dedupWindow("fw", 100), route)
	l, err := New(rt, cfg, set, WithRegisterer(prometheus.NewRegistry()))
	require.NoError(t, err)
	f := &fixture{rt: rt, l: l}
	assert.Equal(t, int64(100), exactAdmission(t, f, "fw"))

	k := f.stateKey(t, "fw", tenant("acme"))
	used, err := windowUsed(ctxT(t), cl.Admin(), k)
	require.NoError(t, err)
	assert.Equal(t, int64(100), used)

	reqs := []Request{req("fw", "other"), {Policy: "route", Subject: Subject{policy.DimRoute: []byte("/x")}, Cost: 1}}
	require.True(t, l.EvaluateAll(ctxT(t), reqs).Allowed())
	o := l.EvaluateAll(ctxT(t), reqs)
	assert.False(t, o.Allowed())
	assert.Equal(t, "route", o.Policy())
}
