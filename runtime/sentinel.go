package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/internal/sentinelquorum"
)

// This file owns how a Sentinel deployment finds its primary and follows it
// through a failover (reference §37.13.1–2).
//
// Discovery. A deployment has one sentinelRoute, shared by its lanes. It
// asks every configured Sentinel SENTINEL GET-MASTER-ADDR-BY-NAME <exact
// name> in parallel, within one deadline (Timeouts.Connect +
// Timeouts.Command), and hands the answers to sentinelquorum.Decide: a
// candidate needs a quorum (a majority of the configured Sentinels, at least
// two) and no other address may have or still reach one. Only the configured
// Sentinels are asked (none learnt at run time), on clients of their own
// with the Sentinel credential and TLS settings; the data credential and CA
// are used only once a changed primary is agreed, to confirm it with ROLE
// (it must answer "master") on the exact agreed endpoint with the admin
// lane's credential, before it is installed. An unchanged primary opens no
// data connection.
//
// The Sentinel clients and the one-off ROLE client carry neither the
// admission hook nor the guard: they send only the fixed commands written
// in this file (SENTINEL GET-MASTER-ADDR-BY-NAME, SUBSCRIBE +switch-master,
// ROLE), take no caller input and carry no data.
//
// Triggers, one single flight. A discovery runs on the route's one worker,
// at most one running and one queued: on the first dial, after a
// topology-class failure of a call on any lane (sentinelHook: refused,
// reset or timed-out connections, READONLY, MASTERDOWN, LOADING, ...), on
// every +switch-master any Sentinel publishes for the name (each Sentinel
// is subscribed, so the second one to adopt the new configuration
// completes the quorum), and every sentinelPoll. A discovery that changes
// nothing spaces the next failure-triggered one by a backoff doubling from
// sentinelBackoffMin to sentinelBackoffMax; a +switch-master skips the
// backoff. So a dead primary costs at most about one discovery a second.
//
// Swap and drain. The lane clients are plain go-redis Clients whose dialer
// connects to the route's current target (address + generation) and tags
// each connection with the generation. Installing a new target is one
// atomic store: every later dial goes to the new primary, and a pooled
// connection of an older generation is refused by go-redis's reuse check
// (sentinelConn.SyscallConn) and closed without anything written to it. A
// call already on an old connection finishes there with its own certainty
// (a reply, or INDETERMINATE when the old primary stays silent until the
// command timeout); nothing is ever re-sent (MaxRetries -1, as everywhere).
// Closing the runtime closes the clients, then the route: its worker, its
// subscriptions and its Sentinel clients; a candidate confirmed while the
// route closes is never installed.
const (
	// sentinelPoll is the period of the scheduled discovery (the
	// reference's default, 30 s).
	sentinelPoll = 30 * time.Second
	// sentinelBackoffMin and sentinelBackoffMax bound the spacing of
	// discoveries that found nothing new.
	sentinelBackoffMin = 50 * time.Millisecond
	sentinelBackoffMax = time.Second
	// sentinelHealth is the health-check interval of the +switch-master
	// subscriptions (a silent Sentinel connection is replaced after it).
	sentinelHealth = 5 * time.Second
	// sentinelProbeWait is the lane clients' DialTimeout: how long go-redis
	// lets the dialer run. The TCP (and TLS) dial itself stays bounded by
	// Timeouts.Connect; the rest is for the wait sentinelDialer describes.
	sentinelProbeWait = 10 * time.Second
	// sentinelPoolSize bounds each Sentinel client: discoveries are single
	// flight, so one connection is used at a time, plus the subscription's
	// own.
	sentinelPoolSize = 2
)

// ErrNoPrimary is the class of a dial that found no quorum-agreed primary
// (errors.Is). Its message carries only the outcome and the counts, never
// an endpoint or a credential.
var ErrNoPrimary = errors.New("redis sentinel: no quorum-agreed primary")

// errStaleConn refuses a pooled connection to a replaced primary.
var errStaleConn = errors.New("redis sentinel: connection to a replaced primary")

// sentinelTarget is one installed primary.
type sentinelTarget struct {
	addr    string
	gen     uint64 // 1 for the first primary, +1 per switch
	at      time.Time
	verdict sentinelquorum.Verdict
}

