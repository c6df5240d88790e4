package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/policy"
)

func standalone(t *testing.T, shards int) (*redistest.Server, *intent.Store) {
	srv := redistest.StartStandalone(t)
	return srv, newStore(t, &policy.Standalone{Endpoint: srv.Addr()}, shards)
}

func pollAll(ctx context.Context, t *testing.T, d *Dispatcher, shards int) int {
	t.Helper()
	n := 0
	for i := range shards {
		k, err := d.Poll(ctx, i)
		require.NoError(t, err)
		n += k
	}
	return n
}

func runDeliverOnce(t *testing.T, s *intent.Store) {
	ctx := ctxT(t)
	prim := newScripted("primary", accepted)
	obs := &counting{}
	d, err := New(s, baseConfig("c1", obs, slog.New(slog.DiscardHandler), &sleeps{}, &seq{}, prim))
	require.NoError(t, err)
	sub, err := s.Submit(ctx, []byte("k1"), testPlan(t, "primary"))
	require.NoError(t, err)
	assert.Equal(t, 1, pollAll(ctx, t, d, s.Shards()))
	calls := prim.Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, string(sub.ID), calls[0].IntentID)
	assert.Equal(t, uint32(1), calls[0].Attempt)
	assert.Equal(t, "email", calls[0].Channel)
	assert.Contains(t, calls[0].Recipient.Value(), secret)
	require.Len(t, calls[0].Parts, 2)
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Delivered, st.State)
	require.Len(t, st.Receipts, 1)
	assert.Equal(t, "m-1", st.Receipts[0].ProviderRef)
	assert.Equal(t, 1, obs.Get("final:DELIVERED"))
	assert.Equal(t, 1, obs.Get("dispatched:primary:ACCEPTED"))
	// Nothing left: a second poll sends nothing.
	assert.Equal(t, 0, pollAll(ctx, t, d, s.Shards()))
	assert.Len(t, prim.Calls(), 1)
}

func TestDeliverOnceStandalone(t *testing.T) {
	_, s := standalone(t, 2)
	runDeliverOnce(t, s)
}

func TestDeliverOnceCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	runDeliverOnce(t, newStore(t, &policy.Cluster{Seeds: cl.Seeds()}, 4))
}

// deadConsumer plays a consumer that read the one entry of shard 0 and
// died: before its claim (claim false), or after claiming attempt 1 of
// maxAttempts and, with send, after the transport accepted — in both
// cases before any finalize, so nothing was acknowledged.
func deadConsumer(ctx context.Context, t *testing.T, s *intent.Store, maxAttempts int, claim bool, send *scripted) intent.Delivery {
	t.Helper()
	ready, err := s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	require.True(t, ready)
	ds, err := s.Read(ctx, 0, "dead", 1, 0)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	if !claim {
		return ds[0]
	}
	c, err := s.Claim(ctx, &ds[0], maxAttempts)
	require.NoError(t, err)
	require.Equal(t, intent.Proceed, c.Status)
	require.Equal(t, 1, c.Attempt)
	if send != nil {
		r := send.Deliver(ctx, transport.Message{IntentID: string(ds[0].ID), Attempt: uint32(c.Attempt)})
		require.Equal(t, transport.Accepted, r.Outcome)
	}
	return ds[0]
}

// crashConfig reclaims after 50ms of idle time (server clock).
func crashConfig(obs Observer, per int, ts ...*scripted) Config {
	m := map[string]transport.Transport{}
	for _, tr := range ts {
		m[tr.name] = tr
	}
	return Config{Consumer: "alive", Transports: m, Base: time.Millisecond,
		Cap: 5 * time.Millisecond, CallTimeout: 10 * time.Millisecond, MinIdle: 50 * time.Millisecond,
		ReclaimEvery: time.Millisecond, MaxDeliveries: 5, AttemptsPerTransport: per, Observer: obs,
		Logger: slog.New(slog.DiscardHandler), Sleep: (&sleeps{}).Sleep, Random: &seq{}}
}

// pollUntilReclaimed polls shard 0 until the reclaim hands over the dead
// consumer's entry (once it has been idle for MinIdle on the server's
// clock; no earlier poll finds anything).
func pollUntilReclaimed(ctx context.Context, t *testing.T, d *Dispatcher) {
	t.Helper()
	require.Eventually(t, func() bool { n, err := d.Poll(ctx, 0); return err == nil && n == 1 }, 20*time.Second, 10*time.Millisecond)
}

// assertNothingPending checks shard 0's group has no pending entry.
func assertNothingPending(ctx context.Context, t *testing.T, s *intent.Store) {
	t.Helper()
	pending, _, _, err := s.Backlog(ctx, 0)
	require.NoError(t, err)
	assert.Zero(t, pending, "acknowledged")
}

