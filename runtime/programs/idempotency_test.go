package programs

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// idemValues is the facade's view of the uniform idempotency result, in
// the manifest's field order.
func idemValues(rec IdemRecord, resp IdemResponse) []any {
	return []any{int64(rec.State), rec.Attempt, rec.StateRevision, ms(rec.Lease), ms(rec.TTL), resp.Version,
		resp.CodecID, resp.Digest, string(resp.Payload)}
}

// fixtureIdemOwner decodes the owner handle at a[0] (token) and a[1]
// (attempt) and the transition's operation id at a[2].
func fixtureIdemOwner(a []any) (IdemOwner, []byte, error) {
	owner, err1 := fixtureBytes(a[0])
	att, err2 := fixtureInt(a[1])
	op, err3 := fixtureBytes(a[2])
	return IdemOwner{Owner: owner, Attempt: att}, op, firstErr(err1, err2, err3)
}

func fixtureStrings(a []any) ([]string, error) {
	out := make([]string, len(a))
	for i, v := range a {
		b, err := fixtureBytes(v)
		if err != nil {
			return nil, err
		}
		out[i] = string(b)
	}
	return out, nil
}

// idemFacades adapts the idempotency facades to the vector runner; the
// fixture arguments are the ARGV of each program, in order, and the values
// the uniform result.
func idemFacades() map[string]facadeCall {
	argc := func(a []any, n int) error {
		if len(a) != n {
			return fmt.Errorf("want %d args, have %d", n, len(a))
		}
		return nil
	}
	return map[string]facadeCall{
		"idempotency-claim-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 7); err != nil {
				return "", 0, nil, err
			}
			s, err1 := fixtureStrings(a)
			lease, err2 := fixtureMillis(a[3])
			ret, err3 := fixtureMillis(a[4])
			if err := firstErr(err1, err2, err3); err != nil {
				return "", 0, nil, err
			}
			r, err := e.IdempotencyClaim(ctx, ks[0], IdemClaimRequest{Attempt: IdemAttempt{Owner: []byte(s[0]), OperationID: []byte(s[1])},
				Fingerprint: s[2], Lease: lease, Retention: ret, CodecID: s[5], PolicyRevision: s[6]})
			return r.Status.String(), r.Outcome(), idemValues(r.Record, r.Response), err
		},
		"idempotency-inspect-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 5); err != nil {
				return "", 0, nil, err
			}
			s, err := fixtureStrings(a)
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.IdempotencyInspect(ctx, ks[0], IdemInspectRequest{Attempt: IdemAttempt{Owner: []byte(s[0]), OperationID: []byte(s[1])},
				Fingerprint: s[2], CodecID: s[3], PolicyRevision: s[4]})
			return r.Status.String(), r.Outcome(), idemValues(r.Record, r.Response), err
		},
		"idempotency-start-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 4); err != nil {
				return "", 0, nil, err
			}
			o, op, err1 := fixtureIdemOwner(a)
			lease, err2 := fixtureMillis(a[3])
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.IdempotencyStart(ctx, ks[0], o, op, lease)
			return r.Status.String(), r.Outcome(), idemValues(r.Record, IdemResponse{}), err
		},
		"idempotency-renew-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 4); err != nil {
				return "", 0, nil, err
			}
			o, op, err1 := fixtureIdemOwner(a)
			lease, err2 := fixtureMillis(a[3])
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.IdempotencyRenew(ctx, ks[0], o, op, lease)
			return r.Status.String(), r.Outcome(), idemValues(r.Record, IdemResponse{}), err
		},
		"idempotency-complete-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 8); err != nil {
				return "", 0, nil, err
			}
			o, op, err1 := fixtureIdemOwner(a)
			ver, err2 := fixtureInt(a[3])
			digest, err3 := fixtureBytes(a[4])
			body, err4 := fixtureBytes(a[5])
			ttl, err5 := fixtureMillis(a[6])
			limit, err6 := fixtureInt(a[7])
			if err := firstErr(err1, err2, err3, err4, err5, err6); err != nil {
				return "", 0, nil, err
			}
			r, err := e.IdempotencyComplete(ctx, ks[0], IdemCompleteRequest{Owner: o, OperationID: op,
				Response: IdemResponse{Version: ver, Digest: string(digest), Payload: body}, ReplayTTL: ttl, MaxResponseBytes: int(limit)})
			return r.Status.String(), r.Outcome(), idemValues(r.Record, IdemResponse{}), err
		},
		"idempotency-fail-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 5); err != nil {
				return "", 0, nil, err
			}
			o, op, err1 := fixtureIdemOwner(a)
			disp, err2 := fixtureBytes(a[3])
			ret, err3 := fixtureMillis(a[4])
			if err := firstErr(err1, err2, err3); err != nil {
				return "", 0, nil, err
			}
			d := map[string]IdemDisposition{"retryable": IdemRetryable, "abandoned": IdemAbandon}[string(disp)]
			r, err := e.IdempotencyFail(ctx, ks[0], o, op, d, ret)
			return r.Status.String(), r.Outcome(), idemValues(r.Record, IdemResponse{}), err
		},
		"idempotency-release-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 3); err != nil {
				return "", 0, nil, err
			}
			o, op, err := fixtureIdemOwner(a)
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.IdempotencyRelease(ctx, ks[0], o, op)
			return r.Status.String(), r.Outcome(), idemValues(r.Record, IdemResponse{}), err
		},
	}
}