// sentinelRoute discovers and follows the primary of one Sentinel
// deployment. It is safe for concurrent use.
type sentinelRoute struct {
	deployment string
	master     string
	log        *slog.Logger
	obs        SentinelObserver // nil: nobody counts
	rules      sentinelquorum.Rules
	sentinels  []*redis.Client
	timeout    time.Duration
	// confirmOptions returns the options of the one-off client that sends
	// ROLE to a candidate (admin-lane credential, data TLS).
	confirmOptions func(addr string) *redis.Options
	// dataDial dials a data node (data TLS; idle-check wrapper on plain TCP).
	dataDial func(ctx context.Context, network, addr string) (net.Conn, error)

	cur  atomic.Pointer[sentinelTarget]
	last atomic.Pointer[sentinelquorum.Verdict] // the latest discovery's verdict
	// lastSwitch is when a +switch-master for the name last arrived
	// (UnixNano; 0 before the first).
	lastSwitch atomic.Int64
	runs       atomic.Int64 // discoveries completed
	// discoverFn is discover; tests of the worker's scheduling replace it.
	discoverFn func(context.Context) bool

	wake   chan struct{} // a queued discovery (capacity 1)
	urgent chan struct{} // a queued +switch-master discovery (capacity 1)

	mu       sync.Mutex
	started  bool
	closed   bool
	flight   chan struct{} // closed when the next discovery ends
	changed  chan struct{} // closed when the next target is installed, or at close
	dialers  map[policy.Lane]*sentinelDialer
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	lastWarn time.Time
}

// newSentinelRoute builds the route of a Sentinel deployment, or returns
// nil for any other topology. It dials nothing: the worker and the
// subscriptions start on the first trigger.
func newSentinelRoute(d policy.Deployment, lg *slog.Logger, obs Observer) (*sentinelRoute, error) {
	t, ok := d.Topology.(*policy.Sentinel)
	if !ok || t == nil {
		return nil, nil
	}
	sentinelTLS, err := tlsConfig(t.TLS)
	if err != nil {
		return nil, fmt.Errorf("sentinel %w", err)
	}
	dataTLS, err := tlsConfig(d.TLS)
	if err != nil {
		return nil, err
	}
	loopback := true
	for _, ep := range t.Endpoints {
		host, _, err := net.SplitHostPort(ep)
		if err != nil {
			return nil, fmt.Errorf("sentinel endpoint: %w", err)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			if host != "localhost" {
				loopback = false
			}
		}
	}
	r := &sentinelRoute{
		deployment: d.ID,
		master:     t.MasterName,
		log:        lg,
		obs:        sentinelObserver(obs),
		rules:      sentinelquorum.Rules{Quorum: sentinelquorum.Quorum(len(t.Endpoints)), AllowLoopback: loopback},
		timeout:    d.Timeouts.Connect + d.Timeouts.Command,
		wake:       make(chan struct{}, 1),
		urgent:     make(chan struct{}, 1),
		flight:     make(chan struct{}),
		changed:    make(chan struct{}),
		dialers:    make(map[policy.Lane]*sentinelDialer),
	}
	r.discoverFn = r.discover
	for _, ep := range t.Endpoints {
		r.sentinels = append(r.sentinels, redis.NewClient(&redis.Options{
			Addr:                     ep,
			ClientName:               d.ClientName + "-discovery",
			Protocol:                 protocol,
			Username:                 t.Auth.User,
			Password:                 string(t.Auth.Password.Reveal()),
			MaxRetries:               -1,
			DialTimeout:              d.Timeouts.Connect,
			DialerRetries:            dialerRetries,
			ReadTimeout:              d.Timeouts.Command,
			WriteTimeout:             d.Timeouts.Command,
			ContextTimeoutEnabled:    true,
			PoolSize:                 sentinelPoolSize,
			MaxIdleConns:             sentinelPoolSize,
			MaxActiveConns:           sentinelPoolSize,
			PoolTimeout:              d.Timeouts.Acquire,
			PipelinePoolSize:         -1,
			TLSConfig:                sentinelTLS,
			DisableIdentity:          true,
			MaintNotificationsConfig: disabledMaint(),
		}))
	}
	r.confirmOptions = func(addr string) *redis.Options {
		o := standaloneOptions(d, policy.LaneAdmin, dataTLS)
		o.Addr = addr
		o.ClientName = d.ClientName + "-discovery"
		o.PoolSize, o.MaxIdleConns, o.MaxActiveConns = 1, 1, 1
		return o
	}
	nd := netDialer(d.Timeouts.Connect)
	r.dataDial = nd.DialContext
	switch {
	case dataTLS != nil:
		td := &tls.Dialer{NetDialer: nd, Config: dataTLS}
		r.dataDial = td.DialContext
	case d.Timeouts.IdleCheck > 0:
		r.dataDial = idleCheckDialer(nd.DialContext, d.Timeouts.IdleCheck)
	}
	return r, nil
}

