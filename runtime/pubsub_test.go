package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/keys"
)

// eventually is the wait of every Pub/Sub condition: generous, because
// the tests share two cores with the whole suite under -race; the measured
// figures are logged, never asserted.
const eventually = 30 * time.Second

// hintSpec is the cache's invalidation-hint channel (host/cache/hints.go).
func hintSpec(part string) keys.Spec {
	return keys.Spec{Capability: keys.CapCache, Region: "invalidation", KeyVersion: 1, Kind: "channel",
		Parts: [][]byte{[]byte(part)}, Opaque: true}
}

func channelOf(t *testing.T, r *Runtime, part string) keys.Key {
	t.Helper()
	k, err := r.Keys().Build(hintSpec(part))
	require.NoError(t, err)
	return k
}

// subEvent is one handler call.
type subEvent struct {
	at  time.Time
	up  *bool  // a State call
	msg string // a Message call
}

// subRecorder is a SubscriptionHandler that records every call, fails the
// test on a call that breaks the contract (concurrent calls, two equal
// states in a row, a message while down) and lets tests wait on its state.
type subRecorder struct {
	t       *testing.T
	mu      sync.Mutex
	events  []subEvent
	up      bool
	inside  atomic.Int32
	changed chan struct{} // closed and replaced on every event
}

func newSubRecorder(t *testing.T) *subRecorder {
	return &subRecorder{t: t, changed: make(chan struct{})}
}

func (r *subRecorder) handler() SubscriptionHandler {
	return SubscriptionHandler{Message: r.message, State: r.state}
}

func (r *subRecorder) enter() func() {
	if r.inside.Add(1) != 1 {
		r.t.Errorf("handler called concurrently")
	}
	return func() { r.inside.Add(-1) }
}

func (r *subRecorder) record(e subEvent) {
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *subRecorder) message(p []byte) {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.up {
		r.t.Errorf("message delivered while down")
	}
	r.record(subEvent{at: time.Now(), msg: string(p)})
}

func (r *subRecorder) state(up bool) {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	if up == r.up {
		r.t.Errorf("State(%t) while already %t", up, r.up)
	}
	if len(r.events) == 0 && !up {
		r.t.Errorf("first State call is false")
	}
	r.up = up
	r.record(subEvent{at: time.Now(), up: &up})
}

// waitFor waits until cond holds over the events and returns the time of
// the event that made it true.
func (r *subRecorder) waitFor(what string, cond func(ev []subEvent) bool) time.Time {
	r.t.Helper()
	deadline := time.NewTimer(eventually)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, ch := cond(r.events), r.changed
		var at time.Time
		if n := len(r.events); ok && n > 0 {
			at = r.events[n-1].at
		}
		r.mu.Unlock()
		if ok {
			return at
		}
		select {
		case <-ch:
		case <-deadline.C:
			r.t.Fatalf("timed out waiting for %s; events: %s", what, r.String())
		}
	}
}

// waitState waits for the n-th State call (1-based) and requires its value.
func (r *subRecorder) waitState(n int, up bool) time.Time {
	r.t.Helper()
	at := r.waitFor(fmt.Sprintf("state change %d (%t)", n, up), func(ev []subEvent) bool { return countStates(ev) >= n })
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := 0
	for _, e := range r.events {
		if e.up != nil {
			if seen++; seen == n {
				require.Equal(r.t, up, *e.up, "state change %d; events: %s", n, r.string())
				return e.at
			}
		}
	}
	return at
}

// waitMessage waits until payload was delivered.
func (r *subRecorder) waitMessage(payload string) {
	r.t.Helper()
	r.waitFor("message "+payload, func(ev []subEvent) bool {
		for _, e := range ev {
			if e.up == nil && e.msg == payload {
				return true
			}
		}
		return false
	})
}

func countStates(ev []subEvent) int {
	n := 0
	for _, e := range ev {
		if e.up != nil {
			n++
		}
	}
	return n
}

func (r *subRecorder) states() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return countStates(r.events)
}

func (r *subRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.up == nil {
			out = append(out, e.msg)
		}
	}
	return out
}

func (r *subRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.string()
}