const (
	testFingerprint  = "0123456789abcdef0123456789abcdef"
	otherFingerprint = "fedcba9876543210fedcba9876543210"
	testDigest       = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
)

func testClaim(owner, op string, lease time.Duration) IdemClaimRequest {
	return IdemClaimRequest{Attempt: IdemAttempt{Owner: []byte(owner), OperationID: []byte(op)}, Fingerprint: testFingerprint,
		Lease: lease, Retention: time.Hour, CodecID: "http-v1", PolicyRevision: "rev-7"}
}

func inspectOf(c IdemClaimRequest) IdemInspectRequest {
	return IdemInspectRequest{Attempt: c.Attempt, Fingerprint: c.Fingerprint, CodecID: c.CodecID, PolicyRevision: c.PolicyRevision}
}

// expireLease ends a CLAIMED or EXECUTING record's processing lease now
// without waiting: the key's TTL falls to half the stored retention, so
// PTTL - gr is negative (what the passage of the lease looks like to the
// programs, which read no clock).
func expireLease(ctx context.Context, t testing.TB, s *redistest.Server, k keys.Key) {
	t.Helper()
	gr, err := s.Admin().HGet(ctx, k.Redis(), "gr").Int64()
	require.NoError(t, err)
	require.NoError(t, s.Admin().PExpire(ctx, k.Redis(), time.Duration(gr/2)*time.Millisecond).Err())
}

