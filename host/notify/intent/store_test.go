package intent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// allValues dumps every key, string, hash field/value and stream field/
// value of a server, for leak checks.
func allValues(ctx context.Context, t *testing.T, c *redis.Client) string {
	t.Helper()
	var sb strings.Builder
	ks, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	for _, k := range ks {
		sb.WriteString(k + "\n")
		switch c.Type(ctx, k).Val() {
		case "hash":
			for f, v := range c.HGetAll(ctx, k).Val() {
				sb.WriteString(f + "=" + v + "\n")
			}
		case "stream":
			for _, m := range c.XRange(ctx, k, "-", "+").Val() {
				sb.WriteString(fmt.Sprint(m.Values) + "\n")
			}
		}
	}
	return sb.String()
}

func streamEntries(ctx context.Context, t *testing.T, c redis.UniversalClient, s *Store) int64 {
	t.Helper()
	var n int64
	for i := 0; i < s.Shards(); i++ {
		n += c.XLen(ctx, s.intents.Anchor(i).Redis()).Val()
	}
	return n
}

func runSubmitDedup(t *testing.T, s *Store, admin redis.UniversalClient) {
	ctx := ctxT(t)
	p := testPlan(t, "s3cret")
	first, err := s.Submit(ctx, []byte("order-42/welcome"), p)
	require.NoError(t, err)
	assert.False(t, first.Duplicate)
	assert.Equal(t, certainty.Applied, first.Certainty)
	assert.Equal(t, Pending, first.State)
	_, err = ParseID(string(first.ID))
	require.NoError(t, err)

	again, err := s.Submit(ctx, []byte("order-42/welcome"), p)
	require.NoError(t, err)
	assert.True(t, again.Duplicate)
	assert.False(t, again.OtherPlan)
	assert.Equal(t, first.ID, again.ID, "a repeat returns the first intent")

	other := testPlan(t, "other")
	diff, err := s.Submit(ctx, []byte("order-42/welcome"), other)
	require.NoError(t, err)
	assert.True(t, diff.Duplicate)
	assert.True(t, diff.OtherPlan, "the first intent stands")
	assert.Equal(t, certainty.Conflict, diff.Certainty)
	assert.Equal(t, first.ID, diff.ID)
	assert.Equal(t, int64(1), streamEntries(ctx, t, admin, s), "one entry for one key")

	st, err := s.Get(ctx, first.ID)
	require.NoError(t, err)
	assert.Equal(t, Pending, st.State)
	assert.Positive(t, st.Retention)

	second, err := s.Submit(ctx, []byte("order-43/welcome"), p)
	require.NoError(t, err)
	assert.NotEqual(t, first.ID, second.ID)
	_, err = s.Get(ctx, ID(strings.Repeat("0", 64)))
	require.ErrorIs(t, err, ErrNotFound)
}

func TestSubmitDedupStandalone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{})
	runSubmitDedup(t, s, srv.Admin())
	// The idempotency key never reaches Redis raw.
	dump := allValues(ctxT(t), t, srv.Admin())
	assert.NotContains(t, dump, "order-42")
}

func TestSubmitDedupCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s, err := New(newRuntime(t, runtimeConfig(&policy.Cluster{Seeds: cl.Seeds()})), Config{Shards: 8})
	require.NoError(t, err)
	runSubmitDedup(t, s, cl.Admin())
	// Shards spread over the primaries.
	slots := map[uint16]bool{}
	for i := 0; i < s.Shards(); i++ {
		slots[s.intents.Anchor(i).Slot()] = true
	}
	assert.Len(t, slots, 8)
}