func (r *subRecorder) string() string {
	var b strings.Builder
	for _, e := range r.events {
		switch {
		case e.up == nil:
			b.WriteString(" msg")
		case *e.up:
			b.WriteString(" up")
		default:
			b.WriteString(" down")
		}
	}
	return "[" + strings.TrimSpace(b.String()) + "]"
}

// subscribe subscribes rec to ch and closes the subscription at cleanup.
func subscribe(t *testing.T, d *Deployment, ch keys.Key, rec *subRecorder, o SubscribeOptions) *Subscription {
	t.Helper()
	s, err := d.Subscribe(context.Background(), ch, rec.handler(), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// publishUntilReceived publishes payload until rec has it. While the
// subscription recovers, a publish can fail or land before the new
// subscription: both are what the facade's best-effort contract allows.
func publishUntilReceived(t *testing.T, d *Deployment, ch keys.Key, rec *subRecorder, payload string) int64 {
	t.Helper()
	var last int64
	require.Eventually(t, func() bool {
		if n, err := d.Publish(context.Background(), ch, []byte(payload)); err == nil {
			last = n
		}
		for _, m := range rec.messages() {
			if m == payload {
				return true
			}
		}
		return false
	}, eventually, 50*time.Millisecond, "message %q never arrived; events %s", payload, rec)
	return last
}

func coordination(t *testing.T, r *Runtime) *Deployment {
	t.Helper()
	d, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	return d
}

// subFixture is a runtime on one deployment with one confirmed
// subscription to the hint channel that has received "first", which
// Publish reported reaching exactly one receiver.
type subFixture struct {
	r   *Runtime
	dep *Deployment
	ch  keys.Key
	rec *subRecorder
	sub *Subscription
}

func subscribed(t *testing.T, d policy.Deployment, o SubscribeOptions) *subFixture {
	t.Helper()
	f := &subFixture{r: newRuntime(t, testConfig(d)), rec: newSubRecorder(t)}
	f.dep = coordination(t, f.r)
	f.ch = channelOf(t, f.r, "hints")
	f.sub = subscribe(t, f.dep, f.ch, f.rec, o)
	f.rec.waitState(1, true)
	n, err := f.dep.Publish(ctxT(t, eventually), f.ch, []byte("first"))
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "one receiver")
	f.rec.waitMessage("first")
	return f
}

func standaloneSub(t *testing.T, srv *redistest.Server, o SubscribeOptions) *subFixture {
	t.Helper()
	return subscribed(t, testDeployment("main", standalone(srv.Addr())), o)
}

// TestPubSubLeastPrivilege runs the facade as an ACL user that can do
// exactly what the pubsub lane needs on a namespace's channels, and checks
// delivery, order, the receiver count and the final State(false).
func TestPubSubLeastPrivilege(t *testing.T) {
	const pass = "hints-secret-123"
	srv := redistest.StartStandalone(t, redistest.WithACL(
		redistest.ACLUser{Name: "hints", Password: pass, Rules: []string{"resetkeys", "resetchannels", "&" + testNS + "*",
			"-@all", "+client|setname", "+ping", "+spublish", "+ssubscribe"}},
		redistest.ACLUser{Name: "app", Password: pass, Rules: []string{"~*", "&*", "+@all"}},
	))
	d := testDeployment("main", standalone(srv.Addr()))
	d.Default = policy.Credential{User: "app", Password: policy.NewSecret([]byte(pass))}
	d.Auth = map[policy.Lane]policy.Credential{policy.LanePubSub: {User: "hints", Password: policy.NewSecret([]byte(pass))}}
	f := subscribed(t, d, SubscribeOptions{})
	s, rec, ctx := f.sub, f.rec, ctxT(t, eventually)
	for _, m := range []string{"a", "b", "c"} {
		_, err := f.dep.Publish(ctx, f.ch, []byte(m))
		require.NoError(t, err)
	}
	rec.waitMessage("c")
	assert.Equal(t, []string{"first", "a", "b", "c"}, rec.messages())
	assert.Equal(t, SubscriptionStats{Messages: 4, Up: true}, s.Stats())

	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "idempotent")
	rec.waitState(2, false)
	assert.False(t, s.Stats().Up)
	assert.Equal(t, int64(1), srv.CommandCalls(t, "ssubscribe"))
	assert.Equal(t, int64(4), srv.CommandCalls(t, "spublish"))
	denied, err := srv.Admin().Do(ctx, "ACL", "LOG").Slice()
	require.NoError(t, err)
	assert.Empty(t, denied, "the pubsub lane needed a permission beyond its user's")
}