// newLaneClient builds lane l's client: through the route on Sentinel
// (sen non-nil), by newClient otherwise.
func newLaneClient(d policy.Deployment, l policy.Lane, sen *sentinelRoute, nodeHooks func(*redis.Client)) (redis.UniversalClient, error) {
	if sen == nil {
		return newClient(d, l, nodeHooks)
	}
	return sen.laneClient(d, l), nil
}

// laneClient is lane l's client: a plain Client that always dials the
// route's current primary. Its first hook (the outermost) reports
// topology-class failures to the route; the runtime adds admission and the
// guard inside it.
func (r *sentinelRoute) laneClient(d policy.Deployment, l policy.Lane) *redis.Client {
	o := standaloneOptions(d, l, nil)
	// The address go-redis shows for the pool; every dial goes to the
	// route's target instead.
	o.Addr = "sentinel-primary:0"
	sd := &sentinelDialer{r: r, breaker: l != policy.LanePubSub, poolSize: int64(o.PoolSize)}
	o.Dialer = sd.dial
	o.DialTimeout = sentinelProbeWait
	c := redis.NewClient(o)
	c.AddHook(sentinelHook{r: r})
	r.mu.Lock()
	r.dialers[l] = sd
	r.mu.Unlock()
	return c
}

// sentinelDialer dials one lane client's connections to the route's
// current primary.
//
// A failed dial fails at once (UNAVAILABLE_BEFORE_SEND: nothing was sent),
// except go-redis's breaker probe. go-redis v9.23's pool (internal/pool,
// dialConn and tryDial) counts every failed dial and never forgets one
// until a probe succeeds; at PoolSize failures it fails every dial at once
// without calling the dialer, and a background probe calls the dialer,
// sleeping one second after each failure, until a dial succeeds. A dead
// primary opens that breaker within a few calls, and recovery after the
// switch then waited for the probe's next attempt: 0 to 1 s, the constant
// ~0.8 s of issue 15. So the dialer mirrors the count (DialerRetries is 1:
// one dialer call per counted dial) and, while the breaker is open — when
// only the probe reaches the dialer — parks a failed dial until the route
// installs a new primary (within its context: DialTimeout, which is
// sentinelProbeWait on these lanes) and dials that one, so the breaker
// closes as soon as the new primary accepts a connection.
// TestSentinelKillUnderTraffic pins this (probeSwitches).
//
// The pubsub lane is excluded: its Pub/Sub connections are dialled by a
// pool without a breaker through the same dialer, so the count would not
// mirror go-redis's; there the breaker is left to go-redis's probe.
type sentinelDialer struct {
	r        *sentinelRoute
	breaker  bool  // mirror go-redis's dial breaker (every lane but pubsub)
	poolSize int64 // the breaker's threshold
	fails    atomic.Int64
	// probeSwitches counts parked dials that reached a new primary.
	probeSwitches atomic.Int64
}

func (d *sentinelDialer) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	open := d.breaker && d.fails.Load() >= d.poolSize
	t, err := d.r.primary(ctx)
	if err == nil {
		var c net.Conn
		if c, err = d.r.dataDial(ctx, network, t.addr); err == nil {
			if open {
				d.fails.Store(0) // the probe succeeded: go-redis closes the breaker
			}
			return &sentinelConn{Conn: c, route: d.r, gen: t.gen}, nil
		}
		d.r.trigger(false)
	}
	if !open {
		d.fails.Add(1)
		return nil, err
	}
	var gen uint64
	if t != nil {
		gen = t.gen
	}
	if next := d.r.awaitChange(ctx, gen); next != nil {
		if c, err2 := d.r.dataDial(ctx, network, next.addr); err2 == nil {
			d.fails.Store(0)
			d.probeSwitches.Add(1)
			return &sentinelConn{Conn: c, route: d.r, gen: next.gen}, nil
		}
	}
	return nil, err
}