// TestIdempotencyStaleOwner is §24's stale-owner evidence: A claims and
// its lease expires before it starts; B takes the record over with attempt
// 2; A (attempt 1) can neither start, renew, complete, fail nor release it
// (NOT_OWNER), and B completes; a claim of A's request then replays B's
// response.
func TestIdempotencyStaleOwner(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	leaseModes(t, cat, standaloneClient(t, s), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		k := idemKey(t, testBuilder(t), "stale-"+string(mode))
		ca, cb := testClaim("owner-a", "claim-a", time.Minute), testClaim("owner-b", "claim-b", time.Minute)
		ra, err := e.IdempotencyClaim(ctx, k, ca)
		require.NoError(t, err)
		require.Equal(t, IdemClaimAcquired, ra.Status)
		a, ok := ra.Owned(ca.Attempt)
		require.True(t, ok)
		require.Equal(t, int64(1), a.Attempt)
		rb, err := e.IdempotencyClaim(ctx, k, cb)
		require.NoError(t, err)
		require.Equal(t, IdemClaimInProgress, rb.Status)
		assert.Equal(t, int64(1), rb.Record.Attempt)
		assert.Positive(t, rb.RetryAfter())

		expireLease(ctx, t, s, k)
		rb, err = e.IdempotencyClaim(ctx, k, cb)
		require.NoError(t, err)
		require.Equal(t, IdemClaimTakenOverClaimed, rb.Status)
		b, ok := rb.Owned(cb.Attempt)
		require.True(t, ok)
		require.Equal(t, int64(2), b.Attempt)

		st, err := e.IdempotencyStart(ctx, k, a, []byte("start-a"), time.Minute)
		require.NoError(t, err)
		assert.Equal(t, IdemStartNotOwner, st.Status)
		rel, err := e.IdempotencyRelease(ctx, k, a, []byte("release-a"))
		require.NoError(t, err)
		assert.Equal(t, IdemReleaseNotOwner, rel.Status)
		st, err = e.IdempotencyStart(ctx, k, b, []byte("start-b"), time.Minute)
		require.NoError(t, err)
		require.Equal(t, IdemStarted, st.Status)
		// Even the old token with the new attempt is refused: the handle is
		// the pair.
		ren, err := e.IdempotencyRenew(ctx, k, IdemOwner{Owner: a.Owner, Attempt: 2}, []byte("renew-a"), time.Hour)
		require.NoError(t, err)
		assert.Equal(t, IdemRenewNotOwner, ren.Status)
		resp := IdemResponse{Version: 1, Digest: testDigest, Payload: []byte("a's response")}
		co, err := e.IdempotencyComplete(ctx, k, IdemCompleteRequest{Owner: a, OperationID: []byte("complete-a"), Response: resp, ReplayTTL: time.Hour})
		require.NoError(t, err)
		assert.Equal(t, IdemCompleteNotOwner, co.Status)
		fa, err := e.IdempotencyFail(ctx, k, a, []byte("fail-a"), IdemRetryable, time.Hour)
		require.NoError(t, err)
		assert.Equal(t, IdemFailNotOwner, fa.Status)
		assert.Zero(t, fa.Record, "nothing about B's record is disclosed to A")

		resp.Payload = []byte("b's response")
		co, err = e.IdempotencyComplete(ctx, k, IdemCompleteRequest{Owner: b, OperationID: []byte("complete-b"), Response: resp, ReplayTTL: time.Hour})
		require.NoError(t, err)
		require.Equal(t, IdemCompleted, co.Status)
		assert.Equal(t, time.Hour, co.Record.TTL)
		ra, err = e.IdempotencyClaim(ctx, k, ca)
		require.NoError(t, err)
		require.Equal(t, IdemClaimCompletedReplay, ra.Status)
		assert.Equal(t, "b's response", string(ra.Response.Payload))
		assert.Equal(t, "http-v1", ra.Response.CodecID)
		assert.Equal(t, int64(2), ra.Record.Attempt)
		assert.Greater(t, ra.Record.TTL, 59*time.Minute, "the replay TTL, not the processing lease, bounds the record")
	})
}

// TestIdempotencyExpiredExecutionIsNeverTakenOver: an EXECUTING record
// whose lease expired is never claimed again: the claim is
// RECOVERY_REQUIRED and the record ABANDONED; every later claim (any
// owner) stays RECOVERY_REQUIRED, and the owner can no longer complete
// it.
func TestIdempotencyExpiredExecutionIsNeverTakenOver(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	leaseModes(t, cat, standaloneClient(t, s), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		k := idemKey(t, testBuilder(t), "expired-exec-"+string(mode))
		ca := testClaim("owner-a", "claim-a", time.Minute)
		ra, err := e.IdempotencyClaim(ctx, k, ca)
		require.NoError(t, err)
		a, _ := ra.Owned(ca.Attempt)
		st, err := e.IdempotencyStart(ctx, k, a, []byte("start-a"), time.Minute)
		require.NoError(t, err)
		require.Equal(t, IdemStarted, st.Status)
		expireLease(ctx, t, s, k)
		for i, c := range []IdemClaimRequest{testClaim("owner-b", "claim-b", time.Minute), ca, testClaim("owner-c", "claim-c", time.Minute)} {
			r, err := e.IdempotencyClaim(ctx, k, c)
			require.NoError(t, err)
			require.Equal(t, IdemClaimRecoveryRequired, r.Status, "claim %d", i)
			assert.Equal(t, IdemStateAbandoned, r.Record.State)
			assert.Equal(t, int64(1), r.Record.Attempt, "no takeover: the attempt stays")
		}
		co, err := e.IdempotencyComplete(ctx, k, IdemCompleteRequest{Owner: a, OperationID: []byte("complete-a"),
			Response: IdemResponse{Version: 1, Digest: testDigest}, ReplayTTL: time.Hour})
		require.NoError(t, err)
		assert.Equal(t, IdemCompleteNotInProgress, co.Status)
		assert.Equal(t, IdemStateAbandoned, co.Record.State)
		ins, err := e.IdempotencyInspect(ctx, k, inspectOf(ca))
		require.NoError(t, err)
		assert.Equal(t, IdemInspectAbandoned, ins.Status)
		assert.Positive(t, ins.Record.TTL, "the abandoned record is retained")
	})
}

