package programs

import (
	"context"
	"fmt"
	"math/rand/v2"
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

// fenceModel is the Go reference of the fenced programs' state machine on
// one resource: the counter key and the owner record (expiry is modelled
// as an explicit event).
type fenceModel struct {
	counter    *FencingToken // nil: missing
	digest     string
	rec        *fenceRecord // nil: no live owner
	highWater  int64        // the protected store's high watermark: the highest token issued
	registered FenceRegistration
}

type fenceRecord struct {
	token     FencingToken
	owner, op string
}

// covered reports whether the counter still vouches for the live record.
func (m *fenceModel) covered() bool {
	return m.rec == nil || (m.rec.token.Epoch == m.counter.Epoch && m.rec.token.Counter <= m.counter.Counter)
}

func (m *fenceModel) acquire(owner, op string, limit int64) (string, FencingToken) {
	switch {
	case m.counter == nil:
		return "FENCE_COUNTER_MISSING", FencingToken{}
	case !m.covered():
		return "FENCE_REGRESSION", FencingToken{}
	case m.rec != nil && m.rec.owner != owner:
		return "CONTENDED", FencingToken{}
	case m.rec != nil && m.rec.op != op:
		return "OWNER_OPERATION_CONFLICT", FencingToken{}
	case m.rec != nil:
		return "REPLAYED_SAME_OPERATION", m.rec.token
	case m.counter.Counter+1 > limit:
		return "FENCE_EXHAUSTED", FencingToken{}
	}
	m.counter.Counter++
	m.rec = &fenceRecord{token: *m.counter, owner: owner, op: op}
	m.highWater = max(m.highWater, m.counter.Counter)
	return "ACQUIRED", m.rec.token
}

func (m *fenceModel) inspect(owner, op string) (string, FencingToken) {
	switch {
	case m.counter == nil:
		return "FENCE_COUNTER_MISSING", FencingToken{}
	case m.rec == nil:
		return "ABSENT", FencingToken{}
	case !m.covered():
		return "FENCE_REGRESSION", FencingToken{}
	case m.rec.owner != owner:
		return "NOT_OWNER", FencingToken{}
	case m.rec.op != op:
		return "OWNER_OPERATION_CONFLICT", FencingToken{}
	}
	return "OWNED", m.rec.token
}

// hold is renew (applied "RENEWED") or release (applied "RELEASED").
func (m *fenceModel) hold(owner string, counter int64, applied string) (string, FencingToken) {
	switch {
	case m.counter == nil:
		return "FENCE_COUNTER_MISSING", FencingToken{}
	case m.rec == nil:
		return "ABSENT", FencingToken{}
	case !m.covered():
		return "FENCE_REGRESSION", FencingToken{}
	case m.rec.owner != owner:
		return "NOT_OWNER", FencingToken{}
	case m.rec.token.Counter != counter:
		return "TOKEN_MISMATCH", FencingToken{}
	}
	tok := m.rec.token
	if applied == "RELEASED" {
		m.rec = nil
	}
	return applied, tok
}

func (m *fenceModel) provision(mark int64) string {
	switch {
	case m.counter == nil:
		m.counter = &FencingToken{Epoch: m.registered.Epoch, Counter: mark}
		return "PROVISIONED"
	case m.counter.Counter < mark:
		return "REGRESSION"
	}
	return "ALREADY_SAME"
}

// TestFencePropertyLuaMatchesReference drives seeded random sequences of
// acquire / inspect / renew / release / expiry / provisioning, plus two
// faults (the counter loses increments, as after an asynchronous failover;
// the counter disappears), through the programs and the Go model, in both
// modes, and compares every status and token. Invariants: every ACQUIRED
// token is above every token issued before it — across the faults too,
// because a regressed counter fails closed (FENCE_REGRESSION,
// provisioning's REGRESSION) until the operator reprovisions it at the
// protected store's high watermark — and a counter the programs wrote
// never goes down.
func TestFencePropertyLuaMatchesReference(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	client := standaloneClient(t, s)
	admin := s.Admin()
	seen := map[string]bool{}
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(t, err)
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed-%d", mode, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 0x5eed))
				ks := fenceKeys(t, testBuilder(t), fmt.Sprintf("property-%s-%d", mode, seed))
				owner, counter := ks[0], ks[1]
				reg := FenceRegistration{Epoch: 1 + r.Int64N(1<<40), Digest: "00112233445566778899aabbccddeeff"}
				m := &fenceModel{registered: reg}
				var lastIssued, lastCounter int64
				pr, err := e.FenceCounterProvision(ctx, counter, reg, 0)
				require.NoError(t, err)
				require.Equal(t, FenceProvisioned, pr.Status)
				m.provision(0)
				owners, ops := []string{"o-a", "o-b", "o-c"}, []string{"op-1", "op-2"}
				for i := range 400 {
					who, op := owners[r.IntN(len(owners))], ops[r.IntN(len(ops))]
					where := fmt.Sprintf("op %d", i)
					var got, want string
					var gotTok, wantTok FencingToken
					switch k := r.IntN(20); {
					case k < 6:
						limit := int64(MaxFenceInteger)
						if r.IntN(10) == 0 {
							limit = max(1, lastIssued+r.Int64N(2))
						}
						res, err := e.FencedLeaseAcquire(ctx, owner, counter, FencedLeaseAcquireRequest{Registration: reg,
							Attempt: LeaseAttempt{Owner: []byte(who), OperationID: []byte(op)}, TTL: time.Hour, HardFailThreshold: limit})
						require.NoError(t, err, where)
						got, gotTok = res.Status.String(), res.Token
						want, wantTok = m.acquire(who, op, limit)
						if res.Status == FencedAcquired {
							require.Greater(t, res.Token.Counter, lastIssued, "%s: an issued token never repeats or goes back", where)
							lastIssued = res.Token.Counter
						}
					case k < 9:
						res, err := e.FencedLeaseInspect(ctx, owner, counter, reg, LeaseAttempt{Owner: []byte(who), OperationID: []byte(op)})
						require.NoError(t, err, where)
						got, gotTok = res.Status.String(), res.Token
						want, wantTok = m.inspect(who, op)
					case k < 12:
						c := max(1, lastIssued-r.Int64N(2))
						res, err := e.FencedLeaseRenew(ctx, owner, counter, FencedLeaseHold{Registration: reg, Owner: []byte(who), Counter: c}, time.Hour)
						require.NoError(t, err, where)
						got, gotTok = res.Status.String(), res.Token
						want, wantTok = m.hold(who, c, "RENEWED")
					case k < 15:
						c := max(1, lastIssued-r.Int64N(2))
						res, err := e.FencedLeaseRelease(ctx, owner, counter, FencedLeaseHold{Registration: reg, Owner: []byte(who), Counter: c})
						require.NoError(t, err, where)
						got, gotTok = res.Status.String(), res.Token
						want, wantTok = m.hold(who, c, "RELEASED")
					case k < 17: // the lease expires
						require.NoError(t, admin.Del(ctx, owner.Redis()).Err())
						m.rec = nil
						continue
					case k < 18: // provisioning at the protected store's high watermark
						res, err := e.FenceCounterProvision(ctx, counter, reg, m.highWater)
						require.NoError(t, err, where)
						got, want = res.Status.String(), m.provision(m.highWater)
					case k < 19: // fault: the counter loses increments (async failover)
						if m.counter == nil || m.counter.Counter == 0 {
							continue
						}
						lost := 1 + r.Int64N(m.counter.Counter)
						m.counter.Counter -= lost
						require.NoError(t, admin.Set(ctx, counter.Redis(), fmt.Sprintf("C1:%d:%d:%s", reg.Epoch, m.counter.Counter, reg.Digest), 0).Err())
						lastCounter = m.counter.Counter
						if m.rec != nil {
							res, err := e.FencedLeaseAcquire(ctx, owner, counter, FencedLeaseAcquireRequest{Registration: reg,
								Attempt: LeaseAttempt{Owner: []byte(who), OperationID: []byte(op)}, TTL: time.Hour, HardFailThreshold: MaxFenceInteger})
							require.NoError(t, err, where)
							want, _ := m.acquire(who, op, MaxFenceInteger)
							require.Equal(t, want, res.Status.String(), "%s after the loss", where)
							seen[want] = true
						}
						m.recover(t, ctx, e, admin, counter, reg, where)
						lastCounter = m.highWater
						continue
					default: // fault: the counter disappears
						require.NoError(t, admin.Del(ctx, counter.Redis()).Err())
						m.counter = nil
						res, err := e.FencedLeaseAcquire(ctx, owner, counter, FencedLeaseAcquireRequest{Registration: reg,
							Attempt: LeaseAttempt{Owner: []byte(who), OperationID: []byte(op)}, TTL: time.Hour, HardFailThreshold: MaxFenceInteger})
						require.NoError(t, err, where)
						require.Equal(t, FencedAcquireCounterMissing, res.Status, "%s: a missing counter is never initialised", where)
						require.Zero(t, admin.Exists(ctx, counter.Redis()).Val(), where)
						pr, err := e.FenceCounterProvision(ctx, counter, reg, m.highWater)
						require.NoError(t, err, where)
						require.Equal(t, FenceProvisioned, pr.Status, where)
						m.provision(m.highWater)
						continue
					}
					require.Equal(t, want, got, "%s status", where)
					seen[want] = true
					require.Equal(t, wantTok, gotTok, "%s token", where)
					if m.counter != nil {
						raw, err := admin.Get(ctx, counter.Redis()).Result()
						require.NoError(t, err)
						require.Equal(t, fmt.Sprintf("C1:%d:%d:%s", reg.Epoch, m.counter.Counter, reg.Digest), raw, "%s counter", where)
						require.GreaterOrEqual(t, m.counter.Counter, lastCounter, "%s: the counter never goes down", where)
						lastCounter = m.counter.Counter
						require.Equal(t, time.Duration(-1), admin.PTTL(ctx, counter.Redis()).Val(), "%s: the counter has no TTL", where)
					}
				}
				assert.Positive(t, lastIssued)
			})
		}
	}
	for _, want := range []string{"ACQUIRED", "REPLAYED_SAME_OPERATION", "CONTENDED", "OWNER_OPERATION_CONFLICT", "FENCE_EXHAUSTED",
		"FENCE_REGRESSION", "OWNED", "ABSENT", "NOT_OWNER", "RENEWED", "RELEASED", "TOKEN_MISMATCH", "ALREADY_SAME"} {
		assert.True(t, seen[want], "the random sequences never reached %s", want)
	}
}

