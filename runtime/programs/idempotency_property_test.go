package programs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// idemModel is the Go reference of the idempotency programs' state machine
// on one record. Lease expiry and record expiry are explicit events; a
// lease is "expired" when PTTL - gr <= 0, which the test produces by
// lowering the key's TTL to gr/2.
type idemModel struct {
	present bool
	f       map[string]string // the 17 hash fields
	expired bool
}

// idemObs is one observed (or predicted) result. lease and ttl are exact,
// or -1 for "some positive remainder" (the model cannot know the exact
// milliseconds left).
type idemObs struct {
	status     string
	state      IdemState
	att, rev   int64
	lease, ttl int64
	resp       IdemResponse
}

func (m *idemModel) get(k string) string { return m.f[k] }

func (m *idemModel) num(k string) int64 {
	n, _ := strconv.ParseInt(m.f[k], 10, 64)
	return n
}

func (m *idemModel) set(kv ...any) {
	for i := 0; i < len(kv); i += 2 {
		m.f[kv[i].(string)] = fmt.Sprint(kv[i+1])
	}
}

func (m *idemModel) sc() IdemState {
	for i, n := range idemStateNames() {
		if n == m.f["st"] {
			return IdemState(i)
		}
	}
	return IdemStateNone
}

func (m *idemModel) obs(status string, lease, ttl int64) idemObs {
	return idemObs{status: status, state: m.sc(), att: m.num("att"), rev: m.num("rev"), lease: lease, ttl: ttl}
}

func (m *idemModel) live() int64 {
	if m.expired {
		return 0
	}
	return -1
}

func (m *idemModel) claim(c IdemClaimRequest) idemObs {
	owner, op := string(c.Attempt.Owner), string(c.Attempt.OperationID)
	fresh := func(att, rev int64, status string) idemObs {
		m.present, m.expired = true, false
		m.f = map[string]string{}
		m.set("v", 2, "st", "CLAIMED", "rev", rev, "fp", c.Fingerprint, "own", owner, "att", att, "cop", op, "sop", "", "lop", op,
			"lk", "claim", "lrd", "", "gr", c.Retention.Milliseconds(), "cod", c.CodecID, "pol", c.PolicyRevision, "rv", "", "rd", "", "rp", "")
		return m.obs(status, c.Lease.Milliseconds(), 0)
	}
	if !m.present {
		return fresh(1, 1, "ACQUIRED")
	}
	sc := m.sc()
	if sc == IdemStateReleased {
		return fresh(m.num("att")+1, m.num("rev")+1, "ACQUIRED")
	}
	if m.get("fp") != c.Fingerprint {
		return idemObs{status: "FINGERPRINT_MISMATCH"}
	}
	switch {
	case sc == IdemStateCompleted:
		if m.get("cod") != c.CodecID || m.get("pol") != c.PolicyRevision {
			return idemObs{status: "POLICY_MISMATCH"}
		}
		o := m.obs("COMPLETED_REPLAY", 0, -1)
		o.resp = IdemResponse{CodecID: m.get("cod"), Version: m.num("rv"), Digest: m.get("rd"), Payload: []byte(m.get("rp"))}
		return o
	case sc == IdemStateAbandoned:
		return m.obs("RECOVERY_REQUIRED", 0, -1)
	case sc == IdemStateExecuting && m.expired:
		m.set("st", "ABANDONED", "rev", m.num("rev")+1, "lop", "", "lk", "expire", "lrd", "")
		return m.obs("RECOVERY_REQUIRED", 0, -1)
	case sc == IdemStateFailedRetryable || (sc == IdemStateClaimed && m.expired):
		return fresh(m.num("att")+1, m.num("rev")+1, "TAKEN_OVER_CLAIMED")
	case m.get("own") == owner && m.get("cop") == op:
		return m.obs("REPLAYED_ACQUIRE", -1, 0)
	case m.get("own") == owner:
		return idemObs{status: "OWNER_OPERATION_CONFLICT"}
	}
	return m.obs("IN_PROGRESS", -1, 0)
}