// runCrashAfterClaimIsInDoubt: a consumer claimed attempt 1 (and, with
// sent, the primary accepted it), then died before the finalize. With per
// attempts per transport over primary + fallback, the consumer that
// reclaims the entry finds the record DELIVERING: the intent becomes
// INDETERMINATE and the entry is acknowledged, with no call on any
// transport — neither attempt 2 on the primary (per > 1) nor the fallback
// (per == 1, where v1 sent attempt 2 there). Without sent this is the
// price of the rule: INDETERMINATE, and nothing was ever sent.
func runCrashAfterClaimIsInDoubt(t *testing.T, s *intent.Store, per int, sent bool) {
	ctx := ctxT(t)
	prim, fb := newScripted("primary", accepted), newScripted("fallback", accepted)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary", "fallback"))
	require.NoError(t, err)
	var send *scripted
	if sent {
		send = prim
	}
	deadConsumer(ctx, t, s, 2*per, true, send)
	sentCalls := len(prim.Calls())

	obs, capt := &counting{}, newCapture()
	cfg := crashConfig(obs, per, prim, fb)
	cfg.Logger = slog.New(capt)
	d, err := New(s, cfg)
	require.NoError(t, err)
	pollUntilReclaimed(ctx, t, d)
	assert.Len(t, prim.Calls(), sentCalls, "no second call on the primary")
	assert.Empty(t, fb.Calls(), "never sent to the fallback")
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Indeterminate, st.State)
	assert.Equal(t, 1, st.Attempts, "no attempt 2 was begun")
	assert.Empty(t, st.Receipts)
	assertNothingPending(ctx, t, s)
	assert.Equal(t, 1, obs.Get("final:INDETERMINATE"), "counted as a final INDETERMINATE")
	assert.Zero(t, obs.Get("retried:primary")+obs.Get("retried:fallback"))
	out := capt.String()
	assert.Contains(t, out, "level=WARN")
	assert.Contains(t, out, "never finalized")
	assert.Contains(t, out, string(sub.ID))
	assert.NotContains(t, out, secret, "no recipient or content in the log")
	// Nothing left to do: later polls send nothing.
	assert.Equal(t, 0, pollAll(ctx, t, d, 1))
	assert.Len(t, prim.Calls(), sentCalls)
	assert.Empty(t, fb.Calls())
}

func TestCrashAfterClaimIsInDoubt(t *testing.T) {
	for _, tc := range []struct {
		name string
		per  int
		sent bool
	}{
		{"sent, one attempt per transport", 1, true},
		{"sent, three attempts per transport", 3, true},
		{"not sent, one attempt per transport", 1, false},
		{"not sent, three attempts per transport", 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := standalone(t, 1)
			runCrashAfterClaimIsInDoubt(t, s, tc.per, tc.sent)
		})
	}
}

func TestCrashAfterClaimIsInDoubtCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	runCrashAfterClaimIsInDoubt(t, newStore(t, &policy.Cluster{Seeds: cl.Seeds()}, 1), 1, true)
}

// TestCrashBeforeClaimRedelivers: a consumer that read the entry and died
// before its claim began nothing: the record is still PENDING, so the
// reclaiming consumer sends attempt 1 on the primary, once
// (at-least-once), and finalizes.
func TestCrashBeforeClaimRedelivers(t *testing.T) {
	_, s := standalone(t, 1)
	ctx := ctxT(t)
	prim, fb := newScripted("primary", accepted), newScripted("fallback", accepted)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary", "fallback"))
	require.NoError(t, err)
	deadConsumer(ctx, t, s, 2, false, nil)

	obs := &counting{}
	d, err := New(s, crashConfig(obs, 1, prim, fb))
	require.NoError(t, err)
	pollUntilReclaimed(ctx, t, d)
	calls := prim.Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, string(sub.ID), calls[0].IntentID)
	assert.Equal(t, uint32(1), calls[0].Attempt)
	assert.Empty(t, fb.Calls())
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Delivered, st.State)
	assertNothingPending(ctx, t, s)
	assert.Equal(t, 1, obs.Get("final:DELIVERED"))
}

// TestCrashAfterFinalizeBeforeAckIsConsumerDedup: the record is final but
// the entry still pending. The dispatcher's finalize acknowledges in the
// same atomic step, so the window is played by a receipt recorded without
// an acknowledgement (RecordReceipt runs the same finalize program with no
// entry id): the reclaiming consumer's claim is ALREADY_FINAL, it
// acknowledges the entry and calls no transport.
func TestCrashAfterFinalizeBeforeAckIsConsumerDedup(t *testing.T) {
	for _, tc := range []struct {
		receipt transport.Receipt
		want    intent.State
	}{
		{transport.Receipt{Outcome: transport.Accepted, Code: "http-202"}, intent.Delivered},
		{transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-550"}, intent.Failed},
	} {
		t.Run(tc.want.String(), func(t *testing.T) {
			_, s := standalone(t, 1)
			ctx := ctxT(t)
			prim, fb := newScripted("primary", accepted), newScripted("fallback", accepted)
			sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary", "fallback"))
			require.NoError(t, err)
			del := deadConsumer(ctx, t, s, 2, true, prim)
			_, err = s.RecordReceipt(ctx, del.ID, intent.Receipt{Attempt: 1, Transport: "primary", Outcome: tc.receipt.Outcome,
				Code: tc.receipt.Code, At: testNow})
			require.NoError(t, err)
			pending, _, _, err := s.Backlog(ctx, 0)
			require.NoError(t, err)
			require.Equal(t, int64(1), pending, "final, not acknowledged")

			obs := &counting{}
			d, err := New(s, crashConfig(obs, 1, prim, fb))
			require.NoError(t, err)
			pollUntilReclaimed(ctx, t, d)
			assert.Len(t, prim.Calls(), 1, "no second call: the state said final")
			assert.Empty(t, fb.Calls())
			st, err := s.Get(ctx, sub.ID)
			require.NoError(t, err)
			assert.Equal(t, tc.want, st.State)
			assert.Equal(t, 1, st.Attempts)
			assertNothingPending(ctx, t, s)
			assert.Zero(t, obs.Get("final:"+tc.want.String()), "consumer dedup brings nothing to a final state")
		})
	}
}

// TestFinalizeFailureAfterAcceptIsNeverResent: the primary accepted, then
// every finalize try failed (the proxy resets each connection before a
// byte of it reaches Redis): the entry stays pending with the record
// DELIVERING. The reclaim makes it INDETERMINATE and calls neither the
// primary again nor the fallback.
func TestFinalizeFailureAfterAcceptIsNeverResent(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	s := newStore(t, &policy.Standalone{Endpoint: p.Addr()}, 1)
	ctx := ctxT(t)
	prim, fb := newScripted("primary", accepted), newScripted("fallback", accepted)
	prim.setAfter(func() { p.ResetAfter(0) })
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary", "fallback"))
	require.NoError(t, err)
	obs, capt := &counting{}, newCapture()
	cfg := crashConfig(obs, 1, prim, fb)
	cfg.Logger = slog.New(capt)
	d, err := New(s, cfg)
	require.NoError(t, err)
	n, err := d.Poll(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, prim.Calls(), 1)
	require.Contains(t, capt.String(), "finalize failed")
	st, err := srv.Admin().HGet(ctx, recordKey(t, srv.Admin()), "st").Result()
	require.NoError(t, err)
	require.Equal(t, "2", st, "DELIVERING: the accepted send was not recorded")

	prim.setAfter(nil)
	p.Passthrough()
	require.Eventually(t, func() bool {
		_, err := d.Poll(ctx, 0)
		return err == nil && obs.Get("final:INDETERMINATE") == 1
	}, 20*time.Second, 10*time.Millisecond)
	assert.Len(t, prim.Calls(), 1, "never resent on the primary")
	assert.Empty(t, fb.Calls(), "never sent to the fallback")
	got, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Indeterminate, got.State)
	assert.Equal(t, 1, got.Attempts)
	assertNothingPending(ctx, t, s)
}