// recover is the operator's workflow after a counter lost increments: a
// live token above it fails closed; provisioning at the protected store's
// high watermark reports REGRESSION; the counter is deleted and
// reprovisioned at the watermark, so the next token exceeds every token
// issued before the loss.
func (m *fenceModel) recover(t *testing.T, ctx context.Context, e *Executor, admin redis.UniversalClient, counter keys.Key, reg FenceRegistration, where string) {
	t.Helper()
	res, err := e.FenceCounterProvision(ctx, counter, reg, m.highWater)
	require.NoError(t, err, where)
	require.Equal(t, FenceProvisionRegression, res.Status, where)
	assert.Equal(t, FencingToken{Epoch: reg.Epoch, Counter: m.counter.Counter}, res.Fence, where)
	require.NoError(t, admin.Del(ctx, counter.Redis()).Err())
	m.counter = nil
	res, err = e.FenceCounterProvision(ctx, counter, reg, m.highWater)
	require.NoError(t, err, where)
	require.Equal(t, FenceProvisioned, res.Status, where)
	m.provision(m.highWater)
}

// TestFencedLeaseExclusiveUnderContention races 16 distinct attempts for one
// fenced lease per round (-race), both modes: exactly one ACQUIRED per
// round, the winner releases, and the tokens of successive rounds are
// exactly 1, 2, 3, ...
func TestFencedLeaseExclusiveUnderContention(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	leaseModes(t, cat, racingClient(t, s), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		ks := fenceKeys(t, testBuilder(t), "race-"+string(mode))
		reg := FenceRegistration{Epoch: 42, Digest: "0123456789abcdef"}
		pr, err := e.FenceCounterProvision(ctx, ks[1], reg, 0)
		require.NoError(t, err)
		require.Equal(t, FenceProvisioned, pr.Status)
		for round := range 20 {
			const n = 16
			results := make([]FencedAcquireResult, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					results[i], errs[i] = e.FencedLeaseAcquire(ctx, ks[0], ks[1], FencedLeaseAcquireRequest{Registration: reg,
						Attempt: LeaseAttempt{Owner: fmt.Appendf(nil, "owner-%d-%d", round, i), OperationID: []byte("job")},
						TTL:     time.Minute, HardFailThreshold: MaxFenceInteger})
				})
			}
			wg.Wait()
			var winner *FencedAcquireResult
			var hold FencedLeaseHold
			for i := range n {
				require.NoError(t, errs[i])
				switch results[i].Status {
				case FencedAcquired:
					require.Nil(t, winner, "round %d: two winners", round)
					winner = &results[i]
					hold = FencedLeaseHold{Registration: reg, Owner: fmt.Appendf(nil, "owner-%d-%d", round, i), Counter: results[i].Token.Counter}
				case FencedContended:
					assert.Positive(t, results[i].RetryAfter())
				default:
					t.Fatalf("round %d attempt %d: %s", round, i, results[i].Status)
				}
			}
			require.NotNil(t, winner, "round %d", round)
			assert.Equal(t, FencingToken{Epoch: 42, Counter: int64(round + 1)}, winner.Token)
			rel, err := e.FencedLeaseRelease(ctx, ks[0], ks[1], hold)
			require.NoError(t, err)
			require.Equal(t, FencedReleased, rel.Status)
		}
	})
}