// TestIdempotencyRenewReallyExtends is the reference's renew defect turned
// into a test: renew of an EXECUTING record sets the remaining lease to
// exactly the lease sent (longer or shorter), the server's PTTL follows, and
// a claim arriving after the original lease would have ended still finds
// the record IN_PROGRESS.
func TestIdempotencyRenewReallyExtends(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	leaseModes(t, cat, standaloneClient(t, s), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		k := idemKey(t, testBuilder(t), "renew-"+string(mode))
		c := testClaim("owner-a", "claim-a", 300*time.Millisecond)
		c.Retention = time.Minute
		r, err := e.IdempotencyClaim(ctx, k, c)
		require.NoError(t, err)
		a, _ := r.Owned(c.Attempt)
		st, err := e.IdempotencyStart(ctx, k, a, []byte("start"), 300*time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, IdemStarted, st.Status)
		ren, err := e.IdempotencyRenew(ctx, k, a, []byte("renew-1"), 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, IdemRenewed, ren.Status)
		assert.Equal(t, 2*time.Second, ren.Record.Lease)
		assert.Equal(t, st.Record.StateRevision+1, ren.Record.StateRevision)
		pttl := s.Admin().PTTL(ctx, k.Redis()).Val()
		assert.Greater(t, pttl, time.Minute+time.Second, "key TTL = lease + retention")
		time.Sleep(400 * time.Millisecond) // past the original lease
		other, err := e.IdempotencyClaim(ctx, k, testClaim("owner-b", "claim-b", time.Minute))
		require.NoError(t, err)
		require.Equal(t, IdemClaimInProgress, other.Status)
		assert.Greater(t, other.RetryAfter(), time.Second)
		// The same renew again is a replay (not extended twice); a new renew
		// may shorten the lease.
		again, err := e.IdempotencyRenew(ctx, k, a, []byte("renew-1"), 2*time.Second)
		require.NoError(t, err)
		assert.Equal(t, IdemAlreadyRenewedSameOperation, again.Status)
		assert.Less(t, again.Record.Lease, 2*time.Second)
		short, err := e.IdempotencyRenew(ctx, k, a, []byte("renew-2"), 100*time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, IdemRenewed, short.Status)
		assert.Equal(t, 100*time.Millisecond, short.Record.Lease)
	})
}