// awaitChange waits until a target newer than gen is installed, ctx ends
// (nil) or the route closes (nil).
func (r *sentinelRoute) awaitChange(ctx context.Context, gen uint64) *sentinelTarget {
	for {
		r.mu.Lock()
		ch, closed := r.changed, r.closed
		r.mu.Unlock()
		if closed {
			return nil
		}
		if t := r.cur.Load(); t != nil && t.gen != gen {
			return t
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
}

// generation returns the installed primary's generation (0 before the
// first) and a channel closed when the next primary is installed or the
// route closes: what the Pub/Sub lane follows, since its connections never
// pass go-redis's reuse check (pubsub.go).
func (r *sentinelRoute) generation() (uint64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gen uint64
	if t := r.cur.Load(); t != nil {
		gen = t.gen
	}
	return gen, r.changed
}

// replaced reports whether gen, a connection's generation, belongs to a
// primary the route has since replaced (false for 0: not a route dial).
func (r *sentinelRoute) replaced(gen uint64) bool {
	t := r.cur.Load()
	return gen != 0 && t != nil && t.gen != gen
}

// primary returns the installed target, or waits for one discovery to end.
func (r *sentinelRoute) primary(ctx context.Context) (*sentinelTarget, error) {
	if t := r.cur.Load(); t != nil {
		return t, nil
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, redis.ErrClosed
	}
	done := r.flight
	r.startLocked()
	r.mu.Unlock()
	r.request(false)
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if t := r.cur.Load(); t != nil {
		return t, nil
	}
	return nil, r.noPrimaryError()
}

func (r *sentinelRoute) noPrimaryError() error {
	v := r.last.Load()
	if v == nil {
		return ErrNoPrimary
	}
	outcome := v.Outcome.String()
	if v.Outcome == sentinelquorum.Agreed {
		outcome = "agreed but not confirmed as master"
	}
	return fmt.Errorf("%w: %s, %d of %d sentinels responded, %d agree, quorum %d",
		ErrNoPrimary, outcome, v.Responded, v.Asked, v.Agreeing, v.Quorum)
}

// trigger queues a discovery after a topology-class failure of a call
// (urgent false) or a +switch-master (urgent true). It never blocks.
func (r *sentinelRoute) trigger(urgent bool) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.startLocked()
	r.mu.Unlock()
	r.request(urgent)
}

func (r *sentinelRoute) request(urgent bool) {
	ch := r.wake
	if urgent {
		ch = r.urgent
	}
	select {
	case ch <- struct{}{}:
	default: // one is queued already: coalesce
	}
}

// startLocked starts the worker and the subscriptions once (r.mu held).
func (r *sentinelRoute) startLocked() {
	if r.started {
		return
	}
	r.started = true
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1 + len(r.sentinels))
	go r.worker(ctx)
	for _, c := range r.sentinels {
		go r.listen(ctx, c)
	}
}

// worker runs the discoveries one at a time (see the file comment).
func (r *sentinelRoute) worker(ctx context.Context) {
	defer r.wg.Done()
	poll := time.NewTimer(sentinelPoll)
	defer poll.Stop()
	backoff := sentinelBackoffMin
	now := false
	for {
		if !now {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			case <-r.urgent:
				backoff = sentinelBackoffMin
			case <-poll.C:
			}
		}
		now = false
		// Every trigger queued so far is served by this discovery.
		select {
		case <-r.urgent:
		default:
		}
		select {
		case <-r.wake:
		default:
		}
		changed := r.discoverFn(ctx)
		r.endFlight()
		poll.Reset(sentinelPoll)
		if changed {
			backoff = sentinelBackoffMin
			continue
		}
		wait := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-r.urgent:
			wait.Stop()
			now, backoff = true, sentinelBackoffMin
		case <-wait.C:
			backoff = min(2*backoff, sentinelBackoffMax)
		}
	}
}

// endFlight wakes those waiting for a discovery to end.
func (r *sentinelRoute) endFlight() {
	r.mu.Lock()
	close(r.flight)
	r.flight = make(chan struct{})
	r.mu.Unlock()
}

// listen follows one Sentinel's +switch-master messages. A message is only
// a reason to ask all the Sentinels again, never a switch by itself.
func (r *sentinelRoute) listen(ctx context.Context, c *redis.Client) {
	defer r.wg.Done()
	ps := c.Subscribe(ctx, "+switch-master")
	defer func() { _ = ps.Close() }()
	ch := ps.Channel(redis.WithChannelHealthCheckInterval(sentinelHealth))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			r.onSwitchMaster(m.Payload)
		}
	}
}

