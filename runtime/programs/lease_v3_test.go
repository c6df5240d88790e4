package programs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// leaseState is one state a lease key can be found in.
type leaseState struct {
	name  string
	value string        // a string value ("" with hash: a hash)
	hash  bool          // a hash instead of a string
	ttl   time.Duration // 0: no TTL
}

// leaseStates are the states the v2/v3 differential runs an attempt
// against: absent, the attempt's own envelope, the same owner under another
// operation, another owner (one whose id embeds the attempt's), malformed
// values, no TTL, another type, and the envelopes of random attempts.
func leaseStates(rng *rand.Rand, at LeaseAttempt) []leaseState {
	own := string(mustEnvelope(at))
	o, op := string(at.Owner), string(at.OperationID)
	out := []leaseState{
		{name: "absent"},
		{name: "own", value: own, ttl: 30 * time.Second},
		{name: "own-no-ttl", value: own},
		{name: "same-owner-other-op", value: string(mustEnvelope(LeaseAttempt{Owner: at.Owner, OperationID: variant(at.OperationID, 'x')})), ttl: 20 * time.Second},
		{name: "owner-prefix", value: string(mustEnvelope(LeaseAttempt{Owner: variant(at.Owner, ':'), OperationID: at.OperationID})), ttl: 20 * time.Second},
		{name: "hash", hash: true, ttl: time.Minute},
		{name: "plain", value: "plain", ttl: time.Minute},
		{name: "no-op", value: "L1:" + fmt.Sprint(len(o)) + ":" + o + ":", ttl: time.Minute},
		{name: "long-length", value: "L1:" + fmt.Sprint(len(o)+1) + ":" + o + ":" + op, ttl: time.Minute},
		{name: "leading-zero", value: "L1:0" + fmt.Sprint(len(o)) + ":" + o + ":" + op, ttl: time.Minute},
		{name: "op-too-long", value: "L1:" + fmt.Sprint(len(o)) + ":" + o + ":" + strings.Repeat("p", 129), ttl: time.Minute},
	}
	for i := range 4 {
		other := randomAttempt(rng)
		out = append(out, leaseState{name: fmt.Sprintf("random-%d", i), value: string(mustEnvelope(other)), ttl: 20 * time.Second})
	}
	return out
}

// variant is another valid id: id with c appended, or with its last byte
// changed when it is already 128 bytes long.
func variant(id []byte, c byte) []byte {
	v := append([]byte(nil), id...)
	if len(v) < maxLeaseIDBytes {
		return append(v, c)
	}
	v[len(v)-1]++
	return v
}

func mustEnvelope(a LeaseAttempt) []byte {
	b, ok := leaseEnvelope(a)
	if !ok {
		panic("invalid attempt")
	}
	return b
}

// randomAttempt draws ids of 1..128 bytes over an alphabet rich in the
// envelope's own separators and digits, and arbitrary bytes.
func randomAttempt(rng *rand.Rand) LeaseAttempt {
	id := func() []byte {
		b := make([]byte, 1+rng.IntN(128))
		for i := range b {
			if rng.IntN(4) == 0 {
				b[i] = byte(rng.IntN(256))
			} else {
				b[i] = ":L1029o"[rng.IntN(7)]
			}
		}
		return b
	}
	return LeaseAttempt{Owner: id(), OperationID: id()}
}

func setLeaseState(ctx context.Context, t *testing.T, admin redis.UniversalClient, k string, st leaseState) {
	t.Helper()
	require.NoError(t, admin.Del(ctx, k).Err())
	switch {
	case st.hash:
		require.NoError(t, admin.HSet(ctx, k, "f", "v").Err())
		if st.ttl > 0 {
			require.NoError(t, admin.PExpire(ctx, k, st.ttl).Err())
		}
	case st.value != "":
		require.NoError(t, admin.Set(ctx, k, st.value, st.ttl).Err())
	}
}

// leaseSnapshot is what a call leaves at the key: type, value, TTL set.
func leaseSnapshot(ctx context.Context, t *testing.T, admin redis.UniversalClient, k string) string {
	t.Helper()
	typ := admin.Type(ctx, k).Val()
	pttl := admin.PTTL(ctx, k).Val()
	if typ != "string" {
		return fmt.Sprintf("%s ttl=%v", typ, pttl > 0)
	}
	return fmt.Sprintf("string %q ttl=%v", admin.Get(ctx, k).Val(), pttl > 0)
}

