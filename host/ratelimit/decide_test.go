package ratelimit

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

func routeWindow(id, rev string, limit int64) policy.RatePolicyDecl {
	return policy.RatePolicyDecl{ID: id, Revision: rev, Algorithm: policy.RateFixedWindow,
		Parameters: policy.RateParameters{Limit: limit, Window: policy.RateMaxWindow}, Dimensions: []policy.RateDimension{policy.DimRoute}}
}

func withRevision(d policy.RatePolicyDecl, rev string, limit int64) policy.RatePolicyDecl {
	d.Revision, d.Parameters.Limit = rev, limit
	return d
}

// used reads a fixed-window state's counter (0: no state).
func (f *fixture) used(t *testing.T, pol policy.RatePolicy, sub Subject) int64 {
	t.Helper()
	n, err := windowUsed(ctxT(t), f.srv.Admin(), f.stateKeyOf(t, pol, sub))
	if err != nil {
		require.ErrorContains(t, err, "redis: nil")
		return 0
	}
	return n
}

func policyOf(t *testing.T, set *policy.RatePolicySet, id string) policy.RatePolicy {
	t.Helper()
	p, ok := set.Policy(id)
	require.True(t, ok, id)
	return p
}

// TestDecideOneSnapshotWhenSelectorSwaps: a selector that swaps the policy
// set while it selects. The query is evaluated wholly under one set (the
// one active after selection): both levels of the hierarchy consume their
// new revision's state and neither touches the old one. A swap that drops
// a selected policy makes the query ErrBadSelection, with nothing consumed
// on any level.
func TestDecideOneSnapshotWhenSelectorSwaps(t *testing.T) {
	s := redistest.StartStandalone(t)
	cfg := Config{Provider: ProviderRedis}
	byTenant, byRoute := fixedWindow("tenant", 10), routeWindow("route", "r1", 10)
	f := newFixture(t, s.Addr(), s, cfg, nil, byTenant, byRoute)
	oldSet := f.l.Policies()
	newSet := compile(t, cfg, withRevision(byTenant, "r2", 4), withRevision(byRoute, "r2", 6))
	both := []Selection{{Policy: "tenant", Cost: 1}, {Policy: "route", Cost: 1}}
	swapping := func(to *policy.RatePolicySet) Selector {
		return selectorFunc(func(context.Context, Attributes) ([]Selection, error) {
			require.NoError(t, f.l.Swap(to))
			return both, nil
		})
	}
	q := Query{Attributes: Attributes{Route: "/orders"}, Identity: Identity{Tenant: "acme"}}
	tenantSub, routeSub := tenant("acme"), Subject{policy.DimRoute: []byte("/orders")}

	o, err := f.l.Decide(ctxT(t), swapping(newSet), q)
	require.NoError(t, err)
	require.True(t, o.Allowed())
	d, _ := o.Decision()
	assert.Equal(t, "tenant", d.Policy)
	assert.Equal(t, "r2", d.Revision)
	assert.Equal(t, int64(4), d.Limit, "the new set's limits")
	assert.Equal(t, int64(3), d.Remaining)
	assert.Equal(t, int64(1), f.used(t, policyOf(t, newSet, "tenant"), tenantSub))
	assert.Equal(t, int64(1), f.used(t, policyOf(t, newSet, "route"), routeSub))
	assert.Zero(t, f.used(t, policyOf(t, oldSet, "tenant"), tenantSub), "the old set is never touched")
	assert.Zero(t, f.used(t, policyOf(t, oldSet, "route"), routeSub), "the old set is never touched")

	// The swap drops "route": the snapshot after selection lacks it, so the
	// query fails before anything is evaluated, on either set.
	dropped := compile(t, cfg, withRevision(byTenant, "r3", 4))
	_, err = f.l.Decide(ctxT(t), swapping(dropped), q)
	require.ErrorIs(t, err, ErrBadSelection)
	assert.Zero(t, f.used(t, policyOf(t, dropped, "tenant"), tenantSub))
	assert.Equal(t, int64(1), f.used(t, policyOf(t, newSet, "tenant"), tenantSub))
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_decisions_total", map[string]string{"policy": "unknown", "decision": "unavailable"}))
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_decisions_total", map[string]string{"policy": "tenant", "revision": "r2", "decision": "allow"}),
		"each evaluated policy is counted once")
}