func (m *idemModel) inspect(c IdemInspectRequest) idemObs {
	if !m.present || m.sc() == IdemStateReleased {
		return idemObs{status: "ABSENT"}
	}
	if m.get("fp") != c.Fingerprint {
		return idemObs{status: "FINGERPRINT_MISMATCH"}
	}
	switch m.sc() {
	case IdemStateCompleted:
		if m.get("cod") != c.CodecID || m.get("pol") != c.PolicyRevision {
			return idemObs{status: "POLICY_MISMATCH"}
		}
		o := m.obs("COMPLETED_REPLAY", 0, -1)
		o.resp = IdemResponse{CodecID: m.get("cod"), Version: m.num("rv"), Digest: m.get("rd"), Payload: []byte(m.get("rp"))}
		return o
	case IdemStateFailedRetryable:
		return m.obs("FAILED_RETRYABLE", 0, -1)
	case IdemStateAbandoned:
		return m.obs("ABANDONED", 0, -1)
	}
	if m.get("own") == string(c.Attempt.Owner) {
		if m.get("cop") != string(c.Attempt.OperationID) {
			return idemObs{status: "OPERATION_CONFLICT"}
		}
		if m.sc() == IdemStateClaimed {
			return m.obs("CLAIMED_SAME_OPERATION", m.live(), 0)
		}
		return m.obs("EXECUTING_SAME_OPERATION", m.live(), 0)
	}
	return m.obs("IN_PROGRESS_OTHER", m.live(), 0)
}

// owned is the common prefix of every transition: ABSENT, NOT_OWNER.
func (m *idemModel) owned(o IdemOwner, releaseSeesTombstone bool) (string, bool) {
	if !m.present || (m.sc() == IdemStateReleased && !releaseSeesTombstone) {
		return "ABSENT", false
	}
	if m.get("own") != string(o.Owner) || m.num("att") != o.Attempt {
		return "NOT_OWNER", false
	}
	return "", true
}

// usedBy reports whether op already names another transition.
func (m *idemModel) usedBy(op string) bool {
	return op == m.get("cop") || op == m.get("sop") || op == m.get("lop")
}

func (m *idemModel) start(o IdemOwner, op string, lease int64) idemObs {
	if s, ok := m.owned(o, false); !ok {
		return idemObs{status: s}
	}
	switch sc := m.sc(); {
	case sc == IdemStateExecuting && m.get("sop") == op:
		return m.obs("ALREADY_STARTED_SAME_OPERATION", m.live(), 0)
	case sc == IdemStateExecuting:
		return idemObs{status: "OPERATION_CONFLICT"}
	case sc != IdemStateClaimed:
		return m.obs("NOT_CLAIMED", 0, 0)
	case m.usedBy(op):
		return idemObs{status: "OPERATION_CONFLICT"}
	}
	m.set("st", "EXECUTING", "rev", m.num("rev")+1, "sop", op, "lop", op, "lk", "start", "lrd", "")
	m.expired = false
	return m.obs("STARTED", lease, 0)
}

func (m *idemModel) renew(o IdemOwner, op string, lease int64) idemObs {
	if s, ok := m.owned(o, false); !ok {
		return idemObs{status: s}
	}
	switch sc := m.sc(); {
	case sc != IdemStateClaimed && sc != IdemStateExecuting:
		return m.obs("NOT_IN_PROGRESS", 0, 0)
	case m.get("lk") == "renew" && m.get("lop") == op:
		return m.obs("ALREADY_RENEWED_SAME_OPERATION", m.live(), 0)
	case m.usedBy(op):
		return idemObs{status: "OPERATION_CONFLICT"}
	}
	m.set("rev", m.num("rev")+1, "lop", op, "lk", "renew", "lrd", "")
	m.expired = false
	return m.obs("RENEWED", lease, 0)
}

