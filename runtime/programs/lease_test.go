package programs

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// fixtureAttempt decodes the owner and operation id at a[i] and a[j].
func fixtureAttempt(a []any, i, j int) (LeaseAttempt, error) {
	owner, err1 := fixtureBytes(a[i])
	op, err2 := fixtureBytes(a[j])
	return LeaseAttempt{Owner: owner, OperationID: op}, firstErr(err1, err2)
}

func fixtureMillis(v any) (time.Duration, error) {
	n, err := fixtureInt(v)
	return time.Duration(n) * time.Millisecond, err
}

// leaseFacades adapts the lease facades to the vector runner; the fixture
// arguments are the ARGV of each program, in order.
func leaseFacades() map[string]facadeCall {
	argc := func(a []any, n int) error {
		if len(a) != n {
			return fmt.Errorf("want %d args, have %d", n, len(a))
		}
		return nil
	}
	acquire := func(m func(*Executor, context.Context, keys.Key, LeaseAttempt, time.Duration) (LeaseAcquireResult, error)) facadeCall {
		return func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 3); err != nil {
				return "", 0, nil, err
			}
			at, err1 := fixtureAttempt(a, 0, 2)
			ttl, err2 := fixtureMillis(a[1])
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := m(e, ctx, ks[0], at, ttl)
			return r.Status.String(), r.Outcome(), []any{ms(r.PTTL)}, err
		}
	}
	release := func(m func(*Executor, context.Context, keys.Key, LeaseAttempt) (LeaseReleaseResult, error)) facadeCall {
		return func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 2); err != nil {
				return "", 0, nil, err
			}
			at, err := fixtureAttempt(a, 0, 1)
			if err != nil {
				return "", 0, nil, err
			}
			r, err := m(e, ctx, ks[0], at)
			return r.Status.String(), r.Outcome(), []any{r.Deleted}, err
		}
	}
	return map[string]facadeCall{
		"lease-acquire-v1": acquire((*Executor).LeaseAcquire),
		"lease-acquire-v2": acquire((*Executor).LeaseAcquireV2),
		"lease-inspect-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 2); err != nil {
				return "", 0, nil, err
			}
			at, err := fixtureAttempt(a, 0, 1)
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.LeaseInspect(ctx, ks[0], at)
			return r.Status.String(), r.Outcome(), []any{ms(r.PTTL)}, err
		},
		"lease-renew-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 3); err != nil {
				return "", 0, nil, err
			}
			at, err1 := fixtureAttempt(a, 0, 1)
			ttl, err2 := fixtureMillis(a[2])
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.LeaseRenew(ctx, ks[0], at, ttl)
			return r.Status.String(), r.Outcome(), []any{ms(r.PTTL)}, err
		},
		"lease-release-v1": release((*Executor).LeaseRelease),
		// The v2 programs answer v1's vectors exactly (same arguments,
		// envelope, statuses and result).
		"lease-release-v2": release((*Executor).LeaseReleaseV2),
		// v3 answers v2's vectors, ported: the host builds the envelope
		// and formats the TTL, so only the arity checks stay raw.
		"lease-acquire-v3": acquire((*Executor).LeaseAcquireV3),
		"lease-release-v3": release((*Executor).LeaseReleaseV3),
	}
}

// leaseModes runs f in both program modes against one executor each.
func leaseModes(t *testing.T, cat *Catalog, c redis.UniversalClient, f func(t *testing.T, e *Executor, mode policy.ProgramMode)) {
	t.Helper()
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := NewExecutor(cat, mode, c)
			require.NoError(t, err)
			f(t, e, mode)
		})
	}
}