// TestFencedLeaseAcquireRepeatAfterRealTimeout loses a fenced acquire's
// reply for real: INDETERMINATE; inspect with the same attempt recovers the
// same token; the repeat is REPLAYED_SAME_OPERATION with that token; the
// counter went up exactly once.
func TestFencedLeaseAcquireRepeatAfterRealTimeout(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	require.NoError(t, LoadScripts(ctx, cat, s.Admin()))
	c, proxy := proxiedClient(t, s)
	leaseModes(t, cat, c, func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		ks := fenceKeys(t, testBuilder(t), "real-timeout-"+string(mode))
		reg := FenceRegistration{Epoch: 9, Digest: "0123456789abcdef"}
		// Provisioning also opens the connection: a stalled handshake would
		// never send.
		pr, err := e.FenceCounterProvision(ctx, ks[1], reg, 100)
		require.NoError(t, err)
		require.Equal(t, FenceProvisioned, pr.Status)
		req := FencedLeaseAcquireRequest{Registration: reg, Attempt: LeaseAttempt{Owner: []byte("owner-minted-first"), OperationID: []byte("op")},
			TTL: 5 * time.Second, HardFailThreshold: MaxFenceInteger}
		proxy.Stall()
		_, err = e.FencedLeaseAcquire(ctx, ks[0], ks[1], req)
		proxy.Passthrough()
		require.Error(t, err)
		assert.Equal(t, certainty.Indeterminate, certainty.Classify(err, true), "%v", err)
		require.Eventually(t, func() bool { return s.Admin().Exists(ctx, ks[0].Redis()).Val() == 1 }, 5*time.Second, 10*time.Millisecond)

		ins, err := e.FencedLeaseInspect(ctx, ks[0], ks[1], reg, req.Attempt)
		require.NoError(t, err)
		require.Equal(t, FencedOwned, ins.Status)
		assert.Equal(t, FencingToken{Epoch: 9, Counter: 101}, ins.Token)
		r, err := e.FencedLeaseAcquire(ctx, ks[0], ks[1], req)
		require.NoError(t, err)
		require.Equal(t, FencedReplayedSameOperation, r.Status)
		assert.Equal(t, ins.Token, r.Token)
		assert.Equal(t, FencingToken{Epoch: 9, Counter: 101}, r.Fence, "one increment only")
		assert.LessOrEqual(t, r.PTTL, 5*time.Second)
	})
}