func TestDecideQueries(t *testing.T) {
	s := redistest.StartStandalone(t)
	cfg := Config{Provider: ProviderRedis}
	dedup := policy.RateDedup{Enabled: true, TTL: 30 * time.Second, MaxEntries: 128}
	byTenant, byRoute := fixedWindow("tenant", 10), routeWindow("route", "r1", 10)
	byTenant.Dedup, byRoute.Dedup = dedup, dedup
	byPrincipal := fixedWindow("principal", 10)
	byPrincipal.Dimensions = []policy.RateDimension{policy.DimPrincipal}
	byTenant.MaxCost = 3
	f := newFixture(t, s.Addr(), s, cfg, nil, byTenant, byRoute, byPrincipal)
	set := f.l.Policies()
	static := func(sels ...Selection) Selector {
		return selectorFunc(func(context.Context, Attributes) ([]Selection, error) { return sels, nil })
	}
	hier := static(Selection{Policy: "tenant", Cost: 1}, Selection{Policy: "route", Cost: 1})
	q := Query{Attributes: Attributes{Route: "/orders"}, Identity: Identity{Tenant: "acme"}, EvaluationID: "ev-1"}
	tenantSub, routeSub := tenant("acme"), Subject{policy.DimRoute: []byte("/orders")}

	// A hierarchy with an evaluation id: each level dedups on its derived id.
	o, err := f.l.Decide(ctxT(t), hier, q)
	require.NoError(t, err)
	assert.True(t, o.Allowed())
	assert.False(t, o.Replayed())
	o, err = f.l.Decide(ctxT(t), hier, q)
	require.NoError(t, err)
	assert.True(t, o.Replayed(), "the retried query is a replay on every level")
	assert.Equal(t, int64(1), f.used(t, policyOf(t, set, "tenant"), tenantSub))
	assert.Equal(t, int64(1), f.used(t, policyOf(t, set, "route"), routeSub))

	// Query.Route fills the route dimension; the selector saw Attributes.
	var seen Attributes
	spy := selectorFunc(func(_ context.Context, a Attributes) ([]Selection, error) {
		seen = a
		return []Selection{{Policy: "route", Cost: 1}}, nil
	})
	_, err = f.l.Decide(ctxT(t), spy, Query{Attributes: Attributes{Route: "/orders"}, Route: "/orders/42"})
	require.NoError(t, err)
	assert.Equal(t, "/orders", seen.Route)
	assert.Equal(t, int64(1), f.used(t, policyOf(t, set, "route"), Subject{policy.DimRoute: []byte("/orders/42")}))

	// An explicit policy needs no selector; its cost defaults to 1.
	o, err = f.l.Decide(ctxT(t), nil, Query{Policy: "tenant", Identity: Identity{Tenant: "acme"}, Cost: 2})
	require.NoError(t, err)
	assert.Equal(t, int64(3), f.used(t, policyOf(t, set, "tenant"), tenantSub))
	assert.Equal(t, "tenant", o.Policy())

	// Hits scales the selector's cost; over the max cost (3) it is an
	// invalid request for that policy, consuming nothing, and an overflow
	// of cost × hits saturates into the same refusal.
	o, err = f.l.Decide(ctxT(t), static(Selection{Policy: "tenant", Cost: 1}), Query{Identity: Identity{Tenant: "hits"}, Hits: 3})
	require.NoError(t, err)
	assert.True(t, o.Allowed())
	assert.Equal(t, int64(3), f.used(t, policyOf(t, set, "tenant"), tenant("hits")))
	for _, h := range []int64{4, math.MaxInt64} {
		o, err = f.l.Decide(ctxT(t), static(Selection{Policy: "tenant", Cost: 2}), Query{Identity: Identity{Tenant: "hits-over"}, Hits: h})
		require.NoError(t, err)
		assert.False(t, o.Allowed(), "hits %d", h)
		assert.Equal(t, Unavailable, o.Kind(), "hits %d", h)
	}
	assert.Equal(t, int64(0), f.used(t, policyOf(t, set, "tenant"), tenant("hits-over")))
	assert.Equal(t, int64(math.MaxInt64), scaledCost(2, math.MaxInt64/2+1))

	o, err = f.l.Decide(ctxT(t), static(), q)
	require.NoError(t, err)
	assert.Equal(t, NotLimited, o.Kind())
	assert.True(t, o.Allowed())
	_, ok := o.Decision()
	assert.False(t, ok)

	guestErr := errors.New("guest trapped: secret detail")
	cases := []struct {
		name string
		sel  Selector
		q    Query
		want error
	}{
		{"no selector", nil, q, ErrNoSelector},
		{"unknown explicit policy", nil, Query{Policy: "nope"}, ErrUnknownPolicy},
		{"selector failure", selectorFunc(func(context.Context, Attributes) ([]Selection, error) { return nil, guestErr }), q, ErrSelector},
		{"refused by the selector", selectorFunc(func(context.Context, Attributes) ([]Selection, error) {
			return nil, ErrSelectionRefused
		}), q, ErrSelectionRefused},
		{"unknown selected policy", static(Selection{Policy: "nope", Cost: 1}), q, ErrBadSelection},
		{"too many selections", static(make([]Selection, MaxSelections+1)...), q, ErrBadSelection},
		{"unknown source", static(Selection{Policy: "tenant", Cost: 1, Dimensions: map[string]string{"tenant": "ssn"}}), q, ErrBadSelection},
		{"missing subject value", hier, Query{Attributes: Attributes{Route: "/orders"}}, ErrNoSource},
		{"missing on a later level", static(Selection{Policy: "tenant", Cost: 1}, Selection{Policy: "principal", Cost: 1}), q, ErrNoSource},
		{"subject value too long", nil, Query{Policy: "tenant", Identity: Identity{Tenant: strings.Repeat("t", MaxSubjectValueBytes+1)}}, ErrInvalidQuery},
		{"cost with a selector", hier, Query{Identity: Identity{Tenant: "acme"}, Cost: 2}, ErrInvalidQuery},
		{"negative cost", nil, Query{Policy: "tenant", Identity: Identity{Tenant: "acme"}, Cost: -1}, ErrInvalidQuery},
		{"negative hits", hier, Query{Attributes: Attributes{Route: "/orders"}, Identity: Identity{Tenant: "acme"}, Hits: -1}, ErrInvalidQuery},
		{"hits with an explicit policy", nil, Query{Policy: "tenant", Identity: Identity{Tenant: "acme"}, Hits: 2}, ErrInvalidQuery},
		{"evaluation id too long", nil, Query{Policy: "tenant", Identity: Identity{Tenant: "acme"}, EvaluationID: strings.Repeat("e", MaxEvaluationIDBytes+1)}, ErrInvalidQuery},
		{"derived id too long", hier, Query{Attributes: Attributes{Route: "/orders"}, Identity: Identity{Tenant: "acme"}, EvaluationID: strings.Repeat("e", MaxEvaluationIDBytes-1)}, ErrInvalidQuery},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := f.l.Decide(ctxT(t), c.sel, c.q)
			require.ErrorIs(t, err, c.want)
			assert.False(t, o.Allowed(), "an error is never an allow")
			assert.NotContains(t, err.Error(), "acme")
		})
	}
	assert.Equal(t, int64(3), f.used(t, policyOf(t, set, "tenant"), tenantSub), "no failed query consumed anything")
	var se *SourceError
	_, err = f.l.Decide(ctxT(t), hier, Query{Attributes: Attributes{Route: "/orders"}})
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "tenant", se.Dimension)
	var qe *QueryError
	_, err = f.l.Decide(ctxT(t), hier, Query{Identity: Identity{Tenant: "acme"}, Cost: 2})
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, "cost", qe.Field)
	_, err = f.l.Decide(ctxT(t), cases[2].sel, q)
	require.ErrorIs(t, err, guestErr, "the selector's error is kept for errors.Is")
	assert.Equal(t, 0.0, counter(t, f.reg, "caphost_rate_decisions_total", map[string]string{"policy": "nope"}), "a caller's id never becomes a series")
	assert.NotContains(t, Query{Identity: Identity{Tenant: "acme"}, Route: "/r"}.String(), "acme")
}

// TestDecideDeadline: the query's deadline bounds selection too.
func TestDecideDeadline(t *testing.T) {
	s := redistest.StartStandalone(t)
	f := newFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, fixedWindow("tenant", 10))
	var got time.Time
	sel := selectorFunc(func(ctx context.Context, _ Attributes) ([]Selection, error) {
		got, _ = ctx.Deadline()
		return []Selection{{Policy: "tenant", Cost: 1}}, nil
	})
	dl := time.Now().Add(time.Minute)
	o, err := f.l.Decide(context.Background(), sel, Query{Identity: Identity{Tenant: "acme"}, Deadline: dl})
	require.NoError(t, err)
	assert.True(t, o.Allowed())
	assert.True(t, got.Equal(dl), "the selector ran under the query's deadline")
	o, err = f.l.Decide(context.Background(), sel, Query{Identity: Identity{Tenant: "acme"}, Deadline: time.Now().Add(-time.Second)})
	require.NoError(t, err)
	assert.Equal(t, Unavailable, o.Kind())
	assert.Equal(t, CategoryDeadline, o.Category())
}
