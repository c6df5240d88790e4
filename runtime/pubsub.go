package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// Pub/Sub facade. Every topology uses sharded Pub/Sub (SPUBLISH and
// SSUBSCRIBE, Redis 7.0): on Cluster a shard channel lives on the primary
// owning its slot, so a publish reaches one shard instead of being broadcast
// over the cluster bus, and standalone and Sentinel need the same commands
// and ACL grants. A subscription is one goroutine that owns one go-redis
// PubSub per attempt and never lets go-redis reconnect it: go-redis would
// redial and resubscribe inside Receive, past the guard and without telling
// anyone, and the cache needs to know exactly when hints cannot arrive.
//
// What go-redis v9.23 does on its own, and what this file adds:
//   - a lost connection: PubSub redials and resubscribes inside the failing
//     Receive or Ping. Here every call after the first subscribe carries a
//     context that the pubsub dial hook refuses, so the attempt ends instead
//     and the loop decides (down, backoff, a fresh attempt).
//   - Cluster: ClusterClient.SSubscribe dials the slot's primary from the
//     cached slot map, which go-redis refreshes only when it is older than
//     stateReloadInterval or after a MOVED on a regular command (the
//     runtime's refresh hook adds topology-class failures of commands,
//     topology.go, but a subscribe does not pass through it); a dead
//     primary is dialled again and again. The loop reloads the slot map
//     (through the lane's slotRefresher) while it waits to retry and
//     retries at once when the channel's slot has a new primary (a
//     promoted replica). When a
//     slot moves away (migration, or a failover with the old primary alive)
//     Redis sends SUNSUBSCRIBE; go-redis hands it over as a Subscription and
//     keeps the connection, so the loop treats it as down.
//   - Sentinel: the lane dials the primary the route installed
//     (sentinel.go), and a pooled data connection to a replaced primary
//     fails go-redis's reuse check, but a PubSub connection is never
//     pooled or checked; after SENTINEL FAILOVER the old primary keeps its
//     subscribers for ~10 s while it still believes it is primary
//     (subscribed, pinging fine, receiving nothing), and a paused one that
//     resumes delivers what was published on it after the switch. So a
//     subscription follows the route's generation, the signal the data
//     lanes follow: each connection records the generation it was dialled
//     to; installing a new primary ends an attempt on an older one at once
//     (the subscribe in flight, or the watchdog closes the connection) and
//     ends the wait before the next attempt, and a message read from an
//     older generation is never delivered. Without this the loop retried
//     on its backoff, grown while the dead primary refused: resubscribed
//     0.16–0.91 s after +switch-master (TestPubSubSentinelKillFollowsTheSwitch).

const (
	// MessageBytesLimit bounds one Pub/Sub message: Publish refuses larger
	// ones and SubscribeOptions.MaxMessageBytes may not exceed it.
	MessageBytesLimit = 64 << 10

	defaultMaxMessageBytes = 1024
	defaultHealthInterval  = time.Second
	defaultReconnectMin    = 50 * time.Millisecond
	defaultReconnectMax    = 2 * time.Second
	minHealthInterval      = 10 * time.Millisecond
	maxOptionDuration      = time.Minute

	// channelKind is the key kind of every Pub/Sub channel: a keys.Key of
	// another kind names data, and publishing on it is a caller mistake.
	channelKind = "channel"
)

// SubscriptionHandler receives what a Subscription delivers, always from
// the subscription's one goroutine and in order, so neither function is
// ever called concurrently with itself or the other. Both must return
// promptly (messages wait while they run) and must not call
// Subscription.Close, which waits for that goroutine.
type SubscriptionHandler struct {
	// Message receives one message's payload; the slice is the handler's to
	// keep. It is called only while the subscription is up. Required.
	Message func(payload []byte)
	// State receives every transition: true once Redis confirmed a
	// (re)subscription, false as soon as the connection is known lost or
	// fails its health check, and a final false when the subscription ends
	// while up. The first call is always true. Optional.
	State func(up bool)
}