// onSwitchMaster handles one +switch-master payload: for the exact master
// name it queues an urgent discovery; anything else is ignored.
func (r *sentinelRoute) onSwitchMaster(payload string) {
	sm, err := sentinelquorum.ParseSwitchMaster(payload)
	if err != nil || sm.Name != r.master {
		return
	}
	r.lastSwitch.Store(time.Now().UnixNano())
	r.trigger(true)
}

// discover runs one discovery and installs an agreed, confirmed new
// primary. It reports whether the primary changed.
func (r *sentinelRoute) discover(ctx context.Context) bool {
	defer r.runs.Add(1) // counted once its verdict is stored
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	answers := make(chan sentinelquorum.Answer, len(r.sentinels))
	for i, c := range r.sentinels {
		go func() { answers <- r.ask(ctx, i, c) }()
	}
	got := make([]sentinelquorum.Answer, 0, len(r.sentinels))
	var v sentinelquorum.Verdict
	for range r.sentinels {
		var a sentinelquorum.Answer
		select {
		case a = <-answers:
		case <-ctx.Done():
			a = sentinelquorum.Answer{Sentinel: -1, Err: ctx.Err()}
		}
		if a.Sentinel >= 0 {
			got = append(got, a)
		}
		v = sentinelquorum.Decide(got, len(r.sentinels), r.rules)
		if v.Settled() || ctx.Err() != nil {
			break
		}
	}
	if v.Outcome == sentinelquorum.Undecided {
		// The deadline ended first: the silent Sentinels did not respond.
		v.Outcome = sentinelquorum.NoQuorum
	}
	r.last.Store(&v)
	if v.Outcome != sentinelquorum.Agreed {
		r.observe(SentinelNoQuorum)
		r.warn("redis sentinel: no quorum on the primary", v, nil)
		return false
	}
	cur := r.cur.Load()
	if cur != nil && cur.addr == v.Primary {
		r.observe(SentinelUnchanged)
		return false
	}
	if err := r.confirm(ctx, v.Primary); err != nil {
		r.observe(SentinelUnconfirmed)
		r.warn("redis sentinel: agreed primary not confirmed", v, err)
		return false
	}
	next := &sentinelTarget{addr: v.Primary, gen: 1, at: time.Now(), verdict: v}
	if cur != nil {
		next.gen = cur.gen + 1
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	r.cur.Store(next)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	attrs := []any{"deployment", r.deployment, "generation", next.gen, "agreeing", v.Agreeing,
		"responded", v.Responded, "asked", v.Asked, "quorum", v.Quorum}
	if cur == nil {
		r.observe(SentinelDiscovered)
		r.log.Info("redis sentinel: primary discovered", attrs...)
	} else {
		r.observe(SentinelSwitched)
		r.log.Warn("redis sentinel: primary switched; connections to the old one are drained", attrs...)
	}
	return true
}

// Sentinel discovery results, the bounded label of SentinelObserver.
const (
	SentinelDiscovered  = "discovered"  // the first primary was installed
	SentinelSwitched    = "switched"    // a new primary replaced the old one
	SentinelUnchanged   = "unchanged"   // the quorum named the current primary
	SentinelNoQuorum    = "no-quorum"   // no address reached the quorum in time
	SentinelUnconfirmed = "unconfirmed" // the agreed address did not answer ROLE master
)

// SentinelObserver is an optional extension of Observer: one that also
// implements it is told the result of every Sentinel discovery of a
// deployment (one of the Sentinel* results).
type SentinelObserver interface {
	SentinelDiscovery(deployment, result string)
}

func sentinelObserver(obs Observer) SentinelObserver {
	so, _ := obs.(SentinelObserver)
	return so
}

func (r *sentinelRoute) observe(result string) {
	if r.obs != nil {
		r.obs.SentinelDiscovery(r.deployment, result)
	}
}

// ask sends SENTINEL GET-MASTER-ADDR-BY-NAME to Sentinel i.
func (r *sentinelRoute) ask(ctx context.Context, i int, c *redis.Client) sentinelquorum.Answer {
	reply, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", r.master).StringSlice()
	switch {
	case errors.Is(err, redis.Nil):
		return sentinelquorum.Answer{Sentinel: i, NoMaster: true}
	case err != nil:
		return sentinelquorum.Answer{Sentinel: i, Err: err}
	}
	return sentinelquorum.Answer{Sentinel: i, Reply: reply}
}

// confirm asks the agreed candidate for its ROLE on a connection of its own.
func (r *sentinelRoute) confirm(ctx context.Context, addr string) error {
	c := redis.NewClient(r.confirmOptions(addr))
	defer func() { _ = c.Close() }()
	vals, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return err
	}
	if len(vals) == 0 {
		return errors.New("empty ROLE reply")
	}
	if role, _ := vals[0].(string); role != "master" {
		return fmt.Errorf("candidate role is %q", boundedWord(role))
	}
	return nil
}