// recordKey finds the one intent record of a private server.
func recordKey(t *testing.T, c *redis.Client) string {
	t.Helper()
	ks := c.Keys(context.Background(), "*:notify:*:intent").Val()
	require.Len(t, ks, 1)
	return ks[0]
}

// pendingStream finds the one notify stream of a private server.
func pendingStream(t *testing.T, c *redis.Client) string {
	t.Helper()
	ks := c.Keys(context.Background(), "*:notify:*:stream").Val()
	require.Len(t, ks, 1)
	return ks[0]
}

// TestPoisonMessagesAreQuarantined: an entry that does not decode is
// quarantined at once; a valid entry delivered MaxDeliveries times (its
// consumers kept dying) is quarantined with its record, never sent.
func TestPoisonMessagesAreQuarantined(t *testing.T) {
	ctx := ctxT(t)
	p := quarantineTwo(ctx, t, "k")
	assert.Empty(t, p.tr.Calls(), "a poison message is never sent")
	st, err := p.s.Get(ctx, p.sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Quarantined, st.State)
	assert.Zero(t, p.srv.Admin().XPending(ctx, p.stream, p.s.Group()).Val().Count)
	q := p.srv.Admin().Keys(ctx, "*:notify:*:quarantine").Val()
	require.Len(t, q, 1)
	assert.Equal(t, int64(2), p.srv.Admin().XLen(ctx, q[0]).Val())
}

// quarantined is what quarantineTwo set up and ran.
type quarantined struct {
	srv    *redistest.Server
	s      *intent.Store
	tr     *scripted
	sub    intent.Submission
	stream string
	forged string // the undecodable entry's id
	d      *Dispatcher
}

// quarantineTwo puts twoPoisonEntries under key on a standalone server
// and polls a dispatcher (MaxDeliveries 3, consumers that crash) until
// both are quarantined: the valid one for its deliveries, the forged one
// as undecodable, each once.
func quarantineTwo(ctx context.Context, t *testing.T, key string) quarantined {
	t.Helper()
	srv, s := standalone(t, 1)
	tr := newScripted("primary", accepted)
	sub, stream, forged := twoPoisonEntries(ctx, t, srv, s, key)
	obs := &counting{}
	cfg := crashConfig(obs, 1, tr)
	cfg.MaxDeliveries = 3
	d, err := New(s, cfg)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := d.Poll(ctx, 0)
		return err == nil && obs.Get("quarantined:deliveries")+obs.Get("quarantined:undecodable") == 2
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, obs.Get("quarantined:deliveries"))
	require.Equal(t, 1, obs.Get("quarantined:undecodable"))
	return quarantined{srv: srv, s: s, tr: tr, sub: sub, stream: stream, forged: forged, d: d}
}

// twoPoisonEntries submits an intent under key and appends an entry
// that does not decode to shard 0's stream; two consumers then die with
// both (delivered once, then again by a reclaim). It returns the
// submission, the stream and the forged entry's id.
func twoPoisonEntries(ctx context.Context, t *testing.T, srv *redistest.Server, s *intent.Store, key string) (intent.Submission, string, string) {
	t.Helper()
	sub, err := s.Submit(ctx, []byte(key), testPlan(t, "primary"))
	require.NoError(t, err)
	stream := pendingStream(t, srv.Admin())
	forged, err := srv.Admin().XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"i", "garbage", "p", "x"}}).Result()
	require.NoError(t, err)
	ready, err := s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	require.True(t, ready)
	ds, err := s.Read(ctx, 0, "dead-1", 2, 0)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	require.NoError(t, ds[0].Err)
	require.ErrorIs(t, ds[1].Err, intent.ErrCorruptEntry)
	require.Eventually(t, func() bool {
		got, err := s.Reclaim(ctx, 0, "dead-2", time.Millisecond, 2)
		return err == nil && len(got.Deliveries) == 2
	}, 20*time.Second, 5*time.Millisecond)
	return sub, stream, forged
}