// TestPubSubKillAndRestart: a killed server is down at once; once it is
// back the subscription is confirmed again and messages flow. The restarted
// server counts exactly one SSUBSCRIBE: go-redis never resubscribed on its
// own.
func TestPubSubKillAndRestart(t *testing.T) {
	srv := redistest.StartStandalone(t)
	f := standaloneSub(t, srv, SubscribeOptions{})
	dep, ch, rec, s := f.dep, f.ch, f.rec, f.sub

	killed := time.Now()
	srv.Kill()
	down := rec.waitState(2, false)
	_, err := dep.Publish(context.Background(), ch, []byte("lost"))
	require.Error(t, err, "the server is gone")

	restarting := time.Now()
	srv.Restart(t)
	ready := time.Now()
	up := rec.waitState(3, true)
	t.Logf("standalone: kill → State(false) %s; restart → State(true) %s (the harness saw PING answered after %s; %d reconnects)",
		down.Sub(killed).Round(time.Millisecond), up.Sub(restarting).Round(time.Millisecond),
		ready.Sub(restarting).Round(time.Millisecond), s.Stats().Reconnects)
	assert.Equal(t, int64(1), srv.CommandCalls(t, "ssubscribe"))
	n := publishUntilReceived(t, dep, ch, rec, "after")
	assert.Equal(t, int64(1), n)
	assert.Positive(t, s.Stats().Reconnects)
	assert.Equal(t, 3, rec.states())
	assert.NotContains(t, rec.messages(), "lost")
}