// racingClient is a client on s with a pool of 16 connections, so 16
// goroutines race for real.
func racingClient(t *testing.T, s *redistest.Server) *redis.Client {
	t.Helper()
	user, pass := s.AdminUser()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: user, Password: pass, DisableIdentity: true,
		MaxRetries: -1, PoolSize: 16, DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestLeaseStaleOwner is §22's stale-owner evidence: A's lease expires, B
// acquires, and A can neither release nor renew B's lease (NOT_OWNER), nor
// inspect it as its own; B still owns it afterwards.
func TestLeaseStaleOwner(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	leaseModes(t, cat, standaloneClient(t, s), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		k := leaseKey(t, testBuilder(t), "stale-"+string(mode))
		a := LeaseAttempt{Owner: []byte("owner-a"), OperationID: []byte("job-1")}
		b := LeaseAttempt{Owner: []byte("owner-b"), OperationID: []byte("job-1")}
		r, err := e.LeaseAcquire(ctx, k, a, 50*time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, LeaseAcquired, r.Status)
		require.Eventually(t, func() bool { return s.Admin().Exists(ctx, k.Redis()).Val() == 0 }, 5*time.Second, 5*time.Millisecond)
		rb, err := e.LeaseAcquire(ctx, k, b, time.Minute)
		require.NoError(t, err)
		require.Equal(t, LeaseAcquired, rb.Status)

		rel, err := e.LeaseRelease(ctx, k, a)
		require.NoError(t, err)
		assert.Equal(t, LeaseReleaseNotOwner, rel.Status)
		assert.Equal(t, certainty.Conflict, rel.Outcome())
		ren, err := e.LeaseRenew(ctx, k, a, time.Hour)
		require.NoError(t, err)
		assert.Equal(t, LeaseRenewNotOwner, ren.Status)
		ins, err := e.LeaseInspect(ctx, k, a)
		require.NoError(t, err)
		assert.Equal(t, LeaseInspectNotOwner, ins.Status)
		assert.Zero(t, ins.PTTL, "nothing about B's lease is disclosed to A")

		ins, err = e.LeaseInspect(ctx, k, b)
		require.NoError(t, err)
		assert.Equal(t, LeaseOwned, ins.Status)
		assert.LessOrEqual(t, ins.PTTL, time.Minute, "B's TTL was not touched by A's renew")
		assert.Greater(t, ins.PTTL, 50*time.Second)
	})
}

// TestLeaseAcquireRepeatAfterRealTimeout loses an acquire's reply for real
// (a proxy holds it back): the call is INDETERMINATE, inspect with the same
// attempt recovers OWNED, and the repeated acquire is
// REPLAYED_SAME_OPERATION whose PTTL is the server's remaining TTL, not the
// TTL sent — so validity computed from it never outlives the server's lease.
func TestLeaseAcquireRepeatAfterRealTimeout(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	require.NoError(t, LoadScripts(ctx, cat, s.Admin()))
	c, proxy := proxiedClient(t, s)
	leaseModes(t, cat, c, func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		k := leaseKey(t, testBuilder(t), "real-timeout-"+string(mode))
		at := LeaseAttempt{Owner: []byte("owner-token-minted-before-send"), OperationID: []byte("refresh-42")}
		const ttl = 5 * time.Second
		// Open the connection first: a stalled handshake would never send.
		warm, err := e.LeaseInspect(ctx, k, at)
		require.NoError(t, err)
		require.Equal(t, LeaseInspectAbsent, warm.Status)
		proxy.Stall()
		_, err = e.LeaseAcquire(ctx, k, at, ttl)
		proxy.Passthrough()
		require.Error(t, err)
		var perr *Error
		require.ErrorAs(t, err, &perr)
		assert.Equal(t, certainty.Indeterminate, certainty.Classify(err, true), "%v", err)
		require.Eventually(t, func() bool { return s.Admin().Exists(ctx, k.Redis()).Val() == 1 }, 5*time.Second, 10*time.Millisecond)

		ins, err := e.LeaseInspect(ctx, k, at)
		require.NoError(t, err)
		require.Equal(t, LeaseOwned, ins.Status)
		time.Sleep(300 * time.Millisecond)
		server := s.Admin().PTTL(ctx, k.Redis()).Val()
		r, err := e.LeaseAcquire(ctx, k, at, ttl)
		require.NoError(t, err)
		require.Equal(t, LeaseReplayedSameOperation, r.Status)
		assert.Equal(t, certainty.Applied, r.Outcome())
		assert.LessOrEqual(t, r.PTTL, server, "the replay reports what is left, never the full TTL again")
		assert.LessOrEqual(t, r.PTTL, ttl-300*time.Millisecond)
		assert.Positive(t, r.PTTL)
		assert.LessOrEqual(t, s.Admin().PTTL(ctx, k.Redis()).Val(), server, "a replay does not extend the lease")
	})
}