// TestSubmitRequestDedupsOnTheFingerprint: two plans frozen from one
// request (rendered at different times) are a duplicate under
// SubmitRequest, and another request under the same key is a conflict;
// the first plan stands and one entry exists.
func TestSubmitRequestDedupsOnTheFingerprint(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{Shards: 1})
	ctx := ctxT(t)
	fp := sha256.Sum256([]byte("request-1"))
	first, err := s.SubmitRequest(ctx, []byte("k"), testPlan(t, "a"), fp)
	require.NoError(t, err)
	again, err := s.SubmitRequest(ctx, []byte("k"), testPlan(t, "b"), fp)
	require.NoError(t, err)
	assert.True(t, again.Duplicate)
	assert.False(t, again.OtherPlan, "same request, another frozen plan: a duplicate")
	assert.Equal(t, certainty.Applied, again.Certainty)
	assert.Equal(t, first.ID, again.ID)
	other, err := s.SubmitRequest(ctx, []byte("k"), testPlan(t, "a"), sha256.Sum256([]byte("request-2")))
	require.NoError(t, err)
	assert.True(t, other.OtherPlan)
	assert.Equal(t, certainty.Conflict, other.Certainty)
	assert.Equal(t, int64(1), streamEntries(ctx, t, srv.Admin(), s))

	// Existing answers what a submit would find, storing nothing.
	none, found, err := s.Existing(ctx, []byte("k2"), fp)
	require.NoError(t, err)
	assert.False(t, found)
	assert.Equal(t, certainty.NotApplied, none.Certainty)
	same, found, err := s.Existing(ctx, []byte("k"), fp)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, Submission{ID: first.ID, Duplicate: true, State: first.State, Attempts: first.Attempts,
		Certainty: certainty.Applied}, same)
	diff, found, err := s.Existing(ctx, []byte("k"), sha256.Sum256([]byte("request-2")))
	require.NoError(t, err)
	require.True(t, found)
	assert.True(t, diff.OtherPlan)
	assert.Equal(t, certainty.Conflict, diff.Certainty)
	_, _, err = s.Existing(ctx, nil, fp)
	require.ErrorIs(t, err, ErrInvalidRequest)
	assert.Equal(t, int64(1), streamEntries(ctx, t, srv.Admin(), s))
}

// TestSubmitConcurrentDedup: 16 submitters of one key released together
// by a barrier: exactly one creates the intent, all get its id, one entry.
func TestSubmitConcurrentDedup(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{Shards: 1})
	ctx := ctxT(t)
	const n = 16
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		subs  = make([]Submission, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			subs[i], errs[i] = s.Submit(ctx, []byte("same-key"), testPlan(t, "x"))
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range n {
		require.NoError(t, errs[i])
		assert.Equal(t, subs[0].ID, subs[i].ID)
		if !subs[i].Duplicate {
			created++
		}
	}
	assert.Equal(t, 1, created)
	assert.Equal(t, int64(1), streamEntries(ctx, t, srv.Admin(), s))
}

// TestSubmitLostReplyIsIndeterminateAndReconciled: the submit reaches
// Redis but its reply is held back (proxy stall): INDETERMINATE with the
// id known; repeating with the same key finds the first intent.
func TestSubmitLostReplyIsIndeterminateAndReconciled(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	cfg := runtimeConfigTimeout(&policy.Standalone{Endpoint: p.Addr()}, 300*time.Millisecond)
	s, err := New(newRuntime(t, cfg), Config{Shards: 1})
	require.NoError(t, err)
	ctx := ctxT(t)
	_, err = s.Submit(ctx, []byte("warm-up"), testPlan(t, "x")) // loads the script, opens the connection
	require.NoError(t, err)

	p.Stall()
	lost, err := s.Submit(ctx, []byte("k-lost"), testPlan(t, "x"))
	require.Error(t, err)
	assert.Equal(t, certainty.Indeterminate, lost.Certainty)
	require.NotEmpty(t, lost.ID)
	p.Passthrough()
	require.Eventually(t, func() bool { return srv.Admin().XLen(ctx, s.intents.Anchor(0).Redis()).Val() == 2 },
		10*time.Second, 5*time.Millisecond, "the stalled submit applied on the server")

	again, err := s.Submit(ctx, []byte("k-lost"), testPlan(t, "x"))
	require.NoError(t, err)
	assert.True(t, again.Duplicate, "the repeat finds the first submit: reconciled")
	assert.False(t, again.OtherPlan)
	assert.Equal(t, lost.ID, again.ID)
	assert.Equal(t, int64(2), srv.Admin().XLen(ctx, s.intents.Anchor(0).Redis()).Val())
}

// readOneThroughProxy starts a store whose Redis is behind a fault proxy
// (300ms command timeout), submits one intent on its one shard and reads
// it as consumer c1.
func readOneThroughProxy(t *testing.T) (*redistest.Server, *redistest.Proxy, *Store, Submission, []Delivery) {
	t.Helper()
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	cfg := runtimeConfigTimeout(&policy.Standalone{Endpoint: p.Addr()}, 300*time.Millisecond)
	s, err := New(newRuntime(t, cfg), Config{Shards: 1})
	require.NoError(t, err)
	sub, ds := submitAndRead(t, s, "k")
	return srv, p, s, sub, ds
}