// TestIndeterminateIsNeverRetriedNorSentToAFallback.
func TestIndeterminateIsNeverRetriedNorSentToAFallback(t *testing.T) {
	_, s := standalone(t, 1)
	ctx := ctxT(t)
	prim, fb := newScripted("primary", unknown), newScripted("fallback", accepted)
	obs, sl := &counting{}, &sleeps{}
	d, err := New(s, baseConfig("c1", obs, slog.New(slog.DiscardHandler), sl, &seq{}, prim, fb))
	require.NoError(t, err)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary", "fallback"))
	require.NoError(t, err)
	pollAll(ctx, t, d, 1)
	assert.Len(t, prim.Calls(), 1)
	assert.Empty(t, fb.Calls(), "never sent to a fallback")
	assert.Empty(t, sl.Delays(), "never retried")
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Indeterminate, st.State)
	assert.Equal(t, 1, obs.Get("final:INDETERMINATE"))
	assert.Zero(t, obs.Get("retried:primary")+obs.Get("retried:fallback"))
	// A redelivery of the entry would find it final: nothing pending.
	assert.Equal(t, 0, pollAll(ctx, t, d, 1))
}

// TestDefiniteFailuresRetryWithJitterThenFallback: three definite
// rejections on the primary with the reference backoff and a scripted
// jitter (one RetryAfter honoured within the cap), then the fallback,
// immediately, which accepts.
func TestDefiniteFailuresRetryWithJitterThenFallback(t *testing.T) {
	_, s := standalone(t, 1)
	ctx := ctxT(t)
	slow := rejected
	slow.RetryAfter = time.Hour // capped at Cap
	prim := newScripted("primary", rejected, slow, rejected)
	fb := newScripted("fallback", accepted)
	obs, sl, rnd := &counting{}, &sleeps{}, &seq{vals: []int64{7_000_000, 40_000_000}}
	d, err := New(s, baseConfig("c1", obs, slog.New(slog.DiscardHandler), sl, rnd, prim, fb))
	require.NoError(t, err)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary", "fallback"))
	require.NoError(t, err)
	pollAll(ctx, t, d, 1)

	pc := prim.Calls()
	require.Len(t, pc, 3)
	for i, c := range pc {
		assert.Equal(t, uint32(i+1), c.Attempt)
		assert.Equal(t, string(sub.ID), c.IntentID)
	}
	fc := fb.Calls()
	require.Len(t, fc, 1)
	assert.Equal(t, uint32(4), fc[0].Attempt)
	// Base 100ms: retry 1 = 100ms + 7ms jitter; retry 2 = 200ms + 40ms
	// jitter, but the provider asked for an hour: the cap (2s) wins; the
	// fallback goes out without delay.
	assert.Equal(t, []time.Duration{107 * time.Millisecond, 2 * time.Second}, sl.Delays())
	assert.Equal(t, []int64{int64(100*time.Millisecond) + 1, int64(100*time.Millisecond) + 1}, rnd.bounds, "full jitter in [0, base]")
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Delivered, st.State)
	assert.Equal(t, 4, st.Attempts)
	assert.Len(t, st.Receipts, 4)
	assert.Equal(t, 2, obs.Get("retried:primary"))
	assert.Equal(t, 1, obs.Get("retried:fallback"))
	assert.Equal(t, 3, obs.Get("dispatched:primary:REJECTED_DEFINITE"))
}

func TestAllDefiniteFailuresEndFailed(t *testing.T) {
	_, s := standalone(t, 1)
	ctx := ctxT(t)
	prim, fb := newScripted("primary", rejected), newScripted("fallback", rejected)
	obs, sl := &counting{}, &sleeps{}
	cfg := baseConfig("c1", obs, slog.New(slog.DiscardHandler), sl, &seq{vals: []int64{0, 0, 0, 0}}, prim, fb)
	cfg.AttemptsPerTransport = 2
	d, err := New(s, cfg)
	require.NoError(t, err)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary", "fallback"))
	require.NoError(t, err)
	pollAll(ctx, t, d, 1)
	assert.Len(t, prim.Calls(), 2)
	assert.Len(t, fb.Calls(), 2)
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, sl.Delays())
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Failed, st.State)
	assert.Equal(t, 1, obs.Get("final:FAILED"))
}

// TestRecipientAndContentNeverLogged runs every path (delivery, retry,
// indeterminate, quarantine, a failing Redis call) with a capturing
// handler at debug level.
func TestRecipientAndContentNeverLogged(t *testing.T) {
	srv, s := standalone(t, 1)
	ctx := ctxT(t)
	capt := newCapture()
	log := slog.New(capt)
	prim := newScripted("primary", rejected, accepted)
	other := newScripted("other", unknown)
	d, err := New(s, baseConfig("c1", &counting{}, log, &sleeps{}, &seq{vals: []int64{1}}, prim, other))
	require.NoError(t, err)
	for i, ts := range [][]string{{"primary"}, {"other"}} {
		_, err := s.Submit(ctx, []byte{byte(i)}, testPlan(t, ts...))
		require.NoError(t, err)
	}
	require.NoError(t, srv.Admin().XAdd(ctx, &redis.XAddArgs{Stream: pendingStream(t, srv.Admin()),
		Values: []any{"i", secret, "p", secret}}).Err())
	for range 3 {
		pollAll(ctx, t, d, 1)
	}
	out := capt.String()
	assert.Contains(t, out, "notify dispatch: attempt")
	assert.Contains(t, out, "quarantined")
	assert.NotContains(t, out, secret)
	assert.NotContains(t, out, "alice")
	assert.False(t, strings.Contains(out, "Hello"))
}