// TestLeaseExclusiveUnderContention races 16 distinct attempts for one
// lease, 20 rounds, both modes: exactly one ACQUIRED per round, every other
// attempt CONTENDED with a retry-after within the TTL.
func TestLeaseExclusiveUnderContention(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	leaseModes(t, cat, racingClient(t, s), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		for round := range 20 {
			k := leaseKey(t, testBuilder(t), fmt.Sprintf("race-%s-%d", mode, round))
			const n = 16
			results := make([]LeaseAcquireResult, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					at := LeaseAttempt{Owner: []byte(fmt.Sprintf("owner-%d", i)), OperationID: []byte("job")}
					results[i], errs[i] = e.LeaseAcquire(ctx, k, at, time.Minute)
				})
			}
			wg.Wait()
			acquired := 0
			for i := range n {
				require.NoError(t, errs[i])
				switch results[i].Status {
				case LeaseAcquired:
					acquired++
				case LeaseContended:
					assert.Positive(t, results[i].RetryAfter())
					assert.LessOrEqual(t, results[i].RetryAfter(), time.Minute)
				default:
					t.Fatalf("attempt %d: %s", i, results[i].Status)
				}
			}
			assert.Equal(t, 1, acquired, "round %d", round)
		}
	})
}

func TestLeaseRefusesInconsistentReplies(t *testing.T) {
	mk := func(status, v int64) *reply {
		r := &reply{status: status, n: 1}
		r.ints[0] = v
		return r
	}
	const id = "lease-test"
	ttl := time.Minute
	for name, r := range map[string]*reply{"acquired": mk(1, 60000), "replayed": mk(2, 1), "replayed-zero": mk(2, 0),
		"contended": mk(3, 59000), "conflict": mk(4, 10), "invalid": mk(6, 0)} {
		_, err := leaseAcquireResult(id, r, ttl)
		assert.NoError(t, err, name)
	}
	for name, r := range map[string]*reply{"acquired-other-ttl": mk(1, 59999), "replayed-negative": mk(2, -1),
		"replayed-beyond-max": mk(2, MaxLeaseTTL.Milliseconds()+1), "wrong-type-with-ttl": mk(5, 1)} {
		_, err := leaseAcquireResult(id, r, ttl)
		require.ErrorIs(t, err, ErrIncompatible, name)
	}
	_, err := leaseInspectResult(id, mk(1, 5000))
	require.NoError(t, err)
	_, err = leaseInspectResult(id, mk(3, 5000))
	require.ErrorIs(t, err, ErrIncompatible, "NOT_OWNER must not disclose the holder's TTL")
	_, err = leaseRenewResult(id, mk(1, 60000), ttl)
	require.NoError(t, err)
	_, err = leaseRenewResult(id, mk(1, 30000), ttl)
	require.ErrorIs(t, err, ErrIncompatible, "RENEWED must report the TTL sent")
	_, err = leaseRenewResult(id, mk(2, 1), ttl)
	require.ErrorIs(t, err, ErrIncompatible)
	_, err = leaseReleaseResult(id, mk(1, 1))
	require.NoError(t, err)
	_, err = leaseReleaseResult(id, mk(1, 0))
	require.ErrorIs(t, err, ErrIncompatible)
	_, err = leaseReleaseResult(id, mk(3, 1))
	require.ErrorIs(t, err, ErrIncompatible)
	r, err := leaseAcquireResult(id, mk(3, 1500), ttl)
	require.NoError(t, err)
	assert.Equal(t, 1500*time.Millisecond, r.RetryAfter())
	r, err = leaseAcquireResult(id, mk(2, 1500), ttl)
	require.NoError(t, err)
	assert.Zero(t, r.RetryAfter())
	assert.Equal(t, "REPLAYED_SAME_OPERATION", r.Status.String())
	assert.Equal(t, "UNKNOWN(7)", LeaseAcquireStatus(7).String())
}