// TestPubSubNoHiddenResubscribe: when the server drops the connection
// (CLIENT KILL) go-redis would redial and resubscribe inside the failing
// Receive; the pubsub dial hook refuses that, so the server sees exactly
// one more SSUBSCRIBE, the facade's own, after the down and before the up.
func TestPubSubNoHiddenResubscribe(t *testing.T) {
	srv := redistest.StartStandalone(t)
	f := standaloneSub(t, srv, SubscribeOptions{ReconnectMin: 200 * time.Millisecond})
	rec, ctx := f.rec, ctxT(t, eventually)
	require.Equal(t, int64(1), srv.CommandCalls(t, "ssubscribe"))

	require.NoError(t, srv.Admin().Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	rec.waitState(2, false)
	rec.waitState(3, true)
	assert.Equal(t, int64(2), srv.CommandCalls(t, "ssubscribe"))
	publishUntilReceived(t, f.dep, f.ch, rec, "again")
}

// TestPubSubPausedServer: a stopped process keeps the connection open and
// answers nothing; the health PING finds it.
func TestPubSubPausedServer(t *testing.T) {
	srv := redistest.StartStandalone(t)
	t.Cleanup(srv.Resume)
	const interval = 200 * time.Millisecond
	f := standaloneSub(t, srv, SubscribeOptions{HealthInterval: interval})
	rec := f.rec

	paused := time.Now()
	srv.Pause()
	down := rec.waitState(2, false)
	srv.Resume()
	resumed := time.Now()
	up := rec.waitState(3, true)
	t.Logf("standalone: pause → State(false) %s (health interval %s); resume → State(true) %s",
		down.Sub(paused).Round(time.Millisecond), interval, up.Sub(resumed).Round(time.Millisecond))
	publishUntilReceived(t, f.dep, f.ch, rec, "after")
}

// TestPubSubMessageBounds: a message over MaxMessageBytes is dropped and
// counted, one at the bound is delivered, and Publish refuses a message
// over MessageBytesLimit without sending it.
func TestPubSubMessageBounds(t *testing.T) {
	srv := redistest.StartStandalone(t)
	f := standaloneSub(t, srv, SubscribeOptions{MaxMessageBytes: 16})
	dep, ch, rec, s, ctx := f.dep, f.ch, f.rec, f.sub, ctxT(t, eventually)

	_, err := dep.Publish(ctx, ch, []byte(strings.Repeat("x", 17)))
	require.NoError(t, err)
	_, err = dep.Publish(ctx, ch, []byte(strings.Repeat("y", 16)))
	require.NoError(t, err)
	rec.waitMessage(strings.Repeat("y", 16))
	assert.Equal(t, []string{"first", strings.Repeat("y", 16)}, rec.messages())
	assert.Equal(t, int64(1), s.Stats().Dropped)
	assert.Equal(t, int64(2), s.Stats().Messages)

	before := srv.CommandCalls(t, "spublish")
	_, err = dep.Publish(ctx, ch, make([]byte, MessageBytesLimit+1))
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
	assert.Equal(t, before, srv.CommandCalls(t, "spublish"))
	_, err = dep.Publish(ctx, ch, make([]byte, MessageBytesLimit))
	require.NoError(t, err, "the limit itself is allowed")
}

// TestPubSubRefusedBeforeSending: every refusal — the guard's namespace,
// the channel's kind, a zero key, a bad handler or options, a closed
// runtime — happens before anything reaches Redis.
func TestPubSubRefusedBeforeSending(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg := testConfig(testDeployment("main", standalone(srv.Addr())))
	r := newRuntime(t, cfg)
	dep := coordination(t, r)
	ctx := ctxT(t, eventually)
	rec := newSubRecorder(t)

	// A channel from another namespace: built by a valid builder, refused
	// by the guard's namespace check.
	foreign, err := keys.NewBuilder(keys.Config{App: "other", Env: "test", Material: cfg.Keys.HMAC})
	require.NoError(t, err)
	outside, err := foreign.Build(hintSpec("hints"))
	require.NoError(t, err)
	_, err = dep.Subscribe(ctx, outside, rec.handler(), SubscribeOptions{})
	var rej *guard.Rejection
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, guard.ReasonNamespace, rej.Reason)
	assert.Equal(t, "SSUBSCRIBE", rej.Command)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
	_, err = dep.Publish(ctx, outside, []byte("x"))
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, guard.ReasonNamespace, rej.Reason)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))

	entry, err := r.Keys().Build(keys.Spec{Capability: keys.CapCache, Region: "r", KeyVersion: 1, Kind: "entry",
		Parts: [][]byte{[]byte("k")}})
	require.NoError(t, err)
	ch := channelOf(t, r, "hints")
	refused := map[string]error{}
	_, refused["entry key"] = dep.Subscribe(ctx, entry, rec.handler(), SubscribeOptions{})
	_, refused["zero key"] = dep.Subscribe(ctx, keys.Key{}, rec.handler(), SubscribeOptions{})
	_, refused["no Message"] = dep.Subscribe(ctx, ch, SubscriptionHandler{State: rec.state}, SubscribeOptions{})
	_, refused["MaxMessageBytes"] = dep.Subscribe(ctx, ch, rec.handler(), SubscribeOptions{MaxMessageBytes: MessageBytesLimit + 1})
	_, refused["HealthInterval"] = dep.Subscribe(ctx, ch, rec.handler(), SubscribeOptions{HealthInterval: time.Millisecond})
	_, refused["reconnect bounds"] = dep.Subscribe(ctx, ch, rec.handler(), SubscribeOptions{ReconnectMin: time.Second, ReconnectMax: time.Millisecond})
	_, refused["publish entry key"] = dep.Publish(ctx, entry, []byte("x"))
	_, refused["publish zero key"] = dep.Publish(ctx, keys.Key{}, []byte("x"))
	for what, err := range refused {
		assert.Equal(t, certainty.Rejected, outcomeOf(t, err), what)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = dep.Subscribe(done, ch, rec.handler(), SubscribeOptions{})
	assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err), "ended context")

	require.NoError(t, r.Close(ctx))
	_, err = dep.Subscribe(ctx, ch, rec.handler(), SubscribeOptions{})
	assert.ErrorIs(t, err, ErrLaneClosed)
	assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err))
	_, err = dep.Publish(ctx, ch, []byte("x"))
	assert.ErrorIs(t, err, ErrLaneClosed)

	assert.Zero(t, srv.CommandCalls(t, "ssubscribe"))
	assert.Zero(t, srv.CommandCalls(t, "spublish"))
	assert.Zero(t, rec.states())
}

