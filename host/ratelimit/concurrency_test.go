package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// permits is a per-tenant concurrency policy.
func permits(id string, limit int64, ttl time.Duration) policy.RatePolicyDecl {
	return policy.RatePolicyDecl{ID: id, Revision: "r1", Algorithm: policy.RateConcurrency,
		Parameters: policy.RateParameters{Limit: limit, PermitTTL: ttl}, Dimensions: []policy.RateDimension{policy.DimTenant}}
}

type concFixture struct {
	*fixture
	c *ConcurrencyLimiter
}

func newConcFixture(t testing.TB, addr string, srv *redistest.Server, cfg Config, opts []Option, decls ...policy.RatePolicyDecl) *concFixture {
	t.Helper()
	return newConcFixtureWith(t, addr, srv, cfg, nil, opts, decls...)
}

// newConcFixtureWith is newConcFixture with the limiter's options
// (limOpts) besides the concurrency limiter's (opts).
func newConcFixtureWith(t testing.TB, addr string, srv *redistest.Server, cfg Config, limOpts, opts []Option, decls ...policy.RatePolicyDecl) *concFixture {
	t.Helper()
	f := newFixture(t, addr, srv, cfg, limOpts, decls...)
	c, err := NewConcurrencyLimiter(f.l, append([]Option{WithRegisterer(f.reg)}, opts...)...)
	require.NoError(t, err)
	return &concFixture{fixture: f, c: c}
}

func acq(pol, subject string) ConcurrencyRequest {
	return ConcurrencyRequest{Policy: pol, Subject: tenant(subject), Deadline: time.Now().Add(3 * time.Second)}
}

// permitKey rebuilds the permit set key of (policy revision, subject).
func (f *concFixture) permitKey(t testing.TB, id, rev string, sub Subject) keys.Key {
	t.Helper()
	pol, ok := f.l.Policies().Policy(id)
	require.True(t, ok)
	pol.Revision = rev
	k, err := f.rt.Keys().Build(keys.Spec{Capability: keys.CapRate, Region: pol.KeyRegion(), KeyVersion: keyVersion,
		Kind: concurrencyKind, Parts: subjectParts(pol, sub)})
	require.NoError(t, err)
	return k
}

// owners lists the live owners stored in a permit set (sentinel excluded).
func (f *concFixture) owners(t testing.TB, k keys.Key) []string {
	t.Helper()
	got, err := f.srv.Admin().ZRangeByScore(ctxT(t), k.Redis(), &redis.ZRangeBy{Min: "(0", Max: "+inf"}).Result()
	require.NoError(t, err)
	return got
}

// TestConcurrencyExactAdmission: the limit is exact. Held permits prove it
// without depending on scheduling: `limit` acquires are admitted one by one
// (Redis counts each), the next one is contended, a release admits exactly
// one more, and the set is full again. Racing rounds prove it under
// concurrency: 32 goroutines acquire at once while nobody releases, so
// exactly `limit` win and every other one is contended at the limit. The
// free-running stress proves the bound with releases racing acquires: a
// holder counts itself in between the acquire's return and the release's
// send (the window in which Redis certainly holds its permit), and the
// count never exceeds the limit. Every attempt makes a fixed number of
// tries, so nothing depends on how many fit in a wall-clock window.
// Afterwards the permit set is empty and the metrics count every attempt.
func TestConcurrencyExactAdmission(t *testing.T) {
	s := redistest.StartStandalone(t)
	// Batched (the default: the limiter's Batcher pipelines concurrent
	// permit calls) and one call per round trip.
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"batched", nil}, {"unbatched", []Option{WithBatching(0, 0)}}} {
		t.Run(mode.name, func(t *testing.T) {
			concurrencyExactAdmission(t, s, mode.opts)
		})
	}
}