// TestIdempotencyClaimRepeatAfterRealTimeout loses a claim's reply for real
// (a proxy holds it back): the call is INDETERMINATE; inspect with the same
// attempt finds CLAIMED_SAME_OPERATION with attempt 1; the repeated claim
// is REPLAYED_ACQUIRE with the same attempt and revision (nothing changed);
// then a start whose reply is lost too is recovered by inspect
// (EXECUTING_SAME_OPERATION) and its repeat is
// ALREADY_STARTED_SAME_OPERATION; a lost complete is repeated as
// ALREADY_COMPLETED_SAME_RESULT. Every transition applied exactly once
// (the state revision counts them).
func TestIdempotencyClaimRepeatAfterRealTimeout(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	require.NoError(t, LoadScripts(ctx, cat, s.Admin()))
	c, proxy := proxiedClient(t, s)
	leaseModes(t, cat, c, func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		k := idemKey(t, testBuilder(t), "real-timeout-"+string(mode))
		claim := testClaim("owner-token-minted-before-send", "claim-42", 5*time.Second)
		warm, err := e.IdempotencyInspect(ctx, k, inspectOf(claim))
		require.NoError(t, err)
		require.Equal(t, IdemInspectAbsent, warm.Status)
		lost := func(call func() error) {
			t.Helper()
			proxy.Stall()
			err := call()
			proxy.Passthrough()
			require.Error(t, err)
			var perr *Error
			require.ErrorAs(t, err, &perr)
			assert.Equal(t, certainty.Indeterminate, certainty.Classify(err, true), "%v", err)
		}
		lost(func() error { _, err := e.IdempotencyClaim(ctx, k, claim); return err })
		require.Eventually(t, func() bool { return s.Admin().Exists(ctx, k.Redis()).Val() == 1 }, 5*time.Second, 10*time.Millisecond)

		ins, err := e.IdempotencyInspect(ctx, k, inspectOf(claim))
		require.NoError(t, err)
		require.Equal(t, IdemInspectClaimedSameOperation, ins.Status)
		assert.Equal(t, int64(1), ins.Record.Attempt)
		assert.Equal(t, int64(1), ins.Record.StateRevision)
		r, err := e.IdempotencyClaim(ctx, k, claim)
		require.NoError(t, err)
		require.Equal(t, IdemClaimReplayedAcquire, r.Status)
		assert.Equal(t, int64(1), r.Record.Attempt, "no attempt change")
		assert.Equal(t, int64(1), r.Record.StateRevision, "nothing written")
		assert.LessOrEqual(t, r.Record.Lease, 5*time.Second)
		owner, ok := r.Owned(claim.Attempt)
		require.True(t, ok)

		lost(func() error {
			_, err := e.IdempotencyStart(ctx, k, owner, []byte("start-42"), 5*time.Second)
			return err
		})
		require.Eventually(t, func() bool { return s.Admin().HGet(ctx, k.Redis(), "st").Val() == "EXECUTING" }, 5*time.Second, 10*time.Millisecond)
		ins, err = e.IdempotencyInspect(ctx, k, inspectOf(claim))
		require.NoError(t, err)
		require.Equal(t, IdemInspectExecutingSameOperation, ins.Status)
		st, err := e.IdempotencyStart(ctx, k, owner, []byte("start-42"), 5*time.Second)
		require.NoError(t, err)
		require.Equal(t, IdemAlreadyStartedSameOperation, st.Status)
		assert.Equal(t, int64(2), st.Record.StateRevision)

		req := IdemCompleteRequest{Owner: owner, OperationID: []byte("complete-42"),
			Response: IdemResponse{Version: 3, Digest: testDigest, Payload: []byte(`{"status":201}`)}, ReplayTTL: time.Hour}
		lost(func() error { _, err := e.IdempotencyComplete(ctx, k, req); return err })
		require.Eventually(t, func() bool { return s.Admin().HGet(ctx, k.Redis(), "st").Val() == "COMPLETED" }, 5*time.Second, 10*time.Millisecond)
		co, err := e.IdempotencyComplete(ctx, k, req)
		require.NoError(t, err)
		require.Equal(t, IdemAlreadyCompletedSameResult, co.Status)
		assert.Equal(t, int64(3), co.Record.StateRevision, "claim, start, complete: three transitions")
		req.Response.Digest = "ffffffffffffffffffffffffffffffff"
		co, err = e.IdempotencyComplete(ctx, k, req)
		require.NoError(t, err)
		assert.Equal(t, IdemCompleteResponseConflict, co.Status)
		replay, err := e.IdempotencyClaim(ctx, k, testClaim("a-later-retry", "claim-43", time.Second))
		require.NoError(t, err)
		require.Equal(t, IdemClaimCompletedReplay, replay.Status)
		assert.Equal(t, IdemResponse{CodecID: "http-v1", Version: 3, Digest: testDigest, Payload: []byte(`{"status":201}`)}, replay.Response)
	})
}