// TestCloseDrainsInFlight: Close stops reading and waits for the delivery
// in flight (held by the transport) to finish and finalize.
func TestCloseDrainsInFlight(t *testing.T) {
	_, s := standalone(t, 1)
	ctx := ctxT(t)
	tr := newScripted("primary", accepted)
	tr.hold, tr.entered = make(chan struct{}), make(chan struct{}, 1)
	cfg := baseConfig("c1", &counting{}, slog.New(slog.DiscardHandler), &sleeps{}, &seq{}, tr)
	cfg.Sleep = nil // the real timer: the loop waits between polls
	cfg.Block = 20 * time.Millisecond
	d, err := New(s, cfg)
	require.NoError(t, err)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary"))
	require.NoError(t, err)
	require.NoError(t, d.Start())
	<-tr.entered // the delivery is in flight

	closed := make(chan error, 1)
	go func() { closed <- d.Close(ctx) }()
	close(tr.hold) // let it finish; Close must wait for it
	require.NoError(t, <-closed)
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Delivered, st.State, "drained: finalized before Close returned")
	assert.Len(t, tr.Calls(), 1)
}

// TestCloseDeadlineStillRecordsTheOutcome: Close's context ends while a
// delivery is in the transport. The call's context is cancelled, and
// whatever the transport answers is recorded on a context detached from
// it before Close returns: an accepted send (a transport that finished
// regardless) ends DELIVERED, a call cut short ends INDETERMINATE. Either
// way the entry is acknowledged, the record never stays DELIVERING for
// a reclaim, and the fallback is never called.
func TestCloseDeadlineStillRecordsTheOutcome(t *testing.T) {
	for _, tc := range []struct {
		name string
		deaf bool
		want intent.State
	}{
		{"transport finishes regardless", true, intent.Delivered},
		{"transport cut short", false, intent.Indeterminate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := standalone(t, 1)
			ctx := ctxT(t)
			prim, fb := newScripted("primary", accepted), newScripted("fallback", accepted)
			prim.hold, prim.entered, prim.deaf = make(chan struct{}), make(chan struct{}, 1), tc.deaf
			obs := &counting{}
			cfg := baseConfig("c1", obs, slog.New(slog.DiscardHandler), &sleeps{}, &seq{}, prim, fb)
			cfg.AttemptsPerTransport = 1
			cfg.Sleep = nil // the real timer: the loop waits between polls
			cfg.Block = 20 * time.Millisecond
			d, err := New(s, cfg)
			require.NoError(t, err)
			sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary", "fallback"))
			require.NoError(t, err)
			require.NoError(t, d.Start())
			<-prim.entered // the delivery is in the transport

			expired, cancel := context.WithCancel(ctx)
			cancel()
			closed := make(chan error, 1)
			go func() { closed <- d.Close(expired) }()
			<-d.work.Done() // Close gave up waiting and cancelled the delivery
			close(prim.hold)
			require.ErrorIs(t, <-closed, context.Canceled)

			st, err := s.Get(ctx, sub.ID)
			require.NoError(t, err)
			assert.Equal(t, tc.want, st.State, "recorded before Close returned")
			require.Len(t, st.Receipts, 1)
			assert.Equal(t, 1, st.Attempts)
			assertNothingPending(ctx, t, s)
			assert.Equal(t, 1, obs.Get("final:"+tc.want.String()))
			assert.Len(t, prim.Calls(), 1)
			assert.Empty(t, fb.Calls(), "never sent to the fallback")
		})
	}
}

// TestCloseBeforeTheRetryLeavesItPending: the primary rejected definitely
// while Close's deadline passed; the rejection is recorded (PENDING), the
// fallback is not started during shutdown, and the entry stays pending so
// that a reclaim sends attempt 2 on the fallback, once.
func TestCloseBeforeTheRetryLeavesItPending(t *testing.T) {
	_, s := standalone(t, 1)
	ctx := ctxT(t)
	prim, fb := newScripted("primary", rejected), newScripted("fallback", accepted)
	prim.hold, prim.entered, prim.deaf = make(chan struct{}), make(chan struct{}, 1), true
	cfg := crashConfig(&counting{}, 1, prim, fb)
	cfg.Sleep, cfg.Block, cfg.ReclaimEvery = nil, 20*time.Millisecond, time.Hour
	cfg.Now = (&fakeClock{now: testNow}).Now // the held call never nears MinIdle
	d, err := New(s, cfg)
	require.NoError(t, err)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary", "fallback"))
	require.NoError(t, err)
	require.NoError(t, d.Start())
	<-prim.entered
	expired, cancel := context.WithCancel(ctx)
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- d.Close(expired) }()
	<-d.work.Done()
	close(prim.hold)
	require.ErrorIs(t, <-closed, context.Canceled)
	assert.Empty(t, fb.Calls(), "no new attempt during shutdown")
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Pending, st.State)
	assert.Equal(t, 1, st.Attempts)

	obs := &counting{}
	next, err := New(s, crashConfig(obs, 1, prim, fb))
	require.NoError(t, err)
	pollUntilReclaimed(ctx, t, next)
	calls := fb.Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, uint32(2), calls[0].Attempt)
	st, err = s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Delivered, st.State)
	assertNothingPending(ctx, t, s)
}