func (m *idemModel) complete(req IdemCompleteRequest) idemObs {
	if s, ok := m.owned(req.Owner, false); !ok {
		return idemObs{status: s}
	}
	op, r := string(req.OperationID), req.Response
	switch sc := m.sc(); {
	case sc == IdemStateCompleted:
		if m.num("rv") != r.Version || m.get("rd") != r.Digest {
			return idemObs{status: "RESPONSE_CONFLICT"}
		}
		if m.get("lk") != "complete" || m.get("lop") != op {
			return idemObs{status: "OPERATION_CONFLICT"}
		}
		return m.obs("ALREADY_COMPLETED_SAME_RESULT", 0, -1)
	case sc != IdemStateExecuting:
		return m.obs("NOT_IN_PROGRESS", 0, 0)
	case m.usedBy(op):
		return idemObs{status: "OPERATION_CONFLICT"}
	}
	m.set("st", "COMPLETED", "rev", m.num("rev")+1, "lop", op, "lk", "complete", "lrd", r.Digest, "rv", r.Version, "rd", r.Digest, "rp", string(r.Payload))
	return m.obs("COMPLETED", 0, req.ReplayTTL.Milliseconds())
}

func (m *idemModel) fail(o IdemOwner, op string, d IdemDisposition, retention int64) idemObs {
	if s, ok := m.owned(o, false); !ok {
		return idemObs{status: s}
	}
	sc := m.sc()
	if (sc == IdemStateFailedRetryable || sc == IdemStateAbandoned) && strings.HasPrefix(m.get("lk"), "fail-") {
		if m.get("lop") == op && m.get("lk") == "fail-"+d.String() {
			return m.obs("ALREADY_MARKED_SAME_OPERATION", 0, -1)
		}
		return idemObs{status: "OPERATION_CONFLICT"}
	}
	if sc != IdemStateExecuting {
		return m.obs("NOT_IN_PROGRESS", 0, 0)
	}
	if m.usedBy(op) {
		return idemObs{status: "OPERATION_CONFLICT"}
	}
	st, status := "FAILED_RETRYABLE", "MARKED_RETRYABLE"
	if d == IdemAbandon {
		st, status = "ABANDONED", "MARKED_ABANDONED"
	}
	m.set("st", st, "rev", m.num("rev")+1, "lop", op, "lk", "fail-"+d.String(), "lrd", "")
	return m.obs(status, 0, retention)
}

func (m *idemModel) release(o IdemOwner, op string) idemObs {
	if s, ok := m.owned(o, true); !ok {
		return idemObs{status: s}
	}
	switch sc := m.sc(); {
	case sc == IdemStateReleased && m.get("lop") == op:
		return m.obs("ALREADY_RELEASED_SAME_OPERATION", 0, -1)
	case sc == IdemStateReleased:
		return idemObs{status: "OPERATION_CONFLICT"}
	case sc != IdemStateClaimed:
		return m.obs("EXECUTION_ALREADY_STARTED", 0, 0)
	case op == m.get("cop") || op == m.get("lop"):
		return idemObs{status: "OPERATION_CONFLICT"}
	}
	m.set("st", "RELEASED", "rev", m.num("rev")+1, "lop", op, "lk", "release", "lrd", "")
	return m.obs("RELEASED_BEFORE_EXECUTION", 0, -1)
}

// idemObserve turns a facade result into an idemObs shaped like want (a
// positive remainder where the model predicts one).
func idemObserve(status fmt.Stringer, rec IdemRecord, resp IdemResponse, want idemObs) idemObs {
	o := idemObs{status: status.String(), state: rec.State, att: rec.Attempt, rev: rec.StateRevision,
		lease: rec.Lease.Milliseconds(), ttl: rec.TTL.Milliseconds(), resp: resp}
	if want.lease == -1 && o.lease > 0 {
		o.lease = -1
	}
	if want.ttl == -1 && o.ttl > 0 {
		o.ttl = -1
	}
	if len(o.resp.Payload) == 0 {
		o.resp.Payload = nil
	}
	return o
}