// submitAndRead submits one intent under idempotency key on s's shard 0,
// creates the group and reads the entry as consumer c1.
func submitAndRead(t *testing.T, s *Store, key string) (Submission, []Delivery) {
	t.Helper()
	ctx := ctxT(t)
	sub, err := s.Submit(ctx, []byte(key), testPlan(t, "x"))
	require.NoError(t, err)
	ready, err := s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	require.True(t, ready)
	ds, err := s.Read(ctx, 0, "c1", 1, 0)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	return sub, ds
}

// TestFinalizeLostReplyIsReconciled: a finalize whose reply is lost is
// repeated: ALREADY_FINAL, the entry acknowledged once, one DELIVERED.
func TestFinalizeLostReplyIsReconciled(t *testing.T) {
	srv, p, s, sub, ds := readOneThroughProxy(t)
	ctx := ctxT(t)
	require.NoError(t, ds[0].Err)
	assert.Equal(t, sub.ID, ds[0].ID)
	c, err := s.Claim(ctx, &ds[0], 3)
	require.NoError(t, err)
	require.Equal(t, Proceed, c.Status)
	// Warm the finalize script so the stalled call is the program itself.
	_, err = s.RecordReceipt(ctx, ID(strings.Repeat("1", 64)), Receipt{Attempt: 1, Transport: "primary", Outcome: transport.Accepted, At: testNow})
	require.ErrorIs(t, err, ErrNotFound)

	r := Receipt{Attempt: c.Attempt, Transport: "primary", Outcome: transport.Accepted, Code: "http-202", ProviderRef: "m-1", At: testNow}
	p.Stall()
	_, err = s.Finalize(ctx, &ds[0], r, true)
	require.Error(t, err)
	assert.Equal(t, certainty.Indeterminate, outcomeOf(err))
	p.Passthrough()
	require.Eventually(t, func() bool {
		return srv.Admin().XPending(ctx, s.intents.Anchor(0).Redis(), s.Group()).Val().Count == 0
	}, 10*time.Second, 5*time.Millisecond, "the stalled finalize applied")
	f, err := s.Finalize(ctx, &ds[0], r, true)
	require.NoError(t, err)
	assert.True(t, f.AlreadyFinal)
	assert.Equal(t, Delivered, f.State)
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, Delivered, st.State)
	require.Len(t, st.Receipts, 1, "the repeated receipt appears once")
	assert.Equal(t, r, st.Receipts[0])
}

// TestClaimAfterAnUnfinalizedAttemptIsInDoubt: a second claim of an entry
// whose attempt 1 was claimed and never finalized does not begin attempt
// 2: InDoubt, the intent INDETERMINATE, the entry acknowledged; a third is
// consumer dedup.
func TestClaimAfterAnUnfinalizedAttemptIsInDoubt(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{Shards: 1})
	ctx := ctxT(t)
	sub, ds := submitAndRead(t, s, "k")
	c, err := s.Claim(ctx, &ds[0], 6)
	require.NoError(t, err)
	require.Equal(t, Claim{Status: Proceed, Attempt: 1, State: Delivering}, c)

	again, err := s.Claim(ctx, &ds[0], 6)
	require.NoError(t, err)
	assert.Equal(t, Claim{Status: InDoubt, Attempt: 1, State: Indeterminate}, again)
	assert.Equal(t, "in-doubt", again.Status.String())
	assert.Zero(t, srv.Admin().XPending(ctx, s.intents.Anchor(0).Redis(), s.Group()).Val().Count, "acknowledged")
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, Indeterminate, st.State)
	assert.Equal(t, 1, st.Attempts)

	third, err := s.Claim(ctx, &ds[0], 6)
	require.NoError(t, err)
	assert.Equal(t, AlreadyFinal, third.Status)
}