// SubscribeOptions tune a Subscription. Zero values take the defaults.
type SubscribeOptions struct {
	// MaxMessageBytes: larger messages are dropped and counted (default
	// 1024, at most MessageBytesLimit). go-redis still reads a dropped
	// message off the socket; the publishers' request budget and the
	// server's pubsub output-buffer limit bound what can arrive.
	MaxMessageBytes int
	// HealthInterval is the health-check period (default 1 s, 10 ms to
	// 1 min). A connection that delivers nothing for an interval is sent a
	// PING; one that still delivers nothing an interval later is declared
	// dead, so a silently dead connection goes down within 3 intervals of
	// its last reply.
	HealthInterval time.Duration
	// ReconnectMin and ReconnectMax bound the wait before a new attempt
	// (defaults 50 ms and 2 s, at most 1 min). After n consecutive failed
	// attempts the wait is uniform in [ReconnectMin, min(ReconnectMax,
	// ReconnectMin·2ⁿ)]: the first retry after a loss waits ReconnectMin,
	// and a fleet that lost its server together spreads out as failures
	// repeat.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
}

func (o SubscribeOptions) normalize() (SubscribeOptions, error) {
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = defaultMaxMessageBytes
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = defaultHealthInterval
	}
	if o.ReconnectMin == 0 {
		o.ReconnectMin = defaultReconnectMin
	}
	if o.ReconnectMax == 0 {
		o.ReconnectMax = max(defaultReconnectMax, o.ReconnectMin)
	}
	switch {
	case o.MaxMessageBytes < 0 || o.MaxMessageBytes > MessageBytesLimit:
		return o, rejectedError(fmt.Sprintf("MaxMessageBytes must be within 1..%d", MessageBytesLimit))
	case o.HealthInterval < minHealthInterval || o.HealthInterval > maxOptionDuration:
		return o, rejectedError("HealthInterval must be within 10ms..1m")
	case o.ReconnectMin < time.Millisecond || o.ReconnectMax < o.ReconnectMin || o.ReconnectMax > maxOptionDuration:
		return o, rejectedError("reconnect bounds must satisfy 1ms <= ReconnectMin <= ReconnectMax <= 1m")
	}
	return o, nil
}

// SubscriptionStats is a snapshot of a Subscription's counters.
type SubscriptionStats struct {
	// Messages delivered to the handler.
	Messages int64
	// Dropped messages: larger than MaxMessageBytes.
	Dropped int64
	// Reconnects counts subscription attempts after the first.
	Reconnects int64
	// Up reports whether the subscription is confirmed right now.
	Up bool
}

// Publish sends msg on channel (SPUBLISH, a keys.Key of kind "channel") on
// the deployment's pubsub lane and returns the number of receivers Redis
// reports: the subscribers of the node that owns the channel (on Cluster,
// of that shard's primary). A message larger than MessageBytesLimit is
// refused before sending. Errors are *certainty.Error; the guard checks
// the command like any other.
func (d *Deployment) Publish(ctx context.Context, channel keys.Key, msg []byte) (int64, error) {
	const op = "spublish"
	if err := checkChannel(channel); err != nil {
		return 0, certainty.Wrap(op, err, true)
	}
	if len(msg) > MessageBytesLimit {
		return 0, certainty.Wrap(op, rejectedError("message exceeds the Pub/Sub message limit"), true)
	}
	n, err := d.lanes[policy.LanePubSub].client.SPublish(ctx, channel.Redis(), msg).Result()
	if err != nil {
		return 0, certainty.Wrap(op, err, true)
	}
	return n, nil
}

