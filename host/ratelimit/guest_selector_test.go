package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
)

func TestGuestPolicyDeclsMapping(t *testing.T) {
	d := &abi.Description{RatePolicies: []abi.RatePolicyDecl{
		{ID: "pro.read", Revision: 3, Algorithm: abi.AlgTokenBucket, Limit: 600, WindowMs: 60_000, Burst: 150,
			MaximumCost: 5, Dimensions: []string{"route-class"}, FailureMode: "fail-closed"},
		{ID: "free.write", Revision: 1, Algorithm: abi.AlgTokenBucket, Limit: 10, WindowMs: 60_000, Burst: 2, MaximumCost: 5},
		{ID: "plain_bucket", Revision: 1, Algorithm: abi.AlgTokenBucket, Limit: 7, WindowMs: 1000, MaximumCost: 1},
		{ID: "per-principal", Revision: 2, Algorithm: abi.AlgFixedWindow, Limit: 30, WindowMs: 1000, MaximumCost: 1,
			Dimensions: []string{"principal", "route-class", "route"}, Shadow: true},
		{ID: "uploads", Revision: 1, Algorithm: abi.AlgConcurrency, Limit: 4, WindowMs: 30_000, MaximumCost: 3},
	}}
	got := GuestPolicyDecls(d)
	require.Len(t, got, 5)

	assert.Equal(t, policy.RatePolicyDecl{ID: "pro-read", Revision: "r3", Algorithm: policy.RateTokenBucket,
		Parameters: policy.RateParameters{Capacity: 150, RefillTokens: 600, RefillPeriod: time.Minute},
		MaxCost:    5, Dimensions: []policy.RateDimension{policy.DimGlobal}, FailureMode: policy.FailClosed}, got[0],
		"a guest classification dimension is not keyed: global")
	assert.Equal(t, int64(2), got[1].MaxCost, "maximum_cost is lowered to the bucket capacity")
	assert.Equal(t, int64(7), got[2].Parameters.Capacity, "no burst: capacity is the limit")
	assert.Equal(t, "plain-bucket", got[2].ID)
	assert.Equal(t, []policy.RateDimension{policy.DimPrincipal, policy.DimRoute}, got[3].Dimensions)
	assert.True(t, got[3].Shadow)
	assert.Equal(t, policy.RateParameters{Limit: 30, Window: time.Second}, got[3].Parameters)
	assert.Equal(t, policy.RateParameters{Limit: 4, PermitTTL: 30 * time.Second}, got[4].Parameters)
	assert.Equal(t, int64(1), got[4].MaxCost, "concurrency admits cost 1 only")

	_, err := policy.CompileRatePolicies(got, policy.RateCompileOptions{})
	require.NoError(t, err, "the mapped declarations compile")
	assert.Nil(t, GuestPolicyDecls(nil))
}

func TestCompileWithGuests(t *testing.T) {
	cfg := Config{Provider: ProviderRedis, RedisRole: policy.RoleCoordination, DegradedProvider: DegradedDisabled,
		Policies: []policy.RatePolicyDecl{fixedWindow("orders", 10)}}
	guest := func(id string, rev uint32, limit uint64) []policy.RatePolicyDecl {
		return GuestPolicyDecls(&abi.Description{RatePolicies: []abi.RatePolicyDecl{
			{ID: id, Revision: rev, Algorithm: abi.AlgFixedWindow, Limit: limit, WindowMs: 1000, MaximumCost: 1}}})
	}

	set, err := cfg.CompileWithGuests(map[string][]policy.RatePolicyDecl{"a": guest("free.read", 1, 5)})
	require.NoError(t, err)
	assert.Equal(t, []string{"free-read", "orders"}, set.IDs())

	_, err = cfg.CompileWithGuests(map[string][]policy.RatePolicyDecl{"a": guest("orders", 1, 5)})
	require.ErrorIs(t, err, policy.ErrInvalid)
	assert.Contains(t, err.Error(), "guests.modules.a.rate-policies.orders")
	assert.Contains(t, err.Error(), string(policy.RuleRateDuplicate))

	_, err = cfg.CompileWithGuests(map[string][]policy.RatePolicyDecl{"a": guest("x.y", 1, 5), "b": guest("x_y", 1, 5)})
	require.ErrorIs(t, err, policy.ErrInvalid, "two guest ids mapping to one host id collide")
	assert.Contains(t, err.Error(), "guests.modules.b.rate-policies.x-y")

	_, err = cfg.CompileWithGuests(map[string][]policy.RatePolicyDecl{"a": guest("a..b", 1, 5)})
	require.ErrorIs(t, err, policy.ErrInvalid, "an id that is no host slug fails with its module named")
	assert.Contains(t, err.Error(), "guests.modules.a.rate-policies")

	_, err = cfg.CompileWithGuests(map[string][]policy.RatePolicyDecl{"a": guest("big", 1, 2_000_000_000)})
	require.ErrorIs(t, err, policy.ErrInvalid, "host bounds apply to guest policies")
}