// TestReadsOnlyWithAFreeSlot: with Concurrency 1 and its slot busy (a
// delivery held in the transport), the read loop waits for the slot
// before it reads (slotWait), although ReadCount is 4: the next entry is
// not taken by this consumer, where its idle time would run toward MinIdle
// while it waited, but stays undelivered in the group (pending 1: the
// delivery in flight). Another consumer reads and delivers it; then the
// held delivery finishes. Each intent is sent once, by one consumer.
func TestReadsOnlyWithAFreeSlot(t *testing.T) {
	_, s := standalone(t, 1)
	ctx := ctxT(t)
	held := newScripted("primary", accepted)
	held.hold, held.entered = make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	release := func() { once.Do(func() { close(held.hold) }) }
	cfg := baseConfig("a", &counting{}, slog.New(slog.DiscardHandler), &sleeps{}, &seq{}, held)
	cfg.Concurrency, cfg.ReadCount = 1, 4
	cfg.Sleep, cfg.Block = nil, 20*time.Millisecond
	a, err := New(s, cfg)
	require.NoError(t, err)
	waiting := make(chan struct{}, 1)
	a.slotWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	first, err := s.Submit(ctx, []byte("k1"), testPlan(t, "primary"))
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(func() { release(); _ = a.Close(context.Background()) })
	<-held.entered // the only slot is busy
	second, err := s.Submit(ctx, []byte("k2"), testPlan(t, "primary"))
	require.NoError(t, err)
	<-waiting // the loop waits for the slot: it cannot read before the slot frees

	pending, lag, known, err := s.Backlog(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), pending, "only the delivery in flight is pending")
	if known {
		assert.Equal(t, int64(1), lag, "the second entry is still undelivered")
	}
	other := newScripted("primary", accepted)
	b, err := New(s, baseConfig("b", &counting{}, slog.New(slog.DiscardHandler), &sleeps{}, &seq{}, other))
	require.NoError(t, err)
	n, err := b.Poll(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, other.Calls(), 1)
	assert.Equal(t, string(second.ID), other.Calls()[0].IntentID)

	release()
	require.NoError(t, a.Close(ctx))
	require.Len(t, held.Calls(), 1)
	assert.Equal(t, string(first.ID), held.Calls()[0].IntentID)
	for _, id := range []intent.ID{first.ID, second.ID} {
		st, err := s.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, intent.Delivered, st.State)
		assert.Equal(t, 1, st.Attempts)
	}
	assertNothingPending(ctx, t, s)
}

// backlog submits n intents to shard 0 and has a consumer read them all
// and die before claiming any: n entries pending, records PENDING. It
// returns once all n have been idle for minIdle (server clock), so every
// later reclaim scan finds them all eligible.
func backlog(ctx context.Context, t *testing.T, srv *redistest.Server, s *intent.Store, n int, minIdle time.Duration) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for i := range n {
		sub, err := s.Submit(ctx, []byte(fmt.Sprintf("k%d", i)), testPlan(t, "primary"))
		require.NoError(t, err)
		ids[string(sub.ID)] = true
	}
	ready, err := s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	require.True(t, ready)
	ds, err := s.Read(ctx, 0, "dead", n, 0)
	require.NoError(t, err)
	require.Len(t, ds, n)
	stream := pendingStream(t, srv.Admin())
	require.Eventually(t, func() bool {
		p, err := srv.Admin().XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: s.Group(), Idle: minIdle,
			Start: "-", End: "+", Count: int64(n)}).Result()
		return err == nil && len(p) == n
	}, 20*time.Second, 5*time.Millisecond)
	return ids
}

// TestReclaimDrainsABacklogInOneScan: 10 entries left pending by a dead
// consumer (ReadCount 1). One Poll's reclaim scan goes on while its pages
// come back full and hands over all 10, each sent once; with
// ReclaimBatch 4 the scans stop at 4, 4, then 2.
func TestReclaimDrainsABacklogInOneScan(t *testing.T) {
	for _, tc := range []struct {
		batch int
		polls []int
	}{
		{0, []int{10, 0}},
		{4, []int{4, 4, 2, 0}},
	} {
		t.Run(fmt.Sprintf("batch %d", tc.batch), func(t *testing.T) {
			srv, s := standalone(t, 1)
			ctx := ctxT(t)
			cfg := crashConfig(&counting{}, 1, newScripted("primary", accepted))
			ids := backlog(ctx, t, srv, s, 10, cfg.MinIdle)
			tr := newScripted("primary", accepted)
			cfg.Transports = map[string]transport.Transport{"primary": tr}
			cfg.ReclaimBatch = tc.batch
			d, err := New(s, cfg)
			require.NoError(t, err)
			for i, want := range tc.polls {
				n, err := d.Poll(ctx, 0)
				require.NoError(t, err)
				assert.Equal(t, want, n, "poll %d", i)
			}
			calls := tr.Calls()
			require.Len(t, calls, 10)
			for _, c := range calls {
				assert.True(t, ids[c.IntentID], "a backlog intent")
				delete(ids, c.IntentID)
				assert.Equal(t, uint32(1), c.Attempt)
			}
			assert.Empty(t, ids, "each sent once")
			assertNothingPending(ctx, t, s)
		})
	}
}

// TestBacklogIsObservedBeforeEachScan: the pending and lag figures the
// Observer gets (the caphost_notify_backlog gauge) are the group's own,
// taken before each reclaim scan: 10 entries a dead consumer read and 3
// nobody read yet are pending 10, lag 3; once one Poll has handed over
// the 10 and read the 3, the next observes an empty backlog.
func TestBacklogIsObservedBeforeEachScan(t *testing.T) {
	srv, s := standalone(t, 1)
	ctx := ctxT(t)
	obs := &counting{}
	tr := newScripted("primary", accepted)
	cfg := crashConfig(obs, 1, tr)
	backlog(ctx, t, srv, s, 10, cfg.MinIdle)
	for i := range 3 {
		_, err := s.Submit(ctx, []byte(fmt.Sprintf("unread-%d", i)), testPlan(t, "primary"))
		require.NoError(t, err)
	}
	cfg.ReadCount = 3
	d, err := New(s, cfg)
	require.NoError(t, err)

	n, err := d.Poll(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, 13, n)
	assert.Equal(t, [2]int64{10, 3}, obs.lastBacklog(0), "pending, lag before the first scan")
	n, err = d.Poll(ctx, 0)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, [2]int64{0, 0}, obs.lastBacklog(0), "pending, lag once drained")
	assert.Equal(t, 2, obs.Get("backlog"))
	assert.Len(t, tr.Calls(), 13)
}