// concurrencyExactAdmission is TestConcurrencyExactAdmission with the
// limiter options limOpts.
func concurrencyExactAdmission(t *testing.T, s *redistest.Server, limOpts []Option) {
	const limit = 5
	f := newConcFixtureWith(t, s.Addr(), s, Config{Provider: ProviderRedis}, limOpts, nil, permits("jobs", limit, 30*time.Second))
	ctx := ctxT(t)
	k := f.permitKey(t, "jobs", "r1", tenant("acme"))
	var acquired, contended int64 // decided outcomes, checked against the metrics at the end
	release := func(l *Lease) {
		t.Helper()
		st, _ := l.Release(ctx).Status()
		assert.Equal(t, PermitReleased, st)
	}
	full := func(msg string) {
		t.Helper()
		o := f.c.Acquire(ctx, acq("jobs", "acme"))
		st, ok := o.Status()
		require.True(t, ok, "%s: %v %s", msg, o.Kind(), o.Category())
		require.Equal(t, PermitContended, st, msg)
		assert.Equal(t, int64(limit), o.InUse(), msg)
		assert.Nil(t, o.Lease(), msg)
		contended++
	}

	// The limit is reachable and not exceeded, with held permits.
	held := make([]*Lease, 0, limit)
	for i := range limit {
		o := f.c.Acquire(ctx, acq("jobs", "acme"))
		require.True(t, o.Acquired(), "permit %d of %d: %v %s", i+1, limit, o.Kind(), o.Category())
		assert.Equal(t, int64(i+1), o.InUse(), "Redis counts every held permit")
		held = append(held, o.Lease())
		acquired++
	}
	assert.Len(t, f.owners(t, k), limit)
	full("every permit is held")
	release(held[0])
	o := f.c.Acquire(ctx, acq("jobs", "acme"))
	require.True(t, o.Acquired(), "a release frees a permit: %v %s", o.Kind(), o.Category())
	assert.Equal(t, int64(limit), o.InUse())
	held[0] = o.Lease()
	acquired++
	full("a release frees exactly one permit")
	for _, l := range held {
		release(l)
	}
	require.Empty(t, f.owners(t, k))

	// Racing rounds: nobody releases until every racer has its answer.
	const racers, rounds = 32, 8
	for round := range rounds {
		start := make(chan struct{})
		outs := make([]ConcurrencyOutcome, racers)
		var wg sync.WaitGroup
		for i := range outs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				outs[i] = f.c.Acquire(ctx, acq("jobs", "acme"))
			}()
		}
		close(start)
		wg.Wait()
		won := make([]*Lease, 0, limit)
		for _, o := range outs {
			st, _ := o.Status()
			switch {
			case o.Acquired():
				assert.LessOrEqual(t, o.InUse(), int64(limit))
				won = append(won, o.Lease())
				acquired++
			case st == PermitContended:
				assert.Equal(t, int64(limit), o.InUse(), "round %d: contended only at the limit", round)
				contended++
			default:
				assert.Fail(t, "neither acquired nor contended", "round %d: %v %s", round, o.Kind(), o.Category())
			}
		}
		require.Len(t, won, limit, "round %d: exactly the limit is admitted", round)
		for _, l := range won {
			release(l)
		}
	}

	// Free-running stress: releases race acquires.
	const workers, tries = 32, 20
	var holders, peak, stressAcquired, stressContended atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			<-start
			for range tries {
				o := f.c.Acquire(ctx, acq("jobs", "acme"))
				if st, _ := o.Status(); st == PermitContended {
					assert.Equal(t, int64(limit), o.InUse(), "contended only at the limit")
					stressContended.Add(1)
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
					continue
				}
				if !assert.True(t, o.Acquired(), "%v %s", o.Kind(), o.Category()) {
					return
				}
				assert.LessOrEqual(t, o.InUse(), int64(limit))
				stressAcquired.Add(1)
				n := holders.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				holders.Add(-1)
				release(o.Lease())
			}
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("stress: acquired %d, contended %d, peak %d", stressAcquired.Load(), stressContended.Load(), peak.Load())
	assert.LessOrEqual(t, peak.Load(), int64(limit), "never more holders than permits")
	assert.Equal(t, int64(workers*tries), stressAcquired.Load()+stressContended.Load(), "every try was decided")
	acquired += stressAcquired.Load()
	contended += stressContended.Load()

	assert.Empty(t, f.owners(t, k), "every permit was returned")
	assert.Equal(t, float64(acquired), counter(t, f.reg, "caphost_rate_concurrency_operations_total",
		map[string]string{"policy": "jobs", "operation": "acquire", "result": "acquired"}))
	assert.Equal(t, float64(contended), counter(t, f.reg, "caphost_rate_concurrency_operations_total",
		map[string]string{"policy": "jobs", "operation": "acquire", "result": "contended"}))
	assert.Equal(t, float64(acquired), counter(t, f.reg, "caphost_rate_concurrency_operations_total",
		map[string]string{"policy": "jobs", "operation": "release", "result": "released"}))
}

func TestConcurrencyReleaseFreesASlotAndSubjectsAreSeparate(t *testing.T) {
	s := redistest.StartStandalone(t)
	f := newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("one", 1, 30*time.Second))
	ctx := ctxT(t)
	const ttl = 30 * time.Second
	// The bounds below come from times measured around the calls, so a slow
	// call widens them instead of failing them.
	before := time.Now()
	a := f.c.Acquire(ctx, acq("one", "acme"))
	sent := time.Now()
	require.True(t, a.Acquired(), "%v %s", a.Kind(), a.Category())
	assert.Equal(t, certainty.Applied, a.Certainty())
	assert.Equal(t, int64(1), a.Limit())
	assert.Equal(t, int64(1), a.InUse())
	require.NotNil(t, a.Lease())
	assert.Equal(t, LeaseActive, a.Lease().State())
	valid := ttl - driftBudget(ttl)
	rem := a.Lease().RemainingValidity()
	assert.LessOrEqual(t, rem, valid, "validity is the TTL less the drift budget")
	assert.GreaterOrEqual(t, rem, valid-time.Since(before), "measured from the acquire's start")
	// Redis's TIME (whole ms) plus the TTL: the same system clock as ours.
	assert.WithinRange(t, a.ExpiresAt(), before.Add(ttl-time.Millisecond), sent.Add(ttl))

	b := f.c.Acquire(ctx, acq("one", "acme"))
	st, ok := b.Status()
	require.True(t, ok)
	assert.Equal(t, PermitContended, st)
	assert.False(t, b.Acquired())
	assert.Nil(t, b.Lease())
	assert.Equal(t, certainty.Conflict, b.Certainty())
	// Redis reports the wait until the holder expires: at most the TTL, less
	// what passed (on Redis's clock) since the holder's acquire.
	assert.LessOrEqual(t, b.RetryAfter(), ttl, "until the holder expires")
	assert.GreaterOrEqual(t, b.RetryAfter(), ttl-time.Since(before)-time.Millisecond, "until the holder expires")
	require.ErrorIs(t, b.Err(), ErrPermitContended)

	assert.True(t, f.c.Acquire(ctx, acq("one", "other")).Acquired(), "another subject has its own permits")

	r := a.Lease().Release(ctx)
	st, _ = r.Status()
	assert.Equal(t, PermitReleased, st)
	assert.Equal(t, certainty.Applied, r.Certainty())
	assert.Equal(t, LeaseReleased, a.Lease().State())
	assert.Equal(t, r, a.Lease().Release(ctx), "a second release answers from the lease")
	select {
	case <-a.Lease().Done():
	default:
		t.Fatal("Done is closed after release")
	}
	assert.True(t, f.c.Acquire(ctx, acq("one", "acme")).Acquired(), "the slot is free again")
	rn := a.Lease().Renew(ctx)
	assert.Equal(t, Unavailable, rn.Kind(), "a released lease does not renew")
	assert.ErrorIs(t, rn.Err(), ErrPermitInvalid)
}