// TestIdempotencyClaimExclusiveUnderContention races 16 distinct attempts
// for one record, 20 rounds, both modes: exactly one ACQUIRED per round,
// every other attempt IN_PROGRESS with attempt 1 and a retry-after within
// the lease.
func TestIdempotencyClaimExclusiveUnderContention(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	leaseModes(t, cat, racingClient(t, s), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		for round := range 20 {
			k := idemKey(t, testBuilder(t), fmt.Sprintf("race-%s-%d", mode, round))
			const n = 16
			results := make([]IdemClaimResult, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					results[i], errs[i] = e.IdempotencyClaim(ctx, k, testClaim(fmt.Sprintf("owner-%d", i), "claim", time.Minute))
				})
			}
			wg.Wait()
			acquired := 0
			for i := range n {
				require.NoError(t, errs[i])
				switch results[i].Status {
				case IdemClaimAcquired:
					acquired++
				case IdemClaimInProgress:
					assert.Equal(t, int64(1), results[i].Record.Attempt)
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

// TestIdempotencyCompleteRefusesOversizeBeforeSend: a payload above the
// bound is refused by the facade with nothing sent (the recorder sees no
// command), and the record is unchanged.
func TestIdempotencyCompleteRefusesOversizeBeforeSend(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	e, rec := recordingExecutor(t, s)
	k := idemKey(t, testBuilder(t), "oversize")
	c := testClaim("owner-a", "claim-a", time.Minute)
	r, err := e.IdempotencyClaim(ctx, k, c)
	require.NoError(t, err)
	a, _ := r.Owned(c.Attempt)
	_, err = e.IdempotencyStart(ctx, k, a, []byte("start"), time.Minute)
	require.NoError(t, err)
	rec.take()
	big := make([]byte, DefaultMaxIdemResponseBytes+1)
	_, err = e.IdempotencyComplete(ctx, k, IdemCompleteRequest{Owner: a, OperationID: []byte("complete"),
		Response: IdemResponse{Version: 1, Digest: testDigest, Payload: big}, ReplayTTL: time.Hour})
	require.ErrorIs(t, err, ErrResponseTooLarge)
	assert.Equal(t, certainty.Rejected, certainty.Classify(err, true), "%v", err)
	assert.Empty(t, rec.take(), "nothing sent")
	assert.Equal(t, "EXECUTING", s.Admin().HGet(ctx, k.Redis(), "st").Val())
	// A larger configured bound admits it.
	co, err := e.IdempotencyComplete(ctx, k, IdemCompleteRequest{Owner: a, OperationID: []byte("complete"),
		Response: IdemResponse{Version: 1, Digest: testDigest, Payload: big}, ReplayTTL: time.Hour, MaxResponseBytes: len(big)})
	require.NoError(t, err)
	assert.Equal(t, IdemCompleted, co.Status)
}

func TestIdempotencyRefusesInconsistentReplies(t *testing.T) {
	mk := func(status int64, ints [6]int64, strs ...string) *reply {
		r := &reply{status: status, n: 9}
		copy(r.ints[:6], ints[:])
		for i, s := range strs {
			r.raw[6+i] = []byte(s)
		}
		return r
	}
	const id = "idem-test"
	claim := testClaim("o", "op", time.Minute)
	ok := map[string]*reply{
		"acquired":    mk(1, [6]int64{1, 1, 1, 60000, 0, 0}),
		"replayed":    mk(2, [6]int64{2, 3, 4, 10, 0, 0}),
		"taken-over":  mk(3, [6]int64{1, 2, 5, 60000, 0, 0}),
		"replay":      mk(4, [6]int64{3, 1, 3, 0, 500, 2}, "http-v1", testDigest, "body"),
		"in-progress": mk(5, [6]int64{1, 1, 1, 5, 0, 0}),
		"recovery":    mk(6, [6]int64{5, 1, 3, 0, 0, 0}),
		"fingerprint": mk(7, [6]int64{}),
		"invalid":     mk(11, [6]int64{}),
	}
	for name, r := range ok {
		_, err := idemClaimResult(id, r, claim)
		assert.NoError(t, err, name)
	}
	bad := map[string]*reply{
		"acquired-other-lease":   mk(1, [6]int64{1, 1, 1, 59999, 0, 0}),
		"acquired-executing":     mk(1, [6]int64{2, 1, 1, 60000, 0, 0}),
		"replayed-expired":       mk(2, [6]int64{1, 1, 1, 0, 0, 0}),
		"taken-over-attempt-1":   mk(3, [6]int64{1, 1, 2, 60000, 0, 0}),
		"replay-other-codec":     mk(4, [6]int64{3, 1, 3, 0, 500, 2}, "json", testDigest, "body"),
		"replay-no-version":      mk(4, [6]int64{3, 1, 3, 0, 500, 0}, "http-v1", testDigest, "body"),
		"replay-bad-digest":      mk(4, [6]int64{3, 1, 3, 0, 500, 1}, "http-v1", "XYZ", "body"),
		"in-progress-response":   mk(5, [6]int64{1, 1, 1, 5, 0, 1}, "http-v1", testDigest, "body"),
		"mismatch-discloses":     mk(7, [6]int64{1, 1, 1, 5, 0, 0}),
		"recovery-not-abandoned": mk(6, [6]int64{2, 1, 3, 0, 0, 0}),
		"negative-revision":      mk(2, [6]int64{1, 1, -1, 5, 0, 0}),
		"ttl-beyond-max":         mk(4, [6]int64{3, 1, 3, 0, MaxIdemTTL.Milliseconds() + 1, 1}, "http-v1", testDigest, ""),
	}
	for name, r := range bad {
		_, err := idemClaimResult(id, r, claim)
		require.ErrorIs(t, err, ErrIncompatible, name)
	}
	owner := IdemOwner{Owner: []byte("o"), Attempt: 3}
	_, err := idemTransition(id, IdemStarted, mk(1, [6]int64{2, 3, 4, 60000, 0, 0}), idemStartShapes(), idemWant{lease: time.Minute, attempt: owner.Attempt})
	require.NoError(t, err)
	_, err = idemTransition(id, IdemStarted, mk(1, [6]int64{2, 2, 4, 60000, 0, 0}), idemStartShapes(), idemWant{lease: time.Minute, attempt: owner.Attempt})
	require.ErrorIs(t, err, ErrIncompatible, "STARTED for another attempt than the handle's")
	_, err = idemTransition(id, IdemStartNotOwner, mk(4, [6]int64{2, 1, 1, 0, 0, 0}), idemStartShapes(), idemWant{attempt: 3})
	require.ErrorIs(t, err, ErrIncompatible, "NOT_OWNER must not disclose the other owner's record")
	_, err = idemTransition(id, IdemRenewed, mk(1, [6]int64{2, 3, 5, 30000, 0, 0}), idemRenewShapes(), idemWant{lease: time.Minute, attempt: 3})
	require.ErrorIs(t, err, ErrIncompatible, "RENEWED must report the lease sent")
	_, err = idemTransition(id, IdemCompleted, mk(1, [6]int64{3, 3, 5, 0, 3600000, 0}), idemCompleteShapes(), idemWant{ttl: time.Hour, attempt: 3})
	require.NoError(t, err)
	_, err = idemTransition(id, IdemCompleted, mk(1, [6]int64{3, 3, 5, 0, 3600000, 0}, "", "", "echo"), idemCompleteShapes(), idemWant{ttl: time.Hour, attempt: 3})
	require.ErrorIs(t, err, ErrIncompatible, "a transition never carries a response")
	_, err = idemTransition(id, IdemAlreadyMarkedSameOperation, mk(3, [6]int64{4, 3, 5, 0, 10, 0}), idemFailShapes(IdemAbandon), idemWant{attempt: 3})
	require.ErrorIs(t, err, ErrIncompatible, "ALREADY_MARKED must match the disposition")
	_, err = idemTransition(id, IdemReleasedBeforeExecution, mk(1, [6]int64{1, 3, 5, 0, 10, 0}), idemReleaseShapes(), idemWant{attempt: 3})
	require.ErrorIs(t, err, ErrIncompatible, "a released record is RELEASED")
	assert.Equal(t, "UNKNOWN(12)", IdemClaimStatus(12).String())
	assert.Equal(t, "RECOVERY_REQUIRED", IdemClaimRecoveryRequired.String())
	assert.Equal(t, certainty.Conflict, IdemClaimRecoveryRequired.Outcome())
	assert.Equal(t, "EXECUTING", IdemStateExecuting.String())
	assert.Equal(t, "UNKNOWN(9)", IdemState(9).String())
	assert.Equal(t, "abandoned", IdemAbandon.String())
}