// TestReclaimScanDrainsTheBacklogOnSlots: the read loop's first reclaim
// scan hands over a 10-entry backlog with Concurrency 2 and ReadCount 1,
// waiting for slots between pages. The clock is frozen, so this first
// scan is the only one: all 10 delivered means one scan drained them.
func TestReclaimScanDrainsTheBacklogOnSlots(t *testing.T) {
	srv, s := standalone(t, 1)
	ctx := ctxT(t)
	tr := newScripted("primary", accepted)
	obs := &counting{}
	cfg := crashConfig(obs, 1, tr)
	ids := backlog(ctx, t, srv, s, 10, cfg.MinIdle)
	cfg.Concurrency = 2
	deliverOnSlots(ctx, t, s, cfg, tr, obs, ids)
	assertNothingPending(ctx, t, s)
}

// deliverOnSlots runs a dispatcher of cfg (its clock frozen, so the read
// loop's first reclaim scan is its only one) until every intent of ids
// is DELIVERED, closes it, and checks that the transport sent each of
// them exactly once.
func deliverOnSlots(ctx context.Context, t *testing.T, s *intent.Store, cfg Config, tr *scripted, obs *counting, ids map[string]bool) {
	t.Helper()
	n := len(ids)
	cfg.Sleep, cfg.Block = nil, 20*time.Millisecond
	cfg.Now = (&fakeClock{now: testNow}).Now
	d, err := New(s, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start())
	require.Eventually(t, func() bool { return obs.Get("final:DELIVERED") == n }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, d.Close(ctx))
	calls := tr.Calls()
	require.Len(t, calls, n)
	for _, c := range calls {
		assert.True(t, ids[c.IntentID])
		delete(ids, c.IntentID)
	}
	assert.Empty(t, ids, "each sent once")
}

func TestConfigValidation(t *testing.T) {
	_, s := standalone(t, 1)
	tr := newScripted("primary", accepted)
	good := baseConfig("c1", nil, nil, &sleeps{}, &seq{}, tr)
	_, err := New(s, good)
	require.NoError(t, err)
	for name, mut := range map[string]func(*Config){
		"no consumer":   func(c *Config) { c.Consumer = "" },
		"no transports": func(c *Config) { c.Transports = nil },
		"bad name":      func(c *Config) { c.Transports = map[string]transport.Transport{"Bad Name": tr} },
		"idle too low":  func(c *Config) { c.MinIdle = c.Cap },
		"cap < base":    func(c *Config) { c.Cap = c.Base / 2 },
		"deliveries":    func(c *Config) { c.MaxDeliveries = 1 },
		"reclaim batch": func(c *Config) { c.ReclaimBatch = 65537 },
	} {
		c := good
		mut(&c)
		_, err := New(s, c)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
	}
}

// fakeClock advances only by the sleeps the dispatcher asks for.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

// TestRetryPastMinIdleIsHandedToTheReclaim: with MinIdle 3.2s, call
// timeout 1s and delays of 107ms, 2s and then 400ms+, the third retry
// would keep the entry past MinIdle: the dispatcher stops holding it
// (PENDING, still pending in the group) instead of sleeping.
func TestRetryPastMinIdleIsHandedToTheReclaim(t *testing.T) {
	_, s := standalone(t, 1)
	ctx := ctxT(t)
	slow := rejected
	slow.RetryAfter = time.Hour
	prim := newScripted("primary", rejected, slow, rejected)
	clk := &fakeClock{now: testNow}
	cfg := baseConfig("c1", &counting{}, slog.New(slog.DiscardHandler), &sleeps{}, &seq{vals: []int64{7_000_000, 0, 5}}, prim)
	cfg.AttemptsPerTransport, cfg.CallTimeout, cfg.MinIdle = 4, time.Second, 3200*time.Millisecond
	cfg.Sleep, cfg.Now = clk.Sleep, clk.Now
	d, err := New(s, cfg)
	require.NoError(t, err)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary"))
	require.NoError(t, err)
	pollAll(ctx, t, d, 1)
	assert.Len(t, prim.Calls(), 3)
	assert.Equal(t, testNow.Add(107*time.Millisecond+2*time.Second), clk.Now(), "slept 107ms and 2s, not the third delay")
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Pending, st.State)
	assert.Equal(t, 3, st.Attempts)
	pending, _, _, err := s.Backlog(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), pending, "left pending for the reclaim")
}

// behindLiveEntries submits 270 intents to shard 0: a live consumer read
// the first 250 just now, a dead one the last 20, which have been idle
// for an hour (XCLAIM IDLE: no waiting on the server's clock). It
// returns the dead consumer's intent ids.
func behindLiveEntries(ctx context.Context, t *testing.T, srv *redistest.Server, s *intent.Store) map[string]bool {
	t.Helper()
	for i := range 270 {
		_, err := s.Submit(ctx, []byte(fmt.Sprintf("k%d", i)), testPlan(t, "primary"))
		require.NoError(t, err)
	}
	ready, err := s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	require.True(t, ready)
	stream := pendingStream(t, srv.Admin())
	read := func(consumer string, n int) []redis.XMessage {
		res, err := srv.Admin().XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.Group(), Consumer: consumer,
			Streams: []string{stream, ">"}, Count: int64(n), Block: -1}).Result()
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.Len(t, res[0].Messages, n)
		return res[0].Messages
	}
	read("live", 250)
	args := []any{"xclaim", stream, s.Group(), "dead", 0}
	ids := map[string]bool{}
	for _, m := range read("dead", 20) {
		args = append(args, m.ID)
		ids[m.Values["i"].(string)] = true
	}
	require.NoError(t, srv.Admin().Do(ctx, append(args, "idle", time.Hour.Milliseconds(), "justid")...).Err())
	return ids
}