// warn logs a failed discovery at WARN at most once per refreshQuiet, at
// DEBUG otherwise; only counts, never an endpoint.
func (r *sentinelRoute) warn(msg string, v sentinelquorum.Verdict, err error) {
	attrs := []any{"deployment", r.deployment, "outcome", v.Outcome.String(), "agreeing", v.Agreeing,
		"responded", v.Responded, "failed", v.Failed, "no_master", v.NoMaster, "unusable", v.Unusable,
		"asked", v.Asked, "quorum", v.Quorum}
	if err != nil {
		attrs = append(attrs, "reason", confirmReason(err))
	}
	r.mu.Lock()
	now := time.Now()
	loud := r.lastWarn.IsZero() || now.Sub(r.lastWarn) >= refreshQuiet
	if loud {
		r.lastWarn = now
	}
	r.mu.Unlock()
	if loud {
		r.log.Warn(msg, attrs...)
		return
	}
	r.log.Debug(msg, attrs...)
}

// confirmReason is a bounded description of a confirmation failure.
func confirmReason(err error) string {
	if cause, ok := topologyCause(err); ok {
		return cause
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return "server-error"
	}
	return "not-master"
}

// close stops the worker and the subscriptions and closes the Sentinel
// clients. Idempotent; a discovery that ends afterwards installs nothing.
func (r *sentinelRoute) close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	cancel := r.cancel
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	r.wg.Wait()
	r.endFlight()
	var errs []error
	for _, c := range r.sentinels {
		if err := c.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sentinelConn is a data connection tagged with the generation of the
// primary it was dialled to.
type sentinelConn struct {
	net.Conn
	route *sentinelRoute
	gen   uint64
}

// SyscallConn is what go-redis's reuse check calls on a pooled connection
// (see idleconn.go): a connection to a replaced primary fails it, so
// go-redis closes it instead of writing to it; a current one is checked as
// before (the socket, or nothing below TLS, as go-redis itself does).
func (c *sentinelConn) SyscallConn() (syscall.RawConn, error) {
	if t := c.route.cur.Load(); t == nil || t.gen != c.gen {
		return nil, errStaleConn
	}
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return uncheckedRawConn{}, nil
}

// uncheckedRawConn reports a connection healthy without a system call: what
// go-redis does for a TLS connection, which it never peeks below.
type uncheckedRawConn struct{}

func (uncheckedRawConn) Control(func(fd uintptr)) error    { return errors.ErrUnsupported }
func (uncheckedRawConn) Read(func(fd uintptr) bool) error  { return nil }
func (uncheckedRawConn) Write(func(fd uintptr) bool) error { return errors.ErrUnsupported }

// sentinelHook is the outermost hook of a Sentinel lane client: it returns
// each call's outcome untouched and, after the call has ended, asks the
// route for a discovery when the failure is topology-class (topologyCause:
// refused, reset or timed-out connections, READONLY, MASTERDOWN, LOADING,
// ...; never overload, ACL denials or guard rejections).
type sentinelHook struct{ r *sentinelRoute }

var _ redis.Hook = sentinelHook{}

func (h sentinelHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h sentinelHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			h.failed(err)
		}
		return err
	}
}

func (h sentinelHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil && !h.failed(err) {
			for _, c := range cmds {
				if h.failed(c.Err()) {
					break
				}
			}
		}
		return err
	}
}

func (h sentinelHook) failed(err error) bool {
	if errors.Is(err, ErrNoPrimary) {
		return false // the dial already asked for a discovery
	}
	if _, ok := topologyCause(err); ok {
		h.r.trigger(false)
		return true
	}
	return false
}