// TestLeaseV3MatchesV2 is the differential property: for random attempts
// (ids full of ':' and digits, and arbitrary bytes) against every state a
// key can be in, lease-acquire-v3 and lease-release-v3 report what v2
// reports (status, outcome, PTTL within the time the calls take, deleted)
// and leave the same state, in both program modes.
func TestLeaseV3MatchesV2(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	admin := s.Admin()
	leaseModes(t, cat, standaloneClient(t, s), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		rng := rand.New(rand.NewPCG(7, uint64(len(mode))))
		bld := testBuilder(t)
		k2, k3 := leaseKey(t, bld, "diff-v2-"+string(mode)), leaseKey(t, bld, "diff-v3-"+string(mode))
		for i := range 12 {
			at := randomAttempt(rng)
			if i == 0 {
				at = LeaseAttempt{Owner: []byte("o1"), OperationID: []byte("op1")}
			}
			ttl := time.Duration(1+rng.Int64N(MaxLeaseTTL.Milliseconds())) * time.Millisecond
			for _, st := range leaseStates(rng, at) {
				name := fmt.Sprintf("attempt %d state %s", i, st.name)
				setLeaseState(ctx, t, admin, k2.Redis(), st)
				setLeaseState(ctx, t, admin, k3.Redis(), st)
				a2, err := e.LeaseAcquireV2(ctx, k2, at, ttl)
				require.NoError(t, err, name)
				a3, err := e.LeaseAcquireV3(ctx, k3, at, ttl)
				require.NoError(t, err, name)
				assert.Equal(t, a2.Status, a3.Status, name)
				assert.Equal(t, a2.Outcome(), a3.Outcome(), name)
				assert.InDelta(t, a2.PTTL.Milliseconds(), a3.PTTL.Milliseconds(), 1000, name)
				assert.Equal(t, leaseSnapshot(ctx, t, admin, k2.Redis()), leaseSnapshot(ctx, t, admin, k3.Redis()), name)

				setLeaseState(ctx, t, admin, k2.Redis(), st)
				setLeaseState(ctx, t, admin, k3.Redis(), st)
				r2, err := e.LeaseReleaseV2(ctx, k2, at)
				require.NoError(t, err, name)
				r3, err := e.LeaseReleaseV3(ctx, k3, at)
				require.NoError(t, err, name)
				assert.Equal(t, r2, r3, name)
				assert.Equal(t, leaseSnapshot(ctx, t, admin, k2.Redis()), leaseSnapshot(ctx, t, admin, k3.Redis()), name)
			}
		}
	})
}

// TestLeaseV3RefusesInvalidAttemptsBeforeSending: v3 stores the envelope
// as sent, so the host checks the ids and the TTL; an invalid attempt is
// v2's INVALID and no command reaches Redis.
func TestLeaseV3RefusesInvalidAttemptsBeforeSending(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	e, rec := recordingExecutor(t, s)
	k := leaseKey(t, testBuilder(t), "v3-invalid")
	ok := LeaseAttempt{Owner: []byte("o1"), OperationID: []byte("op1")}
	long := []byte(strings.Repeat("x", 129))
	attempts := map[string]LeaseAttempt{
		"empty-owner": {OperationID: ok.OperationID}, "long-owner": {Owner: long, OperationID: ok.OperationID},
		"empty-op": {Owner: ok.Owner}, "long-op": {Owner: ok.Owner, OperationID: long},
	}
	for name, at := range attempts {
		r, err := e.LeaseAcquireV3(ctx, k, at, time.Minute)
		require.NoError(t, err, name)
		assert.Equal(t, LeaseAcquireInvalid, r.Status, name)
		rel, err := e.LeaseReleaseV3(ctx, k, at)
		require.NoError(t, err, name)
		assert.Equal(t, LeaseReleaseInvalid, rel.Status, name)
	}
	for _, ttl := range []time.Duration{0, -time.Second, 999 * time.Microsecond, MaxLeaseTTL + time.Millisecond} {
		r, err := e.LeaseAcquireV3(ctx, k, ok, ttl)
		require.NoError(t, err, ttl.String())
		assert.Equal(t, LeaseAcquireInvalid, r.Status, ttl.String())
		assert.Zero(t, r.PTTL)
	}
	assert.Empty(t, rec.take(), "nothing is sent for an invalid attempt")
	r, err := e.LeaseAcquireV3(ctx, k, LeaseAttempt{Owner: long[:128], OperationID: long[:128]}, MaxLeaseTTL)
	require.NoError(t, err)
	assert.Equal(t, LeaseAcquired, r.Status)
	assert.Equal(t, MaxLeaseTTL, r.PTTL)
	assert.NotEmpty(t, rec.take())
}

// TestLeaseV3RedisRefusesBadPX is the check v3 leaves to Redis: whatever
// reaches it as a TTL, SET PX refuses anything but a positive integer, so
// no lease without a valid expiry is ever written.
func TestLeaseV3RedisRefusesBadPX(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	p, ok := cat.Program(leaseAcquireV3)
	require.True(t, ok)
	c := standaloneClient(t, s)
	k := leaseKey(t, testBuilder(t), "v3-bad-px").Redis()
	for _, ttl := range []string{"0", "-1", "abc", "1.5", "", "99999999999999999999"} {
		err := c.Eval(ctx, p.Source(), []string{k}, "L1:2:o1:op1", ttl).Err()
		require.Error(t, err, "ttl %q", ttl)
		assert.Zero(t, s.Admin().Exists(ctx, k).Val(), "ttl %q wrote", ttl)
	}
}