// TestConcurrencyRenewExtends: a renewed permit outlives its first TTL
// (Redis still counts it past the first expiry; another acquire is
// contended), its stored expiry moved forward by at least the time between
// acquire and renew, and its local validity restarts at the renew. Real
// time must pass for this inside two windows a second wide (the renew
// reaches Redis before the first expiry, the last check runs before the
// renewed expiry); a try in which the machine stood still for half of that
// proves nothing and is run again (timingTries).
func TestConcurrencyRenewExtends(t *testing.T) {
	const ttl, gap = 2 * time.Second, time.Second
	timingTries(t, "renew extends", func(int) bool {
		s := redistest.StartStandalone(t)
		f := newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("one", 1, ttl))
		ctx := ctxT(t)
		m := meterStalls(pinger(s))
		a := f.c.Acquire(ctx, acq("one", "acme"))
		require.True(t, a.Acquired())
		lease := a.Lease()
		k := f.permitKey(t, "one", "r1", tenant("acme"))
		first, err := s.Admin().ZScore(ctx, k.Redis(), lease.Owner().Reveal()).Result()
		require.NoError(t, err)

		time.Sleep(gap)
		before := time.Now()
		r := lease.Renew(ctx)
		rem := lease.RemainingValidity()
		renewTook := time.Since(before)
		second, serr := s.Admin().ZScore(ctx, k.Redis(), lease.Owner().Reveal()).Result()
		time.Sleep(time.Until(a.ExpiresAt().Add(50 * time.Millisecond))) // past the first expiry, on Redis's clock
		state := lease.State()
		b := f.c.Acquire(ctx, acq("one", "acme"))
		owners := f.owners(t, k)
		if m.Stop() > stallMargin {
			return false
		}

		assert.Equal(t, float64(a.ExpiresAt().UnixMilli()), first)
		st, _ := r.Status()
		require.Equal(t, PermitRenewed, st, "%v %s", r.Kind(), r.Category())
		assert.Equal(t, certainty.Applied, r.Certainty())
		// Before the renew at most ttl-drift-gap remained; the lower bound is
		// above that, so it holds only if the validity restarted.
		valid := ttl - driftBudget(ttl)
		assert.LessOrEqual(t, rem, valid)
		assert.GreaterOrEqual(t, rem, valid-renewTook, "validity restarts at the renew")
		require.NoError(t, serr)
		assert.Equal(t, float64(r.ExpiresAt().UnixMilli()), second)
		assert.GreaterOrEqual(t, second-first, float64((gap - 50*time.Millisecond).Milliseconds()),
			"extended by at least the time between acquire and renew")
		assert.Equal(t, r.ExpiresAt(), lease.ExpiresAt())
		assert.Equal(t, LeaseActive, state)
		st, _ = b.Status()
		assert.Equal(t, PermitContended, st, "the renewed permit still counts")
		assert.Equal(t, []string{lease.Owner().Reveal()}, owners)
		return true
	})
}

// TestConcurrencyExpiredPermitIsReclaimed: a holder that never releases
// loses its permit at the TTL; the next acquire takes the slot, and the old
// owner's renew and release are told NotHeld (distinct from released). The
// checks made while the permit is live have its one-second TTL to run; a
// try in which the machine stood still for half of that is run again.
func TestConcurrencyExpiredPermitIsReclaimed(t *testing.T) {
	var (
		f   *concFixture
		a   ConcurrencyOutcome
		old *Lease
	)
	ctx := ctxT(t)
	timingTries(t, "expired permit", func(int) bool {
		s := redistest.StartStandalone(t)
		f = newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("one", 1, 30*time.Second))
		m := meterStalls(pinger(s))
		r := acq("one", "acme")
		r.TTL = time.Second
		a = f.c.Acquire(ctx, r)
		require.True(t, a.Acquired())
		old = a.Lease()
		var early bool
		select {
		case <-old.Done():
			early = true
		default:
		}
		st, _ := f.c.Acquire(ctx, acq("one", "acme")).Status()
		if m.Stop() > stallMargin {
			return false
		}
		require.False(t, early, "Done closed early")
		require.Equal(t, PermitContended, st)
		return true
	})

	select {
	case <-old.Done(): // the validity timer closes it
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed when the validity ran out")
	}
	assert.Equal(t, LeaseLost, old.State())
	assert.Zero(t, old.RemainingValidity())
	// The local validity ends before the server expiry; wait for the latter
	// on Redis's clock (whole ms), however long the acquire took.
	time.Sleep(time.Until(a.ExpiresAt().Add(time.Millisecond)))
	b := f.c.Acquire(ctx, acq("one", "acme"))
	require.True(t, b.Acquired(), "the expired permit was reclaimed")
	assert.Equal(t, int64(1), b.InUse())

	rn := f.c.Renew(ctx, PermitRef{Policy: "one", Subject: tenant("acme"), Owner: old.Owner()})
	st, _ := rn.Status()
	assert.Equal(t, PermitNotHeld, st)
	assert.Equal(t, certainty.NotApplied, rn.Certainty())
	assert.ErrorIs(t, rn.Err(), ErrPermitNotHeld)
	rel := old.Release(ctx)
	st, _ = rel.Status()
	assert.Equal(t, PermitNotHeld, st, "an expired owner's release is reported as not held, not released")
	assert.False(t, rel.Reconciled())
	assert.Equal(t, LeaseReleased, old.State())
	assert.Equal(t, []string{b.Lease().Owner().Reveal()}, f.owners(t, f.permitKey(t, "one", "r1", tenant("acme"))))
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_concurrency_leases_lost_total", map[string]string{"policy": "one"}))
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_concurrency_operations_total",
		map[string]string{"policy": "one", "operation": "release", "result": "not-held"}))
}