// TestIdemPropertyLuaMatchesReference drives seeded random sequences (3
// seeds x 600 steps per mode) of
// claim/inspect/start/renew/complete/fail/release calls by three owners
// (current, stale and foreign handles; operation ids drawn from a small
// shared pool so they collide), lease expiry, record expiry, lost replies
// (the caller does not learn the handle and must inspect) and exact
// repeats of the previous call through both program modes, and compares
// every reply and the stored hash with the Go model. Invariants checked
// on every step: the attempt never goes down while the record lives, the
// revision rises by exactly one per write, and an EXECUTING record whose
// lease expired is never claimed by anyone.
func TestIdemPropertyLuaMatchesReference(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	client := standaloneClient(t, s)
	admin := s.Admin()
	seen := map[string]bool{}
	counts := map[string]int{}
	defer func() { t.Logf("statuses reached: %v", counts) }()
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(t, err)
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed-%d", mode, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 0x1de))
				k := idemKey(t, testBuilder(t), fmt.Sprintf("property-%s-%d", mode, seed))
				m := &idemModel{}
				tokens := []string{"tok-a", "tok-b", "tok-c"}
				ops := []string{"op-1", "op-2", "op-3", "op-4", "op-5"}
				known := map[string]int64{} // the attempt each token's caller learned
				pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
				var repeat func() (idemObs, idemObs)
				lastAtt, lastRev := int64(0), int64(0)
				for i := range 600 {
					where := fmt.Sprintf("step %d", i)
					tok := pick(tokens)
					if m.present && r.IntN(2) == 0 {
						tok = m.get("own") // mostly the record's owner, so transitions apply
					}
					handle := IdemOwner{Owner: []byte(tok), Attempt: max(1, known[tok])}
					switch r.IntN(4) {
					case 0, 1: // the current attempt
						handle.Attempt = max(1, m.num("att"))
					case 2: // a stale handle (before a takeover)
						handle.Attempt = max(1, m.num("att")-1)
					}
					fp := testFingerprint
					if r.IntN(12) == 0 {
						fp = otherFingerprint
					}
					codec, pol := "http-v1", "rev-7"
					if r.IntN(15) == 0 {
						pol = "rev-8"
					}
					lost := r.IntN(4) == 0
					var call func() (idemObs, idemObs)
					switch roll := r.IntN(100); {
					case roll < 24:
						c := IdemClaimRequest{Attempt: IdemAttempt{Owner: []byte(tok), OperationID: []byte(pick(ops))}, Fingerprint: fp,
							Lease: time.Hour, Retention: time.Duration(10+r.IntN(3)*10) * time.Minute, CodecID: codec, PolicyRevision: pol}
						call = func() (idemObs, idemObs) {
							want := m.claim(c)
							res, err := e.IdempotencyClaim(ctx, k, c)
							require.NoError(t, err, where)
							if h, ok := res.Owned(c.Attempt); ok && !lost {
								known[tok] = h.Attempt
							}
							return want, idemObserve(res.Status, res.Record, res.Response, want)
						}
					case roll < 34:
						op := pick(ops)
						if m.present && r.IntN(2) == 0 {
							op = m.get("cop")
						}
						c := IdemInspectRequest{Attempt: IdemAttempt{Owner: []byte(tok), OperationID: []byte(op)}, Fingerprint: fp, CodecID: codec, PolicyRevision: pol}
						call = func() (idemObs, idemObs) {
							want := m.inspect(c)
							res, err := e.IdempotencyInspect(ctx, k, c)
							require.NoError(t, err, where)
							if res.Status == IdemInspectClaimedSameOperation || res.Status == IdemInspectExecutingSameOperation {
								known[tok] = res.Record.Attempt // a lost claim reply recovered
							}
							return want, idemObserve(res.Status, res.Record, res.Response, want)
						}
					case roll < 48:
						op := pick(ops)
						call = func() (idemObs, idemObs) {
							want := m.start(handle, op, time.Hour.Milliseconds())
							res, err := e.IdempotencyStart(ctx, k, handle, []byte(op), time.Hour)
							require.NoError(t, err, where)
							return want, idemObserve(res.Status, res.Record, IdemResponse{}, want)
						}
					case roll < 57:
						op := pick(ops)
						lease := time.Duration(30+r.IntN(30)) * time.Minute
						call = func() (idemObs, idemObs) {
							want := m.renew(handle, op, lease.Milliseconds())
							res, err := e.IdempotencyRenew(ctx, k, handle, []byte(op), lease)
							require.NoError(t, err, where)
							return want, idemObserve(res.Status, res.Record, IdemResponse{}, want)
						}
					case roll < 69:
						req := IdemCompleteRequest{Owner: handle, OperationID: []byte(pick(ops)), ReplayTTL: 2 * time.Hour,
							Response: IdemResponse{Version: 1 + r.Int64N(2), Digest: []string{testDigest, otherFingerprint}[r.IntN(2)], Payload: []byte(fmt.Sprintf("body-%d", r.IntN(3)))}}
						call = func() (idemObs, idemObs) {
							want := m.complete(req)
							res, err := e.IdempotencyComplete(ctx, k, req)
							require.NoError(t, err, where)
							return want, idemObserve(res.Status, res.Record, IdemResponse{}, want)
						}
					case roll < 77:
						op, d := pick(ops), IdemDisposition(1+r.IntN(2))
						call = func() (idemObs, idemObs) {
							want := m.fail(handle, op, d, (3 * time.Hour).Milliseconds())
							res, err := e.IdempotencyFail(ctx, k, handle, []byte(op), d, 3*time.Hour)
							require.NoError(t, err, where)
							return want, idemObserve(res.Status, res.Record, IdemResponse{}, want)
						}
					case roll < 85:
						op := pick(ops)
						call = func() (idemObs, idemObs) {
							want := m.release(handle, op)
							res, err := e.IdempotencyRelease(ctx, k, handle, []byte(op))
							require.NoError(t, err, where)
							return want, idemObserve(res.Status, res.Record, IdemResponse{}, want)
						}
					case roll < 89: // the processing lease ends
						if m.present && (m.sc() == IdemStateClaimed || m.sc() == IdemStateExecuting) {
							require.NoError(t, admin.PExpire(ctx, k.Redis(), time.Duration(m.num("gr")/2)*time.Millisecond).Err())
							m.expired = true
						}
						continue
					case roll < 94: // the record expires (an ABANDONED record's retention too)
						require.NoError(t, admin.Del(ctx, k.Redis()).Err())
						m.present, m.expired, m.f = false, false, nil
						lastAtt, lastRev = 0, 0
						continue
					default: // an exact repeat of the previous call (its reply was lost)
						if repeat == nil {
							continue
						}
						call = repeat
					}
					want, got := call()
					repeat = call
					require.Equal(t, want, got, "%s", where)
					seen[want.status] = true
					counts[want.status]++
					if lost { // the reply was lost: the caller repeats the same call
						want, got = call()
						require.Equal(t, want, got, "%s repeated", where)
						seen[want.status] = true
						counts[want.status]++
					}
					if m.present {
						h, err := admin.HGetAll(ctx, k.Redis()).Result()
						require.NoError(t, err)
						require.Equal(t, m.f, h, "%s stored record", where)
						require.Positive(t, admin.PTTL(ctx, k.Redis()).Val(), "%s: the record has a TTL", where)
						att, rev := m.num("att"), m.num("rev")
						require.GreaterOrEqual(t, att, lastAtt, "%s: attempts never go back", where)
						require.True(t, rev == lastRev || rev == lastRev+1, "%s: one revision per write (%d after %d)", where, rev, lastRev)
						lastAtt, lastRev = att, rev
					} else {
						require.Zero(t, admin.Exists(ctx, k.Redis()).Val(), where)
					}
				}
			})
		}
	}
	for _, want := range []string{"ACQUIRED", "REPLAYED_ACQUIRE", "TAKEN_OVER_CLAIMED", "COMPLETED_REPLAY", "IN_PROGRESS", "RECOVERY_REQUIRED",
		"FINGERPRINT_MISMATCH", "OWNER_OPERATION_CONFLICT", "POLICY_MISMATCH", "CLAIMED_SAME_OPERATION", "EXECUTING_SAME_OPERATION",
		"STARTED", "ALREADY_STARTED_SAME_OPERATION", "NOT_OWNER", "NOT_CLAIMED", "OPERATION_CONFLICT", "RENEWED", "NOT_IN_PROGRESS",
		"COMPLETED", "ALREADY_COMPLETED_SAME_RESULT", "RESPONSE_CONFLICT", "MARKED_RETRYABLE", "MARKED_ABANDONED",
		"ALREADY_MARKED_SAME_OPERATION", "RELEASED_BEFORE_EXECUTION", "ALREADY_RELEASED_SAME_OPERATION", "EXECUTION_ALREADY_STARTED", "ABSENT"} {
		assert.True(t, seen[want], "the random sequences never reached %s", want)
	}
}