// assertLiveUntouched checks the live consumer still holds its 250.
func assertLiveUntouched(ctx context.Context, t *testing.T, srv *redistest.Server, s *intent.Store) {
	t.Helper()
	p, err := srv.Admin().XPending(ctx, pendingStream(t, srv.Admin()), s.Group()).Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"live": 250}, p.Consumers, "only the live consumer's entries are pending")
}

// TestReclaimGetsPastALiveConsumersEntries (issue 13): with ReadCount 1 an
// XAUTOCLAIM looks at 10 PEL entries, and 250 entries of a live consumer
// head the PEL. Before the reclaim kept its cursor, every scan restarted
// at "0-0" and the dead consumer's 20 entries behind them were never
// sent (Poll returned 0). Now one Poll's reclaim scan sends all 20, once
// each, and leaves the live consumer's entries alone.
func TestReclaimGetsPastALiveConsumersEntries(t *testing.T) {
	srv, s := standalone(t, 1)
	ctx := ctxT(t)
	ids := behindLiveEntries(ctx, t, srv, s)
	tr := newScripted("primary", accepted)
	obs := &counting{}
	cfg := baseConfig("alive", obs, slog.New(slog.DiscardHandler), &sleeps{}, &seq{}, tr)
	cfg.MinIdle = 10 * time.Minute // the live consumer's entries are never idle that long here
	d, err := New(s, cfg)
	require.NoError(t, err)

	n, err := d.Poll(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, 20, n)
	calls := tr.Calls()
	require.Len(t, calls, 20)
	for _, c := range calls {
		assert.True(t, ids[c.IntentID], "a dead consumer's intent")
		delete(ids, c.IntentID)
	}
	assert.Empty(t, ids, "each sent once")
	assert.Equal(t, 20, obs.Get("final:DELIVERED"))
	assert.Equal(t, 20, obs.Get("reclaimed"))
	assert.Equal(t, 20, obs.Get("reclaim-trips"), "one XAUTOCLAIM per entry: each starts at an idle one")
	assert.Equal(t, 2, obs.Get("reclaim-wraps"), "the 20th page reached the end of the PEL; the 21st, a lap from its start, found nothing")
	assertLiveUntouched(ctx, t, srv, s)

	n, err = d.Poll(ctx, 0)
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Len(t, tr.Calls(), 20)
}

// TestReclaimScanGetsPastALiveConsumersEntriesOnSlots: the same PEL,
// taken over by the read loop's first reclaim scan (the clock is frozen,
// so it is the only scan) on 2 delivery slots.
func TestReclaimScanGetsPastALiveConsumersEntriesOnSlots(t *testing.T) {
	srv, s := standalone(t, 1)
	ctx := ctxT(t)
	ids := behindLiveEntries(ctx, t, srv, s)
	tr := newScripted("primary", accepted)
	obs := &counting{}
	cfg := baseConfig("alive", obs, slog.New(slog.DiscardHandler), &sleeps{}, &seq{}, tr)
	cfg.MinIdle, cfg.Concurrency = 10*time.Minute, 2
	require.Len(t, ids, 20)
	deliverOnSlots(ctx, t, s, cfg, tr, obs, ids)
	assert.Equal(t, 20, obs.Get("reclaimed"))
	assertLiveUntouched(ctx, t, srv, s)
}

// TestReclaimScanGoesOnAfterAShortPageMidLap: 8 dead entries 101 PEL
// entries apart, live ones between, ReadCount 8. A Reclaim of 8 looks at
// 80 entries per XAUTOCLAIM, so its 4 round trips hand over 4 — a short
// page that did not end a lap. The scan goes on from the cursor: one
// Poll sends all 8 (it stopped at 4 while any short page ended a scan).
func TestReclaimScanGoesOnAfterAShortPageMidLap(t *testing.T) {
	srv, s := standalone(t, 1)
	ctx := ctxT(t)
	const gap = 100
	for i := range 8 + 7*gap {
		_, err := s.Submit(ctx, []byte(fmt.Sprintf("k%d", i)), testPlan(t, "primary"))
		require.NoError(t, err)
	}
	ready, err := s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	require.True(t, ready)
	stream := pendingStream(t, srv.Admin())
	ids := map[string]bool{}
	for i := range 8 {
		consumers := []string{"dead"}
		if i > 0 {
			consumers = []string{"live", "dead"}
		}
		for _, c := range consumers {
			n := int64(1)
			if c == "live" {
				n = gap
			}
			res, err := srv.Admin().XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.Group(), Consumer: c,
				Streams: []string{stream, ">"}, Count: n, Block: -1}).Result()
			require.NoError(t, err)
			require.Len(t, res[0].Messages, int(n))
			if c == "dead" {
				m := res[0].Messages[0]
				ids[m.Values["i"].(string)] = true
				require.NoError(t, srv.Admin().Do(ctx, "xclaim", stream, s.Group(), "dead", 0, m.ID,
					"idle", time.Hour.Milliseconds(), "justid").Err())
			}
		}
	}
	tr := newScripted("primary", accepted)
	obs := &counting{}
	cfg := baseConfig("alive", obs, slog.New(slog.DiscardHandler), &sleeps{}, &seq{}, tr)
	cfg.MinIdle, cfg.ReadCount = 10*time.Minute, 8
	d, err := New(s, cfg)
	require.NoError(t, err)
	n, err := d.Poll(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, 8, n)
	for _, c := range tr.Calls() {
		assert.True(t, ids[c.IntentID])
		delete(ids, c.IntentID)
	}
	assert.Empty(t, ids, "each sent once")
	assert.Equal(t, 8, obs.Get("reclaimed"))
	assert.Equal(t, 8, obs.Get("reclaim-trips"), "two pages of 4 round trips")
	p, err := srv.Admin().XPending(ctx, stream, s.Group()).Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"live": 7 * gap}, p.Consumers)
}