// TestPubSubRuntimeCloseEndsSubscriptions: Runtime.Close ends every
// subscription (a final State(false) each) before it returns, and closing
// subscriptions leaves no goroutine behind.
func TestPubSubRuntimeCloseEndsSubscriptions(t *testing.T) {
	srv := redistest.StartStandalone(t)
	r := newRuntime(t, testConfig(testDeployment("main", standalone(srv.Addr()))))
	dep := coordination(t, r)
	ch := channelOf(t, r, "hints")
	ctx := ctxT(t, eventually)
	_, err := dep.Publish(ctx, ch, []byte("warm")) // the lane's pool, dialled once
	require.NoError(t, err)

	g0 := settledGoroutines(t)
	var subs []*Subscription
	var recs []*subRecorder
	for i := 0; i < 3; i++ {
		rec := newSubRecorder(t)
		subs = append(subs, subscribe(t, dep, ch, rec, SubscribeOptions{}))
		recs = append(recs, rec)
	}
	for _, rec := range recs {
		rec.waitState(1, true)
	}
	n, err := dep.Publish(ctx, ch, []byte("m"))
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)
	for _, s := range subs[:2] {
		require.NoError(t, s.Close())
	}
	// The server drops a closed connection's subscription when it reads
	// the close, a moment after Close returned.
	require.Eventually(t, func() bool { return mustPublish(t, dep, ch) == 1 }, eventually, 10*time.Millisecond)
	require.NoError(t, subs[2].Close())
	assert.Equal(t, g0, settledGoroutines(t), "a closed subscription left a goroutine")

	// Subscriptions alive at Close end inside it.
	live := []*subRecorder{newSubRecorder(t), newSubRecorder(t)}
	var alive []*Subscription
	for _, rec := range live {
		alive = append(alive, subscribe(t, dep, ch, rec, SubscribeOptions{}))
		rec.waitState(1, true)
	}
	require.NoError(t, r.Close(ctx))
	for i, s := range alive {
		select {
		case <-s.done:
		default:
			t.Fatal("Runtime.Close returned before a subscription's goroutine exited")
		}
		assert.Equal(t, 2, live[i].states())
		assert.False(t, s.Stats().Up)
		require.NoError(t, s.Close())
	}
}

func mustPublish(t *testing.T, d *Deployment, ch keys.Key) int64 {
	t.Helper()
	n, err := d.Publish(ctxT(t, eventually), ch, []byte("m"))
	require.NoError(t, err)
	return n
}

// TestPubSubConcurrentPublishers: publishers on several goroutines, Stats
// readers and concurrent Closes; the handler is never entered twice at
// once and sees each publisher's messages complete and in order.
func TestPubSubConcurrentPublishers(t *testing.T) {
	f := standaloneSub(t, redistest.StartStandalone(t), SubscribeOptions{})
	dep, ch, rec, s := f.dep, f.ch, f.rec, f.sub

	const publishers, each = 4, 50
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = s.Stats()
			}
		}
	}()
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				_, err := dep.Publish(context.Background(), ch, []byte(fmt.Sprintf("%d-%03d", p, i)))
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	rec.waitFor("every message", func(ev []subEvent) bool { return len(ev) == 2+publishers*each })
	close(stop)
	next := make([]int, publishers)
	for _, m := range rec.messages()[1:] {
		var p, i int
		_, err := fmt.Sscanf(m, "%d-%d", &p, &i)
		require.NoError(t, err)
		require.Equal(t, next[p], i, "publisher %d out of order", p)
		next[p]++
	}
	assert.Equal(t, int64(1+publishers*each), s.Stats().Messages)

	var closers sync.WaitGroup
	for i := 0; i < 3; i++ {
		closers.Add(1)
		go func() { defer closers.Done(); assert.NoError(t, s.Close()) }()
	}
	closers.Wait()
	assert.Equal(t, 2, rec.states())
}