// TestConcurrencyWrongOwnerCannotRelease: a token that is not the holder's
// (a fresh one, or another holder's) releases and renews nothing.
func TestConcurrencyWrongOwnerCannotRelease(t *testing.T) {
	s := redistest.StartStandalone(t)
	f := newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("one", 1, 30*time.Second))
	ctx := ctxT(t)
	a := f.c.Acquire(ctx, acq("one", "acme"))
	require.True(t, a.Acquired())
	other := f.c.Acquire(ctx, acq("one", "other"))
	require.True(t, other.Acquired())
	k := f.permitKey(t, "one", "r1", tenant("acme"))

	for name, tok := range map[string]OwnerToken{"fresh": newOwnerToken(), "another subject's holder": other.Lease().Owner()} {
		rel := f.c.Release(ctx, PermitRef{Policy: "one", Subject: tenant("acme"), Owner: tok})
		st, ok := rel.Status()
		require.True(t, ok, name)
		assert.Equal(t, PermitNotHeld, st, name)
		rn := f.c.Renew(ctx, PermitRef{Policy: "one", Subject: tenant("acme"), Owner: tok})
		st, _ = rn.Status()
		assert.Equal(t, PermitNotHeld, st, name)
		assert.Equal(t, []string{a.Lease().Owner().Reveal()}, f.owners(t, k), "%s: the holder keeps its permit", name)
	}
	st, _ := f.c.Acquire(ctx, acq("one", "acme")).Status()
	assert.Equal(t, PermitContended, st)

	// The holder's own token, through the stateless API, does release.
	rel := f.c.Release(ctx, PermitRef{Policy: "one", Revision: "r1", Subject: tenant("acme"), Owner: a.Lease().Owner()})
	st, _ = rel.Status()
	assert.Equal(t, PermitReleased, st)

	for _, bad := range []string{"", "short", strings.Repeat("A", 32), strings.Repeat("g", 32), strings.Repeat("a", 33), "!" + strings.Repeat("a", 31)} {
		_, err := ParseOwnerToken(bad)
		assert.ErrorIs(t, err, ErrInvalidOwnerToken, "%q", bad)
	}
	tok, err := ParseOwnerToken(a.Lease().Owner().Reveal())
	require.NoError(t, err)
	assert.Equal(t, a.Lease().Owner(), tok)
	rel = f.c.Release(ctx, PermitRef{Policy: "one", Subject: tenant("acme")})
	assert.ErrorIs(t, rel.Err(), ErrPermitInvalid, "a zero token is refused before sending")
}

// TestConcurrencyRedisKilledFailsClosed: §21.4/§21.5 define no local
// fallback for permits, so a dead Redis makes every operation Unavailable
// (nothing sent), never an acquired permit.
func TestConcurrencyRedisKilledFailsClosed(t *testing.T) {
	s := redistest.StartStandalone(t)
	f := newConcFixture(t, s.Addr(), s, localCfg(), nil, permits("one", 5, 30*time.Second), fixedWindow("fw", 10))
	ctx := ctxT(t)
	a := f.c.Acquire(ctx, acq("one", "acme"))
	require.True(t, a.Acquired())
	s.Kill()

	o := f.c.Acquire(ctx, acq("one", "acme"))
	assert.Equal(t, Unavailable, o.Kind())
	assert.Equal(t, CategoryRedisUnavailable, o.Category())
	assert.Equal(t, certainty.UnavailableBeforeSend, o.Certainty())
	assert.False(t, o.Acquired())
	assert.Nil(t, o.Lease())
	assert.Equal(t, time.Second, o.RetryAfter())
	_, err := f.c.AcquireLease(ctx, acq("one", "acme"))
	require.ErrorIs(t, err, ErrPermitUnavailable)
	var pe *PermitError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, CategoryRedisUnavailable, pe.Outcome.Category())

	rn := a.Lease().Renew(ctx)
	assert.Equal(t, Unavailable, rn.Kind())
	assert.Equal(t, LeaseActive, a.Lease().State(), "a failed renew changes nothing locally: validity decides")
	rel := a.Lease().Release(ctx)
	assert.Equal(t, Unavailable, rel.Kind())
	assert.ErrorIs(t, rel.Err(), ErrPermitUnavailable)
	assert.Equal(t, LeaseUnknown, a.Lease().State(), "the permit may be held until it expires")

	// The rate side keeps its own failure modes (this config has a local
	// emergency limiter; the permit limiter did not use it).
	assert.Equal(t, Unavailable, f.l.Evaluate(ctx, req("fw", "acme")).Kind())
	assert.Equal(t, 2.0, counter(t, f.reg, "caphost_rate_concurrency_operations_total",
		map[string]string{"policy": "one", "operation": "acquire", "result": "unavailable", "category": "redis-unavailable"}))
}