// TestFencedLeaseRefusesCrossSlotKeys: owner record and counter must share
// a slot; the facades refuse before sending, on standalone too.
func TestFencedLeaseRefusesCrossSlotKeys(t *testing.T) {
	e, rec := recordingExecutor(t, redistest.StartStandalone(t))
	b := testBuilder(t)
	a := fenceKeys(t, b, "cross-a")
	var other keys.Key
	for i := 0; other.IsZero(); i++ {
		if k := fenceKeys(t, b, fmt.Sprintf("cross-%d", i))[1]; k.Slot() != a[0].Slot() {
			other = k
		}
	}
	ctx := context.Background()
	reg := FenceRegistration{Epoch: 1, Digest: "0123456789abcdef"}
	at := LeaseAttempt{Owner: []byte("o"), OperationID: []byte("p")}
	hold := FencedLeaseHold{Registration: reg, Owner: []byte("o"), Counter: 1}
	_, err := e.FencedLeaseAcquire(ctx, a[0], other, FencedLeaseAcquireRequest{Registration: reg, Attempt: at, TTL: time.Minute, HardFailThreshold: 10})
	require.ErrorIs(t, err, ErrCrossSlot)
	_, err = e.FencedLeaseInspect(ctx, a[0], other, reg, at)
	require.ErrorIs(t, err, ErrCrossSlot)
	_, err = e.FencedLeaseRenew(ctx, a[0], other, hold, time.Minute)
	require.ErrorIs(t, err, ErrCrossSlot)
	_, err = e.FencedLeaseRelease(ctx, a[0], other, hold)
	require.ErrorIs(t, err, ErrCrossSlot)
	var perr *Error
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, "fenced-lease-release-v1", perr.Program)
	assert.Empty(t, rec.take(), "nothing sent")
	assert.Equal(t, a[0].Slot(), a[1].Slot(), "one Group call: one slot")
}

