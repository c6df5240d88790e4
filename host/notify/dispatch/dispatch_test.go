package dispatch

import (
	"context"
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

// crashAfterAccept plays a consumer that read the entry, claimed it and
// had the transport accept, then died before finalize (no XACK).
func crashAfterAccept(ctx context.Context, t *testing.T, s *intent.Store, tr *scripted) intent.Delivery {
	t.Helper()
	ready, err := s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	require.True(t, ready)
	ds, err := s.Read(ctx, 0, "dead", 1, 0)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	c, err := s.Claim(ctx, &ds[0], 3)
	require.NoError(t, err)
	require.Equal(t, intent.Proceed, c.Status)
	r := tr.Deliver(ctx, transport.Message{IntentID: string(ds[0].ID), Attempt: uint32(c.Attempt)})
	require.Equal(t, transport.Accepted, r.Outcome)
	return ds[0]
}

func crashConfig(obs Observer, tr *scripted) Config {
	return Config{Consumer: "alive", Transports: map[string]transport.Transport{tr.name: tr}, Base: time.Millisecond,
		Cap: 5 * time.Millisecond, CallTimeout: 10 * time.Millisecond, MinIdle: 50 * time.Millisecond,
		ReclaimEvery: time.Millisecond, MaxDeliveries: 5, Observer: obs, Logger: slog.New(slog.DiscardHandler),
		Sleep: (&sleeps{}).Sleep, Random: &seq{}}
}

// runCrashBeforeAckRedelivers: the state did not say delivered, so the
// other consumer, after the idle time, calls the transport a second time
// with the same IntentID (at-least-once; the receiver deduplicates on the
// id), then finalizes once.
func runCrashBeforeAckRedelivers(t *testing.T, s *intent.Store) {
	ctx := ctxT(t)
	tr := newScripted("primary", accepted)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary"))
	require.NoError(t, err)
	crashAfterAccept(ctx, t, s, tr)

	obs := &counting{}
	d, err := New(s, crashConfig(obs, tr))
	require.NoError(t, err)
	// Until the entry has been idle for MinIdle (server clock) a poll finds
	// nothing; then exactly one redelivery.
	require.Eventually(t, func() bool { n, err := d.Poll(ctx, 0); return err == nil && n == 1 }, 20*time.Second, 10*time.Millisecond)
	calls := tr.Calls()
	require.Len(t, calls, 2, "at-least-once: a second call")
	assert.Equal(t, calls[0].IntentID, calls[1].IntentID, "with the same IntentID")
	assert.Equal(t, string(sub.ID), calls[1].IntentID)
	assert.Equal(t, uint32(2), calls[1].Attempt)
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Delivered, st.State)
	assert.Equal(t, 2, st.Attempts)
	pending, _, _, err := s.Backlog(ctx, 0)
	require.NoError(t, err)
	assert.Zero(t, pending, "acknowledged once finalized")
	assert.Equal(t, 1, obs.Get("final:DELIVERED"))
}

func TestCrashBeforeAckRedeliversWithSameIntentID(t *testing.T) {
	_, s := standalone(t, 1)
	runCrashBeforeAckRedelivers(t, s)
}

func TestCrashBeforeAckRedeliversCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	runCrashBeforeAckRedelivers(t, newStore(t, &policy.Cluster{Seeds: cl.Seeds()}, 1))
}

// TestCrashBeforeAckConsumerDedup: the provider's receipt already made the
// intent DELIVERED (out of band) before the consumer died: the reclaiming
// consumer acknowledges the entry and never calls the transport again.
func TestCrashBeforeAckConsumerDedup(t *testing.T) {
	srv, s := standalone(t, 1)
	ctx := ctxT(t)
	tr := newScripted("primary", accepted)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary"))
	require.NoError(t, err)
	del := crashAfterAccept(ctx, t, s, tr)
	_, err = s.RecordReceipt(ctx, del.ID, intent.Receipt{Attempt: 1, Transport: "primary", Outcome: transport.Accepted, Code: "webhook-delivered", At: testNow})
	require.NoError(t, err)

	d, err := New(s, crashConfig(&counting{}, tr))
	require.NoError(t, err)
	require.Eventually(t, func() bool { n, err := d.Poll(ctx, 0); return err == nil && n == 1 }, 20*time.Second, 10*time.Millisecond)
	assert.Len(t, tr.Calls(), 1, "no second transport call: the state said delivered")
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Delivered, st.State)
	assert.Equal(t, 1, st.Attempts)
	assert.Zero(t, srv.Admin().XPending(ctx, pendingStream(t, srv.Admin()), s.Group()).Val().Count, "acknowledged")
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
	srv, s := standalone(t, 1)
	ctx := ctxT(t)
	tr := newScripted("primary", accepted)
	sub, err := s.Submit(ctx, []byte("k"), testPlan(t, "primary"))
	require.NoError(t, err)
	stream := pendingStream(t, srv.Admin())
	require.NoError(t, srv.Admin().XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"i", "garbage", "p", "x"}}).Err())

	// Two consumers died with the entries (deliveries 1, then 2 by a reclaim).
	ready, err := s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	require.True(t, ready)
	ds, err := s.Read(ctx, 0, "dead-1", 2, 0)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	require.NoError(t, ds[0].Err)
	require.ErrorIs(t, ds[1].Err, intent.ErrCorruptEntry)
	require.Eventually(t, func() bool {
		got, _, err := s.Reclaim(ctx, 0, "dead-2", time.Millisecond, 2)
		return err == nil && len(got) == 2
	}, 20*time.Second, 5*time.Millisecond)

	obs := &counting{}
	cfg := crashConfig(obs, tr)
	cfg.MaxDeliveries = 3
	d, err := New(s, cfg)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := d.Poll(ctx, 0) // one reclaimed entry per poll (ReadCount 1)
		return err == nil && obs.Get("quarantined:deliveries")+obs.Get("quarantined:undecodable") == 2
	}, 20*time.Second, 10*time.Millisecond)
	assert.Empty(t, tr.Calls(), "a poison message is never sent")
	assert.Equal(t, 1, obs.Get("quarantined:deliveries"))
	assert.Equal(t, 1, obs.Get("quarantined:undecodable"))
	st, err := s.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Quarantined, st.State)
	assert.Zero(t, srv.Admin().XPending(ctx, stream, s.Group()).Val().Count)
	q := srv.Admin().Keys(ctx, "*:notify:*:quarantine").Val()
	require.Len(t, q, 1)
	assert.Equal(t, int64(2), srv.Admin().XLen(ctx, q[0]).Val())
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