// TestConcurrencyStallIsIndeterminate: a stalled reply makes the acquire
// Indeterminate with INDETERMINATE certainty after the one repeat; the
// outcome carries the lease so the caller can release what the stalled
// write did take.
func TestConcurrencyStallIsIndeterminate(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, s.Addr())
	var repeats atomic.Int32
	cfg := Config{Provider: ProviderRedis, AttemptTimeout: 500 * time.Millisecond}
	f := newConcFixture(t, p.Addr(), s, cfg, []Option{withBeforeRetry(func() { repeats.Add(1) })}, permits("one", 3, 30*time.Second))
	ctx := ctxT(t)
	// A warm-up leaves one live pooled connection and loads the script.
	warm := f.c.Acquire(ctx, acq("one", "warm"))
	require.True(t, warm.Acquired())
	p.Stall()
	o := f.c.Acquire(ctx, acq("one", "acme"))
	p.Passthrough()
	assert.Equal(t, Indeterminate, o.Kind())
	assert.Equal(t, certainty.Indeterminate, o.Certainty())
	assert.Equal(t, CategoryTimeout, o.Category())
	assert.False(t, o.Acquired(), "a timeout is never a permit")
	assert.Equal(t, int32(1), repeats.Load(), "repeated once with the same token")
	assert.ErrorIs(t, o.Err(), ErrPermitIndeterminate)
	lease := o.Lease()
	require.NotNil(t, lease, "the token of the attempt is not hidden from the caller")
	assert.Equal(t, LeaseUnknown, lease.State())
	assert.Zero(t, lease.RemainingValidity())
	k := f.permitKey(t, "one", "r1", tenant("acme"))
	assert.Equal(t, []string{lease.Owner().Reveal()}, f.owners(t, k), "the stalled write did apply")

	rel := lease.Release(ctx)
	st, _ := rel.Status()
	assert.Equal(t, PermitReleased, st)
	assert.Empty(t, f.owners(t, k))
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_concurrency_operations_total",
		map[string]string{"policy": "one", "operation": "acquire", "result": "indeterminate", "category": "timeout"}))
}

// TestConcurrencyStallReconciledByRepeat: the repeat with the same token
// finds the first attempt's permit (ALREADY_HELD) and reports it acquired:
// exactly one permit is taken.
func TestConcurrencyStallReconciledByRepeat(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, s.Addr())
	cfg := Config{Provider: ProviderRedis, AttemptTimeout: 500 * time.Millisecond}
	f := newConcFixture(t, p.Addr(), s, cfg, []Option{withBeforeRetry(p.Passthrough)}, permits("one", 3, 30*time.Second))
	ctx := ctxT(t)
	require.True(t, f.c.Acquire(ctx, acq("one", "warm")).Acquired())
	p.Stall()
	o := f.c.Acquire(ctx, acq("one", "acme"))
	require.True(t, o.Acquired(), "%v %s", o.Kind(), o.Category())
	assert.True(t, o.Reconciled())
	assert.Equal(t, certainty.Applied, o.Certainty())
	assert.Equal(t, LeaseActive, o.Lease().State())
	assert.Equal(t, []string{o.Lease().Owner().Reveal()}, f.owners(t, f.permitKey(t, "one", "r1", tenant("acme"))), "one permit, not two")
}

// TestConcurrencyStalledAcquireLeaseCleansUp: AcquireLease releases what an
// indeterminate acquire may hold once Redis answers again.
func TestConcurrencyStalledAcquireLeaseCleansUp(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, s.Addr())
	cfg := Config{Provider: ProviderRedis, AttemptTimeout: 500 * time.Millisecond}
	f := newConcFixture(t, p.Addr(), s, cfg, nil, permits("one", 3, 30*time.Second))
	f.c.beforeCleanup = p.Passthrough // Redis answers again when the clean-up runs
	ctx := ctxT(t)
	require.True(t, f.c.Acquire(ctx, acq("one", "warm")).Acquired())
	p.Stall()
	lease, err := f.c.AcquireLease(ctx, acq("one", "acme"))
	p.Passthrough()
	require.ErrorIs(t, err, ErrPermitIndeterminate)
	assert.Nil(t, lease)
	assert.Empty(t, f.owners(t, f.permitKey(t, "one", "r1", tenant("acme"))), "the permit the stalled acquire took was released")
}