// Subscribe subscribes to channel (SSUBSCRIBE, a keys.Key of kind
// "channel") on the pubsub lane and delivers every message and every state
// change to h, from one goroutine and in order, until the Subscription is
// closed or the runtime closes; then, if it was up, a final State(false).
// Lost connections are retried with bounded backoff forever. Subscribe
// checks everything that can be checked without Redis (lifecycle, channel,
// handler, options, the guard) and returns once the first attempt has been
// started: the first State(true) reports the confirmation. ctx bounds only
// the call; the subscription keeps ctx's values, not its cancellation.
// Errors are *certainty.Error; nothing was sent.
func (d *Deployment) Subscribe(ctx context.Context, channel keys.Key, h SubscriptionHandler, o SubscribeOptions) (*Subscription, error) {
	const op = "ssubscribe"
	if err := ctx.Err(); err != nil {
		return nil, certainty.Wrap(op, &beforeSendError{reason: "subscribe", cause: err}, false)
	}
	if err := checkChannel(channel); err != nil {
		return nil, certainty.Wrap(op, err, false)
	}
	if h.Message == nil {
		return nil, certainty.Wrap(op, rejectedError("SubscriptionHandler.Message is nil"), false)
	}
	o, err := o.normalize()
	if err != nil {
		return nil, certainty.Wrap(op, err, false)
	}
	ln := d.lanes[policy.LanePubSub]
	s := &Subscription{
		d: d, ln: ln, ch: channel.Redis(), h: h, o: o,
		log:  d.ps.log.With("deployment", d.id, "lane", string(policy.LanePubSub)),
		done: make(chan struct{}),
	}
	if err := ln.guard.Check(s.subscribeArgs()); err != nil {
		return nil, certainty.Wrap(op, err, false)
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if d.ps.gate.current() != StateOpen || !d.ps.subs.add(s) {
		s.cancel()
		return nil, certainty.Wrap(op, &AdmissionError{Deployment: d.id, Lane: policy.LanePubSub,
			Outcome: certainty.UnavailableBeforeSend}, false)
	}
	go s.run()
	return s, nil
}

func checkChannel(k keys.Key) error {
	if k.IsZero() {
		return errZeroKey
	}
	if k.Kind() != channelKind {
		return rejectedError("a Pub/Sub channel is a keys.Key of kind " + channelKind)
	}
	return nil
}

// Subscription is one channel's subscription. Its methods are safe for
// concurrent use.
type Subscription struct {
	d      *Deployment
	ln     *lane
	ch     string
	h      SubscriptionHandler
	o      SubscribeOptions
	log    *slog.Logger
	ctx    context.Context // ends the subscription when cancelled
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has exited

	messages, dropped, reconnects atomic.Int64
	up                            atomic.Bool
}

// Close ends the subscription and waits for its goroutine to exit (after a
// final State(false) if it was up). It is idempotent and always returns nil.
func (s *Subscription) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// Stats returns the subscription's counters.
func (s *Subscription) Stats() SubscriptionStats {
	return SubscriptionStats{Messages: s.messages.Load(), Dropped: s.dropped.Load(),
		Reconnects: s.reconnects.Load(), Up: s.up.Load()}
}

func (s *Subscription) subscribeArgs() []any { return []any{"ssubscribe", s.ch} }

// Why an attempt ended, besides errors from go-redis.
var (
	errHealthTimeout = errors.New("pubsub: no reply to the health PING within one interval")
	errUnsubscribed  = errors.New("pubsub: the server unsubscribed the channel (slot moved)")
	errNodeMoved     = errors.New("pubsub: subscribed on a node that no longer serves the channel")
	errEnding        = errors.New("pubsub: subscription closing")
	errNoRedial      = errors.New("pubsub: reconnect refused: the subscription loop reconnects itself")
)

// reason is a bounded label for an attempt's end: never server text, which
// may echo the channel.
func reason(err error) string {
	for _, known := range []struct {
		err   error
		label string
	}{{errHealthTimeout, "health-timeout"}, {errUnsubscribed, "unsubscribed"}, {errNodeMoved, "node-moved"}, {errEnding, "closing"}} {
		if errors.Is(err, known.err) {
			return known.label
		}
	}
	return certainty.Reason(err, false)
}

// run is the subscription's goroutine: attempts, each followed by a
// backoff, until the subscription ends.
func (s *Subscription) run() {
	defer close(s.done)
	defer s.d.ps.subs.remove(s)
	for fails := 0; ; {
		tried := s.slotPrimary()
		gen, switched := s.generation()
		wasUp, err := s.attempt(switched)
		if s.ctx.Err() != nil {
			return
		}
		if wasUp {
			fails = 0
		} else {
			s.log.Debug("redis pubsub: subscription attempt failed", "reason", reason(err), "failures", fails+1)
		}
		if !s.pause(s.backoff(fails), tried, gen) {
			return
		}
		fails++
		s.reconnects.Add(1)
	}
}

// backoff is the wait after fails consecutive failed attempts.
func (s *Subscription) backoff(fails int) time.Duration {
	lo, hi := s.o.ReconnectMin, s.o.ReconnectMax
	ceil := hi
	if fails < 32 && lo<<fails < hi && lo<<fails > 0 {
		ceil = lo << fails
	}
	if ceil <= lo {
		return lo
	}
	return lo + rand.N(ceil-lo+1)
}

// clusterRecheck is how often a Cluster subscription waiting to retry
// reloads the slot map: a primary promoted or a slot migrated meanwhile ends
// the wait, so recovery does not wait out a backoff grown while the old
// primary was refusing connections.
const clusterRecheck = 250 * time.Millisecond

// pause waits d before the next attempt, or less on Cluster when the
// channel's slot has a new primary (tried is the one the last attempt
// used) and on Sentinel when the route installs a primary newer than gen
// (the one current when the last attempt started). It reports false when
// the subscription ended meanwhile.
func (s *Subscription) pause(d time.Duration, tried string, gen uint64) bool {
	if now, switched := s.generation(); switched != nil {
		if now != gen {
			return true // switched during the attempt: the new primary at once
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-switched:
			return true
		case <-s.ctx.Done():
			return false
		}
	}
	cc, ok := s.ln.client.(*redis.ClusterClient)
	if !ok {
		return sleepCtx(s.ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(clusterRecheck)
	defer tick.Stop()
	for {
		// Asynchronous; spaced with the lane's other refreshes (topology.go).
		if s.ln.refresh != nil {
			s.ln.refresh.request(causeSubscribe)
		} else {
			cc.ReloadState(s.ctx)
		}
		select {
		case <-t.C:
			return true
		case <-s.ctx.Done():
			return false
		case <-tick.C:
			if now := s.slotPrimary(); now != "" && now != tried {
				return true
			}
		}
	}
}

// slotPrimary is the address of the channel's primary in the Cluster
// client's slot map (no I/O), or "" elsewhere or when unknown.
func (s *Subscription) slotPrimary() string {
	cc, ok := s.ln.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	n, err := cc.MasterForKey(s.ctx, s.ch)
	if err != nil {
		return ""
	}
	return n.Options().Addr
}

// generation is the Sentinel route's installed generation and a channel
// closed at the next install; (0, nil) on other topologies.
func (s *Subscription) generation() (uint64, <-chan struct{}) {
	if s.d.ps.route == nil {
		return 0, nil
	}
	return s.d.ps.route.generation()
}

// stale reports whether the session's connection went to a primary the
// Sentinel route has replaced since; always false on other topologies.
func (s *Subscription) stale(ss *session) bool {
	return s.d.ps.route != nil && s.d.ps.route.replaced(ss.node.generation())
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Subscription) transition(up bool, why error) {
	s.up.Store(up)
	if up {
		s.log.Info("redis pubsub: subscription up")
	} else {
		s.log.Warn("redis pubsub: subscription down", "reason", reason(why))
	}
	if s.h.State != nil {
		s.h.State(up)
	}
}

// session is one attempt's connection, shared by the reading goroutine and
// its watchdog.
type session struct {
	ps    *redis.PubSub
	node  dialRecord   // where the subscription's connection went
	reads atomic.Int64 // replies read, for the watchdog
	ended atomic.Pointer[error]
	stop  chan struct{} // closed by the reader when the attempt ends
	wdone chan struct{} // closed by the watchdog when it has exited
}

// kill ends the attempt from the watchdog: the reader's blocked Receive
// fails once the connection is closed.
func (ss *session) kill(err error) {
	ss.ended.Store(&err)
	_ = ss.ps.Close()
}

// attempt runs one subscription attempt: guard check, subscribe, then
// deliver until the connection is lost, fails its health check, belongs to
// a replaced Sentinel primary or the subscription ends. switched (Sentinel
// only, else nil) closes when the route installs a new primary. It reports
// whether it was up, and the down transition itself, at once: before
// waiting for its watchdog.
func (s *Subscription) attempt(switched <-chan struct{}) (up bool, err error) {
	// The guard is immutable, so this cannot fail after Subscribe's check;
	// it stays because nothing may write SSUBSCRIBE without it.
	if err := s.ln.guard.Check(s.subscribeArgs()); err != nil {
		return false, err
	}
	ss := &session{stop: make(chan struct{}), wdone: make(chan struct{})}
	// The only dial an attempt allows: the subscribe below. A bounded
	// context, because the write and the connection handshake run under it.
	sctx, cancel := context.WithTimeout(context.WithValue(s.ctx, dialRecordKey{}, &ss.node), s.d.ps.attemptTimeout)
	if switched != nil {
		// A subscribe stuck on a paused old primary gives way at the
		// switch; the goroutine ends with sctx, cancelled below.
		go func() {
			select {
			case <-switched:
				cancel()
			case <-sctx.Done():
			}
		}()
	}
	ss.ps = s.ln.client.SSubscribe(sctx) // no channel yet: builds, dials nothing
	err = ss.ps.SSubscribe(sctx, s.ch)
	cancel()
	if err != nil {
		_ = ss.ps.Close()
		return false, err
	}
	rctx := context.WithValue(s.ctx, noRedialKey{}, true)
	go s.watch(rctx, ss)
	defer func() {
		if up {
			s.transition(false, err)
		}
		close(ss.stop)
		<-ss.wdone
		_ = ss.ps.Close()
	}()
	for {
		msg, rerr := ss.ps.Receive(rctx)
		if rerr != nil {
			if why := ss.ended.Load(); why != nil {
				rerr = *why
			}
			return up, rerr
		}
		ss.reads.Add(1)
		if s.stale(ss) {
			// Read after the switch from the replaced primary: not delivered.
			return up, errNodeMoved
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			switch {
			case m.Kind == "ssubscribe" && m.Channel == s.ch && !up:
				up = true
				s.transition(true, nil)
			case m.Kind == "sunsubscribe":
				return up, errUnsubscribed
			}
		case *redis.Message:
			// Redis confirms a subscription before its first message, and
			// this connection subscribes one channel: the checks only guard
			// the handler's contract.
			if !up || m.Channel != s.ch {
				continue
			}
			if len(m.Payload) > s.o.MaxMessageBytes {
				s.dropped.Add(1)
				continue
			}
			s.messages.Add(1)
			s.h.Message([]byte(m.Payload))
		}
	}
}

// watch is the attempt's health check. It pings only a connection that
// has been silent for an interval and declares it dead when it is still
// silent an interval later (no deadline on the reads themselves: a read
// timeout in the middle of a frame would leave the reader out of step).
// Each tick it also checks that the subscription's node still serves the
// channel, and on Sentinel it closes a connection to a replaced primary as
// soon as the route installs the new one.
func (s *Subscription) watch(rctx context.Context, ss *session) {
	defer close(ss.wdone)
	t := time.NewTicker(s.o.HealthInterval)
	defer t.Stop()
	seen, pinged := ss.reads.Load(), false
	_, switched := s.generation() // nil (never ready) unless Sentinel
	for {
		if s.stale(ss) {
			ss.kill(errNodeMoved) // the route installed a new primary
			return
		}
		select {
		case <-ss.stop:
			return
		case <-rctx.Done():
			ss.kill(errEnding)
			return
		case <-switched:
			_, switched = s.generation()
			continue
		case <-t.C:
		}
		switch n := ss.reads.Load(); {
		case n != seen:
			seen, pinged = n, false
		case pinged:
			ss.kill(errHealthTimeout)
			return
		default:
			pctx, cancel := context.WithTimeout(rctx, s.o.HealthInterval)
			err := ss.ps.Ping(pctx)
			cancel()
			if err != nil {
				ss.kill(err)
				return
			}
			pinged = true
		}
		if s.moved(ss) {
			ss.kill(errNodeMoved)
			return
		}
	}
}

// moved reports whether the subscription's node no longer serves the
// channel, as far as the lane's client knows without asking the node.
func (s *Subscription) moved(ss *session) bool {
	addr := ss.node.address()
	if _, ok := s.ln.client.(*redis.ClusterClient); ok {
		// The slot map's primary for the channel (reloaded after MOVED
		// replies and every 60 s).
		now := s.slotPrimary()
		return now != "" && addr != "" && now != addr
	}
	return s.stale(ss)
}

// subscriptions is the runtime's set of live subscriptions. Close ends
// them all; none can be added afterwards.
type subscriptions struct {
	mu     sync.Mutex
	closed bool
	live   map[*Subscription]struct{}
}

func newSubscriptions() *subscriptions {
	return &subscriptions{live: make(map[*Subscription]struct{})}
}

func (ss *subscriptions) add(s *Subscription) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	ss.live[s] = struct{}{}
	return true
}

func (ss *subscriptions) remove(s *Subscription) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.live, s)
}