// TestLeaseV3DecodeShort: the reply is untrusted; only the integer 1 or a
// well-formed tuple of the manifest's arity decodes.
func TestLeaseV3DecodeShort(t *testing.T) {
	cat := mustCatalog(t)
	for _, id := range []string{leaseAcquireV3, leaseReleaseV3} {
		p, ok := cat.Program(id)
		require.True(t, ok)
		m, spec := &cat.manifest, &p.spec
		r, err := decodeShort(m, spec, int64(1))
		require.NoError(t, err, id)
		assert.True(t, r.short)
		assert.Equal(t, int64(1), r.status)
		r, err = decodeShort(m, spec, []any{int64(1), int64(3), int64(0), int64(0)})
		require.NoError(t, err, id)
		assert.False(t, r.short)
		assert.Equal(t, int64(3), r.status)
		for name, v := range map[string]any{
			"zero": int64(0), "two": int64(2), "negative": int64(-1), "string": "1", "nil": nil,
			"short-tuple": []any{int64(1), int64(1), int64(0)},
			"long-tuple":  []any{int64(1), int64(1), int64(0), int64(0), int64(0)},
			"bytes-field": []any{int64(1), int64(2), int64(0), "5"},
			"bad-schema":  []any{int64(2), int64(2), int64(0), int64(5)},
			"bad-status":  []any{int64(1), int64(9), int64(0), int64(0)},
			"clock":       []any{int64(1), int64(2), int64(7), int64(5)},
			"huge":        make([]any, 1<<16),
		} {
			_, err := decodeShort(m, spec, v)
			require.ErrorIs(t, err, ErrIncompatible, "%s %s", id, name)
		}
	}
	// A spec wider than the reply arrays is refused in both forms, never
	// indexed past them.
	wide := &ProgramSpec{ID: "wide", Result: make([]ResultField, maxResultFields+1)}
	tuple := make([]any, 3+maxResultFields+1)
	for i := range tuple {
		tuple[i] = int64(1)
	}
	for _, v := range []any{int64(1), tuple} {
		_, err := decodeShort(&cat.manifest, wide, v)
		require.ErrorIs(t, err, ErrIncompatible)
	}
	// The facades derive the fields of a short reply from the request and
	// check tuples as v2 does.
	_, err := leaseAcquireResult(leaseAcquireV3, &reply{status: 5, n: 1, ints: [maxResultFields]int64{7}}, time.Minute)
	require.ErrorIs(t, err, ErrIncompatible)
}

// TestLeaseV3SharesKeysWithV1AndV2 is the rolling upgrade: a lease taken by
// one version is replayed, contended and released by the others.
func TestLeaseV3SharesKeysWithV1AndV2(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	leaseModes(t, cat, standaloneClient(t, s), func(t *testing.T, e *Executor, mode policy.ProgramMode) {
		k := leaseKey(t, testBuilder(t), "mixed-"+string(mode))
		a := LeaseAttempt{Owner: []byte("owner-a"), OperationID: []byte("job-1")}
		b := LeaseAttempt{Owner: []byte("owner-b"), OperationID: []byte("job-1")}
		acquires := map[string]func(context.Context, keys.Key, LeaseAttempt, time.Duration) (LeaseAcquireResult, error){
			"v1": e.LeaseAcquire, "v2": e.LeaseAcquireV2, "v3": e.LeaseAcquireV3,
		}
		releases := map[string]func(context.Context, keys.Key, LeaseAttempt) (LeaseReleaseResult, error){
			"v1": e.LeaseRelease, "v2": e.LeaseReleaseV2, "v3": e.LeaseReleaseV3,
		}
		for _, first := range []string{"v1", "v2", "v3"} {
			for _, other := range []string{"v1", "v2", "v3"} {
				name := first + "->" + other
				r, err := acquires[first](ctx, k, a, time.Minute)
				require.NoError(t, err, name)
				require.Equal(t, LeaseAcquired, r.Status, name)
				r, err = acquires[other](ctx, k, a, time.Minute)
				require.NoError(t, err, name)
				assert.Equal(t, LeaseReplayedSameOperation, r.Status, name)
				r, err = acquires[other](ctx, k, b, time.Minute)
				require.NoError(t, err, name)
				assert.Equal(t, LeaseContended, r.Status, name)
				rel, err := releases[other](ctx, k, b)
				require.NoError(t, err, name)
				assert.Equal(t, LeaseReleaseNotOwner, rel.Status, name)
				rel, err = releases[other](ctx, k, a)
				require.NoError(t, err, name)
				assert.Equal(t, LeaseReleased, rel.Status, name)
				assert.Equal(t, int64(1), rel.Deleted, name)
			}
		}
	})
}