// renewers counts the live goroutines Lease.AutoRenew started, started or
// not (goleak-style: by their "created by" frame, so unrelated goroutines
// can neither mask a leak nor fake one).
func renewers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("created by github.com/caphost/caphost/host/ratelimit.(*Lease).AutoRenew in goroutine"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestConcurrencyAutoRenewKeepsLongWorkAndStops: auto-renewed leases
// outlive their TTL (twice over); each runs exactly one renew goroutine,
// and Release stops it — none is left afterwards. A lease renews every
// 100 ms with a 1 s TTL, so only a renewer starved for ~900 ms loses one;
// a try in which the machine stood still for half a second is run again.
func TestConcurrencyAutoRenewKeepsLongWorkAndStops(t *testing.T) {
	const n, ttl = 12, time.Second
	var f *concFixture
	ctx := ctxT(t)
	base := renewers()
	timingTries(t, "auto renew", func(int) bool {
		s := redistest.StartStandalone(t)
		f = newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("jobs", 20, 30*time.Second))
		m := meterStalls(pinger(s))
		leases := make([]*Lease, n)
		for i := range leases {
			r := acq("jobs", "acme")
			r.TTL = ttl
			l, err := f.c.AcquireLease(ctx, r, WithAutoRenew(100*time.Millisecond))
			require.NoError(t, err)
			leases[i] = l
		}
		assert.Equal(t, base+n, renewers(), "one renew goroutine per lease")
		time.Sleep(2*ttl + 100*time.Millisecond) // past two TTLs
		k := f.permitKey(t, "jobs", "r1", tenant("acme"))
		held := f.owners(t, k)
		var lost, unusable int
		for _, l := range leases {
			if l.State() != LeaseActive {
				lost++
			}
			if !l.IsUsableFor(10 * time.Millisecond) {
				unusable++
			}
		}
		stalled := m.Stop() > stallMargin
		if !stalled {
			assert.Len(t, held, n, "every permit is still held")
			assert.Zero(t, lost, "leases lost")
			assert.Zero(t, unusable, "leases not usable for 10 ms")
			assert.Positive(t, counter(t, f.reg, "caphost_rate_concurrency_operations_total",
				map[string]string{"policy": "jobs", "operation": "renew", "result": "renewed"}))
		}
		var wg sync.WaitGroup
		for _, l := range leases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, _ := l.Release(ctx).Status()
				if !stalled {
					assert.Equal(t, PermitReleased, st)
				}
			}()
		}
		wg.Wait()
		assert.Equal(t, base, renewers(), "Release waits for its renewer to return")
		assert.Empty(t, f.owners(t, k))
		return !stalled
	})

	// Errors: the interval must be shorter than the TTL; once only.
	r := acq("jobs", "acme")
	r.TTL = 300 * time.Millisecond
	_, err := f.c.AcquireLease(ctx, r, WithAutoRenew(300*time.Millisecond))
	require.ErrorIs(t, err, ErrLeaseOption)
	l, err := f.c.AcquireLease(ctx, r, WithAutoRenew(0))
	require.NoError(t, err)
	require.ErrorIs(t, l.AutoRenew(0, 0), ErrLeaseOption)
	l.Release(ctx)
	require.ErrorIs(t, l.AutoRenew(0, 0), ErrLeaseOption, "not on a released lease")
	assert.Equal(t, base, renewers())
}

// leaseValidity returns the lease's local validity window: when its
// acquire began and until when it is valid (both monotonic).
func leaseValidity(l *Lease) (acquiredAt, validUntil time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acquiredAt, l.validUntil
}

// TestConcurrencyAutoRenewStopsWhenLost: with Redis gone, renewals fail,
// the lease is lost when its validity runs out (not after a failure count),
// Done closes and the renew goroutine returns without a Release. MaxHold
// ends renewals on a healthy server too. The validity a lease ended with is
// read from the lease, so no bound depends on how fast Done was observed.
// Two facts need the renewer to run in time — that it renewed before the
// max hold, and that it tried after the kill — and have about 900 ms; a try
// in which the machine stood still for half a second is run again.
func TestConcurrencyAutoRenewStopsWhenLost(t *testing.T) {
	const ttl, every, maxHold = time.Second, 100 * time.Millisecond, time.Second
	valid := ttl - driftBudget(ttl)
	ctx := ctxT(t)
	base := renewers()
	r := acq("jobs", "acme")
	r.TTL = ttl
	timingTries(t, "max hold", func(int) bool {
		s := redistest.StartStandalone(t)
		f := newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("jobs", 20, 30*time.Second))
		m := meterStalls(pinger(s))
		held, err := f.c.AcquireLease(ctx, r, WithAutoRenew(every), WithMaxHold(maxHold))
		require.NoError(t, err)
		awaitDone(t, held, "max hold did not end the lease")
		stalled := m.Stop() > stallMargin
		assert.Equal(t, LeaseLost, held.State())
		acquiredAt, validUntil := leaseValidity(held)
		assert.False(t, time.Now().Before(validUntil), "lost when its validity ran out")
		// The k-th renew wakes at least k×every after the acquire (timers
		// never fire early) and only one waking before the max hold renews.
		renewed := counter(t, f.reg, "caphost_rate_concurrency_operations_total",
			map[string]string{"policy": "jobs", "operation": "renew", "result": "renewed"})
		assert.LessOrEqual(t, renewed, float64(maxHold/every-1), "no renew after the max hold")
		require.Eventually(t, func() bool { return renewers() == base }, 10*time.Second, 10*time.Millisecond)
		if stalled {
			return false
		}
		assert.Greater(t, validUntil.Sub(acquiredAt), valid, "renewed: the validity moved past the first TTL")
		return true
	})

	timingTries(t, "redis killed", func(int) bool {
		s := redistest.StartStandalone(t)
		f := newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("jobs", 20, 30*time.Second))
		lease, err := f.c.AcquireLease(ctx, r, WithAutoRenew(every))
		require.NoError(t, err)
		m := meterStalls(func() error { return nil }) // Redis is gone: this process's stalls only
		s.Kill()
		killed := time.Now()
		awaitDone(t, lease, "Done not closed after the validity ran out")
		stalled := m.Stop() > stallMargin
		assert.Equal(t, LeaseLost, lease.State())
		_, validUntil := leaseValidity(lease)
		// Lost at the validity deadline: not before it (a failure count
		// would end it sooner), and the deadline is that of a renew begun
		// before the kill (a failed renew never extends it).
		assert.False(t, time.Now().Before(validUntil), "lost when its validity ran out, not earlier")
		assert.LessOrEqual(t, validUntil.Sub(killed), valid, "no failed renew extended the validity")
		require.Eventually(t, func() bool { return renewers() == base }, 10*time.Second, 10*time.Millisecond,
			"the renewer returns without a Release")
		assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_concurrency_leases_lost_total", map[string]string{"policy": "jobs"}))
		if stalled {
			return false
		}
		assert.Positive(t, counter(t, f.reg, "caphost_rate_concurrency_operations_total",
			map[string]string{"policy": "jobs", "operation": "renew", "result": "unavailable"}), "renews were tried after the kill")
		return true
	})
}