// end refuses new subscriptions and tells every live one to end; wait
// waits for them.
func (ss *subscriptions) end() []*Subscription {
	ss.mu.Lock()
	ss.closed = true
	live := make([]*Subscription, 0, len(ss.live))
	for s := range ss.live {
		live = append(live, s)
	}
	ss.mu.Unlock()
	for _, s := range live {
		s.cancel()
	}
	return live
}

// waitEnded waits for the goroutines of subs, at most budget or until ctx
// ends. A goroutine outlives it only while its handler blocks.
func waitEnded(ctx context.Context, subs []*Subscription, budget time.Duration) error {
	t := time.NewTimer(max(budget, 0))
	defer t.Stop()
	for i, s := range subs {
		select {
		case <-s.done:
		case <-t.C:
			return fmt.Errorf("%w: %d subscriptions still delivering", ErrDrainTimeout, len(subs)-i)
		case <-ctx.Done():
			return fmt.Errorf("%w: %d subscriptions still delivering: %w", ErrDrainTimeout, len(subs)-i, ctx.Err())
		}
	}
	return nil
}

// pubsubHost is what a deployment's Pub/Sub facade needs from its runtime.
type pubsubHost struct {
	gate *gate
	log  *slog.Logger
	subs *subscriptions
	// route is the deployment's Sentinel route (nil on other topologies):
	// subscriptions follow its generation.
	route *sentinelRoute
	// attemptTimeout bounds one subscribe: dial, handshake and write.
	attemptTimeout time.Duration
}