func TestMapSelections(t *testing.T) {
	decls := newDeclTable(&abi.Description{RatePolicies: []abi.RatePolicyDecl{
		{ID: "pro.read", Dimensions: []string{"route-class"}},
		{ID: "per-user", Dimensions: []string{"principal", "tenant"}},
	}})
	got, err := mapSelections([]abi.RateSelection{
		{PolicyID: "pro.read", Dimensions: []string{"read"}, Cost: 5},
		{PolicyID: "per-user", Dimensions: []string{"api-key", ""}, Cost: 1},
	}, decls)
	require.NoError(t, err)
	assert.Equal(t, []Selection{
		{Policy: "pro-read", Cost: 5},
		{Policy: "per-user", Dimensions: map[string]string{"principal": "api-key"}, Cost: 1},
	}, got)

	for name, sels := range map[string][]abi.RateSelection{
		"undeclared":      {{PolicyID: "nope", Cost: 1}},
		"dimension count": {{PolicyID: "per-user", Dimensions: []string{"api-key"}, Cost: 1}},
		"unknown source":  {{PolicyID: "per-user", Dimensions: []string{"raw-ip", ""}, Cost: 1}},
	} {
		_, err := mapSelections(sels, decls)
		assert.Error(t, err, name)
	}
	many := make([]abi.RateSelection, MaxSelections+1)
	for i := range many {
		many[i] = abi.RateSelection{PolicyID: "pro.read", Dimensions: []string{"read"}, Cost: 1}
	}
	_, err = mapSelections(many, decls)
	assert.Error(t, err)
}

// failingRunner stands for a manager whose guest fails (trap, deadline,
// closed): it never reaches fn.
type failingRunner struct{ err error }

func (f failingRunner) Use(context.Context, string, func(plugins.Guest) error) error { return f.err }

// TestGuestFailureNeverAllows: a rate-policy guest failure is a selector
// error, and the middleware answers 503, never the next handler.
func TestGuestFailureNeverAllows(t *testing.T) {
	trap := &plugins.GuestError{Module: "rp", Export: "caphost_rate_select", Class: plugins.ClassTrap}
	sel := NewGuestSelector(failingRunner{err: trap}, "rp")
	assert.Equal(t, []string{"rp"}, sel.Modules())
	_, err := sel.Select(context.Background(), Attributes{Route: "/x", Method: "GET"})
	require.ErrorIs(t, err, ErrGuestSelect)
	require.ErrorIs(t, err, plugins.ClassTrap)

	srv := redistest.StartStandalone(t)
	f := newFixture(t, srv.Addr(), srv, Config{Provider: ProviderRedis, RedisRole: policy.RoleCoordination, DegradedProvider: DegradedDisabled}, nil, fixedWindow("orders", 10))
	reached := false
	h := Middleware(f.l, sel, &HeaderExtractor{}, MiddlewareOptions{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.False(t, reached)
}

func TestCheckSwap(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg := Config{Provider: ProviderRedis, RedisRole: policy.RoleCoordination, DegradedProvider: DegradedDisabled}
	f := newFixture(t, srv.Addr(), srv, cfg, nil, fixedWindow("orders", 10))
	changed := fixedWindow("orders", 20) // same revision r1, new limit
	err := f.l.CheckSwap(compile(t, cfg, changed))
	require.ErrorIs(t, err, ErrRevisionReuse)
	changed.Revision = "r2"
	require.NoError(t, f.l.CheckSwap(compile(t, cfg, changed)))
	p, _ := f.l.Policies().Policy("orders")
	assert.Equal(t, "r1", p.Revision, "CheckSwap swaps nothing")
	assert.Error(t, f.l.CheckSwap(nil))
	assert.False(t, errors.Is(f.l.CheckSwap(compile(t, cfg, changed)), ErrRevisionReuse))
}

// TestMemoBounds: a generation keeps at most MaxMemoizedSelections tuples
// and none larger than MaxMemoizedKeyBytes; storing a tuple twice counts
// once.
func TestMemoBounds(t *testing.T) {
	tb := newDeclTable(&abi.Description{})
	sels := []Selection{{Policy: "p", Cost: 1}}
	for i := range MaxMemoizedSelections {
		tb.remember(Attributes{Route: fmt.Sprintf("/r/%d", i)}, sels)
	}
	tb.remember(Attributes{Route: "/r/0"}, sels)
	assert.Equal(t, int64(MaxMemoizedSelections), tb.memoN.Load())
	tb.remember(Attributes{Route: "/one-too-many"}, sels)
	_, ok := tb.memo.Load(Attributes{Route: "/one-too-many"})
	assert.False(t, ok, "over the bound: not memoized")

	small := newDeclTable(&abi.Description{})
	big := Attributes{Route: strings.Repeat("r", MaxMemoizedKeyBytes+1)}
	small.remember(big, sels)
	_, ok = small.memo.Load(big)
	assert.False(t, ok, "an oversized tuple is not memoized")
	assert.Zero(t, small.memoN.Load())
}