// awaitDone waits (10 s at most) until l is no longer active.
func awaitDone(t *testing.T, l *Lease, msg string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}

// stallMargin is how long the machine may stand still during a part of a
// test that needs it to move within about a second.
const stallMargin = 500 * time.Millisecond

// stallMeter measures how long this process (and the Redis it probes)
// stood still: a heartbeat every 10 ms, and the longest time between two.
type stallMeter struct {
	stop, done chan struct{}
	longest    time.Duration
}

// meterStalls starts a stall meter whose heartbeat is probe (a PING of the
// Redis under test, or nothing to watch this process alone); a failed
// probe is no heartbeat.
func meterStalls(probe func() error) *stallMeter {
	m := &stallMeter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		last := time.Now()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				m.longest = max(m.longest, time.Since(last))
				return
			case <-tick.C:
			}
			if probe() == nil {
				now := time.Now()
				m.longest = max(m.longest, now.Sub(last))
				last = now
			}
		}
	}()
	return m
}

// Stop ends the meter and returns the longest stall it saw.
func (m *stallMeter) Stop() time.Duration {
	close(m.stop)
	<-m.done
	return m.longest
}

// pinger is a stall-meter heartbeat through s's admin connection.
func pinger(s *redistest.Server) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.Admin().Ping(ctx).Err()
	}
}

// timingTries runs try until one returns true, at most three times. A try
// measures the stalls of the part that must run within a margin and
// returns false, asserting nothing that depends on it, when the machine
// stood still longer: that try proved nothing either way. Three such tries
// fail the test (the machine is too loaded for it), never skip it.
func timingTries(t *testing.T, what string, try func(n int) bool) {
	t.Helper()
	for n := 1; ; n++ {
		if try(n) {
			return
		}
		require.Less(t, n, 3, "%s: the machine stood still for more than %s in every try", what, stallMargin)
		t.Logf("%s: try %d: the machine stood still for more than %s; trying again", what, n, stallMargin)
	}
}

// TestConcurrencyReleaseAfterCancelledContext: `defer lease.Release(ctx)`
// on a context that has ended still returns the permit.
func TestConcurrencyReleaseAfterCancelledContext(t *testing.T) {
	s := redistest.StartStandalone(t)
	f := newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("one", 1, 30*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	lease, err := f.c.AcquireLease(ctx, acq("one", "acme"))
	require.NoError(t, err)
	cancel()
	st, _ := lease.Release(ctx).Status()
	assert.Equal(t, PermitReleased, st)
	assert.True(t, f.c.Acquire(ctxT(t), acq("one", "acme")).Acquired())
}

func TestConcurrencyInvalidRequests(t *testing.T) {
	s := redistest.StartStandalone(t)
	f := newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("one", 1, 10*time.Second), fixedWindow("fw", 10))
	ctx := ctxT(t)
	ttl := func(d time.Duration) ConcurrencyRequest { r := acq("one", "acme"); r.TTL = d; return r }
	cases := map[string]ConcurrencyRequest{
		"unknown policy":    acq("nope", "acme"),
		"a rate policy":     acq("fw", "acme"),
		"missing dimension": {Policy: "one", Subject: Subject{}},
		"extra dimension":   {Policy: "one", Subject: Subject{policy.DimTenant: []byte("a"), policy.DimRoute: []byte("/")}},
		"empty value":       {Policy: "one", Subject: Subject{policy.DimTenant: nil}},
		"value too long":    {Policy: "one", Subject: tenant(strings.Repeat("x", MaxSubjectValueBytes+1))},
		"ttl over policy":   ttl(10*time.Second + time.Millisecond),
		"ttl under minimum": ttl(policy.RateMinPermitTTL - time.Millisecond),
		"ttl sub-ms":        ttl(20*time.Millisecond + time.Microsecond),
		"ttl negative":      ttl(-time.Second),
	}
	for name, r := range cases {
		o := f.c.Acquire(ctx, r)
		assert.Equal(t, Unavailable, o.Kind(), name)
		assert.Equal(t, CategoryInvalidRequest, o.Category(), name)
		assert.Equal(t, certainty.Rejected, o.Certainty(), name)
		assert.ErrorIs(t, o.Err(), ErrPermitInvalid, name)
	}
	for _, rev := range []string{"R1", "a--b", strings.Repeat("r", policy.RateMaxRevisionBytes+1)} {
		o := f.c.Release(ctx, PermitRef{Policy: "one", Revision: rev, Subject: tenant("acme"), Owner: newOwnerToken()})
		assert.ErrorIs(t, o.Err(), ErrPermitInvalid, rev)
	}
	o := f.c.Acquire(ctx, ConcurrencyRequest{Policy: "one", Subject: tenant("acme"), Deadline: time.Now().Add(-time.Second)})
	assert.Equal(t, CategoryDeadline, o.Category())
	assert.Equal(t, certainty.UnavailableBeforeSend, o.Certainty())
	assert.Empty(t, f.owners(t, f.permitKey(t, "one", "r1", tenant("acme"))), "nothing was sent")

	// Evaluate still refuses to emulate a permit with cost.
	ev := f.l.Evaluate(ctx, Request{Policy: "one", Subject: tenant("acme"), Cost: 1})
	assert.Equal(t, CategoryMisconfigured, ev.Category())
}