func TestFencedRefusesInconsistentReplies(t *testing.T) {
	reg := FenceRegistration{Epoch: 7, Digest: "0123456789abcdef"}
	mkProv := func(status, epoch, counter int64, digest string) *reply {
		r := &reply{status: status, n: 3}
		r.ints[0], r.ints[1], r.raw[2] = epoch, counter, []byte(digest)
		return r
	}
	const id = "fence-test"
	for name, r := range map[string]*reply{"provisioned": mkProv(1, 7, 5, reg.Digest), "same": mkProv(2, 7, 9, reg.Digest),
		"conflict": mkProv(3, 8, 1, reg.Digest), "regression": mkProv(4, 7, 4, reg.Digest), "invalid": mkProv(6, 0, 0, "")} {
		_, err := fenceProvisionResult(id, r, reg, 5)
		assert.NoError(t, err, name)
	}
	for name, r := range map[string]*reply{"provisioned-other-mark": mkProv(1, 7, 6, reg.Digest), "same-below": mkProv(2, 7, 4, reg.Digest),
		"conflict-same": mkProv(3, 7, 1, reg.Digest), "regression-above": mkProv(4, 7, 5, reg.Digest), "wrong-type-with-fence": mkProv(5, 7, 0, "")} {
		_, err := fenceProvisionResult(id, r, reg, 5)
		require.ErrorIs(t, err, ErrIncompatible, name)
	}
	st := func(tok, fence FencingToken, pttl int64) FencedLeaseState {
		return FencedLeaseState{Token: tok, PTTL: time.Duration(pttl) * time.Millisecond, Fence: fence}
	}
	held := FencingToken{Epoch: 7, Counter: 4}
	hold := FencedLeaseHold{Registration: reg, Owner: []byte("o"), Counter: 4}
	good := []fencedHoldReply{
		{status: holdApplied, state: st(held, held, 60000)},
		{status: holdAbsent, state: st(FencingToken{}, held, 0)},
		{status: holdEpochMismatch, state: st(FencingToken{}, FencingToken{Epoch: 8, Counter: 1}, 0)},
		{status: holdCounterMissing},
	}
	for i, g := range good {
		assert.NoError(t, checkFencedHold(id, g, hold, time.Minute), "good %d", i)
	}
	bad := []fencedHoldReply{
		{status: holdApplied, state: st(held, held, 30000)},                                         // another TTL
		{status: holdApplied, state: st(FencingToken{Epoch: 7, Counter: 3}, held, 60000)},           // another token
		{status: holdApplied, state: st(FencingToken{Epoch: 7, Counter: 5}, held, 60000)},           // a token above the counter
		{status: holdNotOwner, state: st(held, held, 0)},                                            // a token disclosed
		{status: holdAbsent, state: st(FencingToken{}, FencingToken{Epoch: 8, Counter: 4}, 0)},      // another epoch
		{status: holdEpochMismatch, state: st(FencingToken{}, held, 0)},                             // the same epoch
		{status: holdCounterMissing, state: st(FencingToken{}, held, 0)},                            // a counter where none was read
		{status: holdRegression, state: st(FencingToken{}, FencingToken{Epoch: 7, Counter: -1}, 0)}, // out of range
	}
	for i, b := range bad {
		require.ErrorIs(t, checkFencedHold(id, b, hold, time.Minute), ErrIncompatible, "bad %d", i)
	}
	assert.Equal(t, "RENEWED", FencedRenewed.String())
	assert.Equal(t, "RELEASED", FencedReleased.String())
	assert.Equal(t, "TOKEN_MISMATCH", FencedReleaseTokenMismatch.String())
	assert.Equal(t, certainty.Rejected, FencedAcquireExhausted.Outcome())
	assert.True(t, FencingToken{Epoch: 1, Counter: 9}.Less(FencingToken{Epoch: 2, Counter: 1}))
	assert.True(t, FencingToken{Epoch: 2, Counter: 1}.Less(FencingToken{Epoch: 2, Counter: 2}))
	assert.False(t, FencingToken{Epoch: 2, Counter: 2}.Less(FencingToken{Epoch: 2, Counter: 2}))
	assert.Equal(t, "7:4", held.String())
}