// newPubsubHost builds dc's facade state. The lanes' pubsubDial hook is
// installed by the runtime; the facade only reads what it records.
func newPubsubHost(r *Runtime, dc policy.Deployment, _ *pubsubDial) *pubsubHost {
	h := &pubsubHost{gate: r.gate, log: r.log, subs: r.subs,
		attemptTimeout: dc.Timeouts.Connect + laneTimeouts(dc, dc.Lanes[policy.LanePubSub])}
	for _, sen := range r.sentinels {
		if sen.deployment == dc.ID {
			h.route = sen
		}
	}
	return h
}

type (
	noRedialKey   struct{}
	dialRecordKey struct{}
)

// pubsubDial is a hook on every client of the pubsub lane (Cluster node
// clients included). go-redis dials PubSub connections with the caller's
// context, which is how a subscription talks to it: a context marked
// noRedialKey is refused (go-redis's own reconnect inside Receive or Ping,
// which would resubscribe behind the loop's back), and one carrying a
// *dialRecord learns where the connection went.
type pubsubDial struct{}

// DialHook refuses marked redials and records where dials went.
func (h *pubsubDial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if ctx.Value(noRedialKey{}) != nil {
			return nil, errNoRedial
		}
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if rec, ok := ctx.Value(dialRecordKey{}).(*dialRecord); ok {
			var gen uint64
			if sc, ok := c.(*sentinelConn); ok {
				gen = sc.gen
			}
			rec.store(addr, gen)
		}
		return c, nil
	}
}

// ProcessHook passes commands through.
func (h *pubsubDial) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook passes pipelines through.
func (h *pubsubDial) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// dialRecord is where one connection went: addr as go-redis named it (a
// Cluster node's address as in the slot map) and, on Sentinel, the
// generation of the primary the route dialled (0 elsewhere).
type dialRecord struct {
	mu   sync.Mutex
	addr string
	gen  uint64
}

func (r *dialRecord) store(addr string, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addr, r.gen = addr, gen
}

func (r *dialRecord) address() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

func (r *dialRecord) generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}