// TestConcurrencyLeaseSurvivesPolicySwap: a lease renews and releases in
// its own revision's permit set after a swap; new acquires count in the new
// revision's set; the stateless API reaches the old set by revision.
func TestConcurrencyLeaseSurvivesPolicySwap(t *testing.T) {
	s := redistest.StartStandalone(t)
	f := newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("one", 1, 30*time.Second))
	ctx := ctxT(t)
	a := f.c.Acquire(ctx, acq("one", "acme"))
	require.True(t, a.Acquired())
	b := f.c.Acquire(ctx, acq("one", "other"))
	require.True(t, b.Acquired())
	next := permits("one", 2, 30*time.Second)
	next.Revision = "r2"
	require.NoError(t, f.l.Swap(compile(t, Config{Provider: ProviderRedis}, next)))

	assert.Equal(t, "r1", a.Lease().Revision())
	st, _ := a.Lease().Renew(ctx).Status()
	assert.Equal(t, PermitRenewed, st)
	c := f.c.Acquire(ctx, acq("one", "acme"))
	require.True(t, c.Acquired(), "r2 has its own permits")
	assert.Equal(t, "r2", c.Revision())
	assert.Equal(t, int64(2), c.Limit())
	st, _ = a.Lease().Release(ctx).Status()
	assert.Equal(t, PermitReleased, st)

	ref := PermitRef{Policy: "one", Subject: tenant("other"), Owner: b.Lease().Owner()}
	st, _ = f.c.Release(ctx, ref).Status()
	assert.Equal(t, PermitNotHeld, st, "not in the active revision's set")
	ref.Revision = "r1"
	st, _ = f.c.Release(ctx, ref).Status()
	assert.Equal(t, PermitReleased, st, "released in the revision it was acquired under")
	assert.Empty(t, f.owners(t, f.permitKey(t, "one", "r1", tenant("other"))))
}

// TestConcurrencyNoSecretLeaks: owner tokens and subjects never reach a
// formatted value, a log line, JSON or a metric label.
func TestConcurrencyNoSecretLeaks(t *testing.T) {
	s := redistest.StartStandalone(t)
	var logBuf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := newConcFixture(t, s.Addr(), s, Config{Provider: ProviderRedis}, []Option{WithLogger(log)}, permits("one", 1, 30*time.Second))
	ctx := ctxT(t)
	subject := "tenant-secret-alice"
	r := acq("one", subject)
	r.TTL = 20 * time.Millisecond
	o := f.c.Acquire(ctx, r)
	require.True(t, o.Acquired())
	tok := o.Lease().Owner()
	<-o.Lease().Done() // lost: logs a warning
	f.c.Acquire(ctx, acq("one", subject))
	f.c.Acquire(ctx, acq("one", subject))
	rel := f.c.Release(ctx, PermitRef{Policy: "one", Subject: tenant(subject), Owner: newOwnerToken()})
	require.Error(t, rel.Err())
	ghost := f.c.Acquire(ctx, acq("ghost-policy", subject))
	require.Error(t, ghost.Err())

	js, err := json.Marshal(struct{ T OwnerToken }{tok})
	require.NoError(t, err)
	log.Info("token", "owner", tok)
	texts := []string{fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s %q %x", tok, tok, tok, tok, tok, tok), string(js),
		fmt.Sprintf("%+v", o), rel.Err().Error(), ghost.Err().Error(), logBuf.String(), o.Lease().Owner().String()}
	for _, txt := range texts {
		assert.NotContains(t, txt, tok.Reveal())
		assert.NotContains(t, txt, subject)
	}
	assert.Contains(t, logBuf.String(), "concurrency lease lost")

	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	allowed := map[string]bool{"policy": true, "revision": true, "operation": true, "result": true, "category": true,
		"decision": true, "source": true, "kind": true, "reason": true}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				assert.True(t, allowed[lp.GetName()], "label %s", lp.GetName())
				assert.NotContains(t, lp.GetValue(), subject)
				assert.NotContains(t, lp.GetValue(), tok.Reveal())
				assert.NotContains(t, lp.GetValue(), "ghost")
			}
		}
	}
	assert.Equal(t, 1.0, counter(t, f.reg, "caphost_rate_concurrency_operations_total",
		map[string]string{"policy": "unknown", "operation": "acquire", "result": "unavailable", "category": "invalid-request"}))
	_, err = NewConcurrencyLimiter(f.l, WithRegisterer(f.reg))
	require.Error(t, err, "one concurrency limiter per registry")
	_, err = NewConcurrencyLimiter(nil)
	require.ErrorIs(t, err, ErrConfig)
	_, err = NewConcurrencyLimiter(f.l, WithRegisterer(prometheus.NewRegistry()))
	require.NoError(t, err)
}

// BenchmarkConcurrencyAcquireRelease measures one acquire plus its release
// (two program calls) against a local redis-server.
func BenchmarkConcurrencyAcquireRelease(b *testing.B) {
	s := redistest.StartStandalone(b)
	f := newConcFixture(b, s.Addr(), s, Config{Provider: ProviderRedis}, nil, permits("jobs", 10_000, 30*time.Second))
	ctx := context.Background()
	r := ConcurrencyRequest{Policy: "jobs", Subject: tenant("acme")}
	b.ReportAllocs()
	for b.Loop() {
		lease, err := f.c.AcquireLease(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		lease.Release(ctx)
	}
}