// TestClaimLostReplyIsInDoubt: a claim whose reply is lost applied; the
// consumer cannot know, so it leaves the entry pending, and the next
// claim finds DELIVERING: InDoubt, never a send. This is the price of the
// rule: the intent ends INDETERMINATE although nothing was sent.
func TestClaimLostReplyIsInDoubt(t *testing.T) {
	srv, p, s, sub, ds := readOneThroughProxy(t)
	ctx := ctxT(t)
	// Warm the claim script so the stalled call is the program itself.
	gone, err := s.Claim(ctx, &Delivery{Shard: 0, EntryID: "0-1", ID: ID(strings.Repeat("1", 64))}, 3)
	require.NoError(t, err)
	require.Equal(t, Gone, gone.Status)
	loc, err := s.locationOf(sub.ID)
	require.NoError(t, err)
	_, record, err := s.keysOf(loc)
	require.NoError(t, err)

	p.Stall()
	_, err = s.Claim(ctx, &ds[0], 3)
	require.Error(t, err)
	assert.Equal(t, certainty.Indeterminate, outcomeOf(err))
	p.Passthrough()
	require.Eventually(t, func() bool {
		return srv.Admin().HGet(ctx, record.Redis(), "st").Val() == "2"
	}, 10*time.Second, 5*time.Millisecond, "the stalled claim applied")
	c, err := s.Claim(ctx, &ds[0], 3)
	require.NoError(t, err)
	assert.Equal(t, Claim{Status: InDoubt, Attempt: 1, State: Indeterminate}, c)
}

// TestReceiptsReduceMonotonically: whatever order out-of-band ACCEPTED
// and REJECTED_DEFINITE receipts arrive in for an intent never claimed,
// the result is DELIVERED and both are logged (for a claimed attempt,
// TestReceiptsReduceRegardlessOfOrder enumerates every order).
func TestReceiptsReduceMonotonically(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{Shards: 1})
	ctx := ctxT(t)
	acc := Receipt{Attempt: 1, Transport: "primary", Outcome: transport.Accepted, At: testNow}
	rej := Receipt{Attempt: 1, Transport: "primary", Outcome: transport.RejectedDefinite, Code: "http-503", At: testNow}
	for name, order := range map[string][]Receipt{"accepted-first": {acc, rej}, "rejected-first": {rej, acc}} {
		sub, err := s.Submit(ctx, []byte(name), testPlan(t, "x"))
		require.NoError(t, err)
		for _, r := range order {
			_, err := s.RecordReceipt(ctx, sub.ID, r)
			require.NoError(t, err)
		}
		st, err := s.Get(ctx, sub.ID)
		require.NoError(t, err)
		assert.Equal(t, Delivered, st.State, name)
		assert.Len(t, st.Receipts, 2, name)
	}
}

func TestConfigAndRequestBounds(t *testing.T) {
	srv := redistest.StartStandalone(t)
	rt := newRuntime(t, runtimeConfig(&policy.Standalone{Endpoint: srv.Addr()}))
	for _, c := range []Config{{Shards: 257}, {Retention: 31 * 24 * time.Hour}, {MaxLen: -1}, {Group: "Bad Group"}} {
		_, err := New(rt, c)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", c)
	}
	s, err := New(rt, Config{})
	require.NoError(t, err)
	ctx := ctxT(t)
	sub, err := s.Submit(ctx, nil, testPlan(t, "x"))
	require.ErrorIs(t, err, ErrInvalidRequest)
	assert.Equal(t, certainty.Rejected, sub.Certainty)
	_, err = s.Submit(ctx, bytes.Repeat([]byte("k"), MaxIdempotencyKeyBytes+1), testPlan(t, "x"))
	require.ErrorIs(t, err, ErrInvalidRequest)
	bad := testPlan(t, "x")
	bad.Transports = []string{"a", "a"}
	_, err = s.Submit(ctx, []byte("k"), bad)
	require.ErrorIs(t, err, ErrInvalidPlan)
	_, err = s.Get(ctx, "not-an-id")
	require.ErrorIs(t, err, ErrInvalidRequest)
	assert.Zero(t, srv.Admin().DBSize(ctx).Val(), "nothing was sent")
}

// TestStreamKeysNameTheShardStreams: StreamKeys names the stream a submit
// appends to and the quarantine stream of the same slot; a shard out of
// range is refused.
func TestStreamKeysNameTheShardStreams(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{Shards: 1})
	ctx := ctxT(t)
	_, err := s.Submit(ctx, []byte("k"), testPlan(t, "x"))
	require.NoError(t, err)
	stream, quarantine, err := s.StreamKeys(0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), srv.Admin().XLen(ctx, stream).Val())
	assert.NotEqual(t, stream, quarantine)
	q, err := s.quarantineKey(0)
	require.NoError(t, err)
	assert.Equal(t, s.intents.Anchor(0).Slot(), q.Slot(), "one slot per shard")
	_, _, err = s.StreamKeys(1)
	require.ErrorIs(t, err, ErrInvalidRequest)
	_, _, err = s.StreamKeys(-1)
	require.ErrorIs(t, err, ErrInvalidRequest)
}
