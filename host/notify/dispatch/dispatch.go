// Package dispatch owns the notification worker loop: it consumes the
// durable intents of host/notify/intent through their consumer group and
// delivers each one through transports, claim → (skip if already final:
// consumer dedup) → transport call → terminal-once finalize.
//
// Guarantee: at-least-once delivery plus an idempotent consumer, never
// exactly once; every call carries the intent's IntentID for the receiver
// to deduplicate on.
//
// No blind retry. A transport is called again for an intent only after a
// recorded RejectedDefinite (provably not sent). An attempt whose outcome
// was never recorded — the consumer died after its claim, or every try of
// its finalize failed (Close still records what a cancelled call did) —
// leaves the record DELIVERING and the entry pending; the consumer that reclaims the entry after MinIdle finds
// DELIVERING (notify-claim-v2: intent.InDoubt), makes the intent
// INDETERMINATE, acknowledges the entry and calls no transport, neither
// the same one nor a fallback: the same outcome as a transport call that
// ended Indeterminate. The price: a consumer that dies after its claim and
// before the send began leaves an intent INDETERMINATE that was never
// sent; it is counted (Observer.Final) and logged at warn level, and a
// provider receipt (intent.Store.RecordReceipt) still makes it DELIVERED.
// A consumer that dies before its claim loses nothing: the record is
// still PENDING and the reclaim sends it.
//
// Retries happen only on RejectedDefinite, with the reference backoff
// (base × 2^(n−1) plus full jitter in [0, base] from an injected random
// source, capped; a provider's RetryAfter is honoured within the cap), up
// to AttemptsPerTransport per transport, then the next (fallback)
// transport without delay. Indeterminate is final: never retried, never
// sent to a fallback. A retry that would keep an entry past MinIdle is
// left pending for the reclaim (it then runs after MinIdle, not after its
// backoff), and a read loop takes its delivery slots before it reads and
// reads at most as many entries as it holds (Concurrency bounds both), so
// no entry waits in a live consumer for a slot: a live consumer's entry is
// never taken over mid-attempt.
// An entry delivered MaxDeliveries times, or one that does not decode, is
// quarantined.
//
// Recipients and rendered content never reach a log line, an error or a
// metric label: logs carry the intent id, shard, attempt, transport name
// and the receipt's bounded code only.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/plugins/transport"
)

// Observer receives the dispatcher's events; labels are bounded (state,
// transport names from config, outcome, closed reasons, shard index).
// Implementations must be safe for concurrent use and fast.
type Observer interface {
	// Final: an intent reached a final state through this dispatcher.
	Final(state intent.State)
	// Dispatched: one transport call's outcome.
	Dispatched(transportName string, outcome transport.Outcome)
	// Retried: another attempt follows on transportName (a retry or a
	// fallback).
	Retried(transportName string)
	// Quarantined: an entry was moved to quarantine (intent.Reason*).
	Quarantined(reason string)
	// Unopened: an entry was left pending because its plan is sealed
	// with a key version this process does not hold.
	Unopened()
	// Backlog: a shard's pending count and lag (-1: unknown).
	Backlog(shard int, pending, lag int64)
	// Reclaimed: one Store.Reclaim of shard took over entries (a dead or
	// stalled consumer's) in trips XAUTOCLAIM calls; wrapped reports that
	// its scan reached the end of the shard's PEL (a lap ended).
	Reclaimed(shard, entries, trips int, wrapped bool)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Final(intent.State)                   {}
func (NopObserver) Dispatched(string, transport.Outcome) {}
func (NopObserver) Retried(string)                       {}
func (NopObserver) Quarantined(string)                   {}
func (NopObserver) Unopened()                            {}
func (NopObserver) Reclaimed(int, int, int, bool)        {}
func (NopObserver) Backlog(int, int64, int64)            {}

// Random is the jitter source (math/rand/v2's *rand.Rand satisfies it).
type Random interface{ Int64N(n int64) int64 }

// Defaults.
const (
	DefaultConcurrency          = 4
	DefaultReadCount            = 1
	DefaultBlock                = 500 * time.Millisecond
	DefaultMinIdle              = 10 * time.Minute
	DefaultReclaimEvery         = 30 * time.Second
	DefaultReclaimBatch         = 256
	DefaultMaxDeliveries        = 5
	DefaultAttemptsPerTransport = 3
	DefaultBase                 = 30 * time.Second
	DefaultCap                  = 5 * time.Minute
	DefaultCallTimeout          = 30 * time.Second
	// finalizeTries bounds the repeats of a finalize whose reply was lost
	// (repeating it is how it reconciles: ALREADY_FINAL if it applied).
	finalizeTries = 3
	// finalizeTimeout bounds the finalize of one transport call, tries
	// included. It runs on a context detached from the delivery's, so
	// Close's deadline cannot keep a send from being recorded; this bound
	// keeps Close finite.
	finalizeTimeout = 10 * time.Second
)

// ErrInvalidConfig is matched by New's errors.
var ErrInvalidConfig = errors.New("dispatch: invalid config")

// Config configures a Dispatcher.
type Config struct {
	// Consumer names this dispatcher in the group ([A-Za-z0-9._-], unique
	// per process).
	Consumer string
	// Transports by name (the names plans list).
	Transports map[string]transport.Transport
	// Concurrency bounds deliveries in flight (default 4). A read loop
	// takes slots before it reads, so entries read count against it too.
	Concurrency int
	// ReadCount bounds entries per read (default 1: plans may be large,
	// and the lane's reply budget bounds a read); a read takes at most as
	// many as there are free slots.
	ReadCount int
	// Block is how long a read waits for new entries (default 500ms; at
	// most half the blocking lane's read timeout).
	Block time.Duration
	// MinIdle is how long an entry stays pending before another consumer
	// reclaims it (default 10m). It must exceed Cap + CallTimeout, or a
	// live consumer's entry would be reclaimed during its backoff.
	MinIdle time.Duration
	// ReclaimEvery spaces reclaim scans (default 30s, at most MinIdle/2).
	ReclaimEvery time.Duration
	// ReclaimBatch bounds the entries one reclaim scan of a shard takes
	// over (default 256, at most 65536). A scan goes on page after page
	// (ReadCount entries, or the free slots) until a page ends a lap of
	// the shard's PEL short (see intent.Store.Reclaim), so a backlog of
	// entries pending for MinIdle drains in one scan,
	// not one page per ReclaimEvery; the bound keeps new entries of the
	// shard from waiting behind a long backlog.
	ReclaimBatch int
	// MaxDeliveries quarantines an entry delivered that often (default 5).
	MaxDeliveries int64
	// AttemptsPerTransport, Base, Cap: the retry policy (defaults 3, 30s,
	// 5m).
	AttemptsPerTransport int
	Base, Cap            time.Duration
	// CallTimeout bounds one transport call (default 30s).
	CallTimeout time.Duration
	// Random is the jitter source (default: a ChaCha8 seeded from the
	// runtime's random source).
	Random Random
	// Sleep waits d or until ctx ends (default: a timer). Tests inject one.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock for reclaim spacing (default time.Now).
	Now      func() time.Time
	Observer Observer
	Logger   *slog.Logger
}

func (c *Config) fill() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Concurrency, DefaultConcurrency)
	def(&c.ReadCount, DefaultReadCount)
	def(&c.ReclaimBatch, DefaultReclaimBatch)
	def(&c.AttemptsPerTransport, DefaultAttemptsPerTransport)
	defD(&c.Block, DefaultBlock)
	defD(&c.MinIdle, DefaultMinIdle)
	defD(&c.ReclaimEvery, min(DefaultReclaimEvery, c.MinIdle/2))
	defD(&c.Base, DefaultBase)
	defD(&c.Cap, DefaultCap)
	defD(&c.CallTimeout, DefaultCallTimeout)
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.Random == nil {
		var seed [32]byte
		for i := range seed {
			seed[i] = byte(rand.Uint32())
		}
		c.Random = rand.New(rand.NewChaCha8(seed))
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var errs []error
	bad := func(f string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+f, append([]any{ErrInvalidConfig}, a...)...))
	}
	if c.Consumer == "" || len(c.Consumer) > 64 {
		bad("consumer name must be 1..64 bytes")
	}
	if len(c.Transports) == 0 {
		bad("no transports")
	}
	for n, t := range c.Transports {
		if !intent.ValidTransportName(n) || t == nil {
			bad("transport %q: name must be [a-z0-9-]{1,64} with a transport", n)
		}
	}
	if c.Concurrency < 1 || c.Concurrency > 1024 || c.ReadCount < 1 || c.ReadCount > 64 {
		bad("concurrency 1..1024 and read count 1..64")
	}
	if c.ReclaimBatch < 1 || c.ReclaimBatch > 65536 {
		bad("reclaim batch 1..65536")
	}
	if c.AttemptsPerTransport < 1 || c.AttemptsPerTransport*intent.MaxTransports > 1000 {
		bad("attempts per transport 1..250")
	}
	if c.Base < time.Millisecond || c.Cap < c.Base || c.CallTimeout < time.Millisecond || c.Block < time.Millisecond {
		bad("base, cap, call timeout and block must be at least 1ms, cap >= base")
	}
	if c.MinIdle <= c.Cap+c.CallTimeout {
		bad("min idle %s must exceed cap + call timeout (%s)", c.MinIdle, c.Cap+c.CallTimeout)
	}
	if c.MaxDeliveries < 2 {
		bad("max deliveries must be at least 2")
	}
	return errors.Join(errs...)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Dispatcher consumes and delivers intents. Start it once; Close drains.
type Dispatcher struct {
	store *intent.Store
	cfg   Config
	log   *slog.Logger
	// sem holds one token per delivery slot in use: taken by a read loop
	// before it reads, handed to the delivery it reads.
	sem chan struct{}
	// waiting counts read loops waiting for a slot.
	waiting atomic.Int32
	// slotWait, when set (tests), is called each time a read loop starts
	// waiting for a slot.
	slotWait func()

	mu      sync.Mutex
	started bool
	stop    context.CancelFunc // stops the read loops
	abort   context.CancelFunc // cancels in-flight deliveries (Close's deadline)
	work    context.Context
	loops   sync.WaitGroup
	flight  sync.WaitGroup
}

// New validates cfg and binds a Dispatcher to store.
func New(store *intent.Store, cfg Config) (*Dispatcher, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: no store", ErrInvalidConfig)
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &Dispatcher{store: store, cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, cfg.Concurrency)}, nil
}

// Start runs one read loop per shard until Close.
func (d *Dispatcher) Start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return errors.New("dispatch: already started")
	}
	d.started = true
	readCtx, stop := context.WithCancel(context.Background())
	work, abort := context.WithCancel(context.Background())
	d.stop, d.abort, d.work = stop, abort, work
	for shard := range d.store.Shards() {
		d.loops.Add(1)
		go d.loop(readCtx, shard)
	}
	return nil
}

// Close stops reading and waits for the deliveries in flight. When ctx
// ends first they are cancelled: a transport call in progress sees its
// context end (a plugin answers Indeterminate once the send began,
// RejectedDefinite before), and its receipt is still recorded, within
// finalizeTimeout (10s), before Close returns — so an accepted send ends
// DELIVERED and an interrupted one INDETERMINATE, never a blind resend.
// No further attempt starts: an entry whose retry would follow stays
// pending, PENDING, for a reclaim. Only a delivery cancelled between its
// claim and a finalize that could not be recorded is left DELIVERING;
// the reclaim's claim then makes it INDETERMINATE (see the package doc).
func (d *Dispatcher) Close(ctx context.Context) error {
	d.mu.Lock()
	stop, abort := d.stop, d.abort
	d.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	d.loops.Wait()
	done := make(chan struct{})
	go func() { d.flight.Wait(); close(done) }()
	select {
	case <-done:
		abort()
		return nil
	case <-ctx.Done():
		abort()
		<-done
		return ctx.Err()
	}
}

// loop reads shard for this consumer until ctx ends. It takes delivery
// slots before it reads and reads (or reclaims) at most as many entries as
// it holds, so every entry it gets starts at once: none waits here for a
// slot while its idle time in the group runs toward MinIdle, where another
// consumer's reclaim would take it over mid-attempt. A blocking read holds
// its slots for at most Block; while another loop waits for a slot, the
// read does not block and, finding nothing, gives its slots back and
// pauses for Block before it reads again.
func (d *Dispatcher) loop(ctx context.Context, shard int) {
	defer d.loops.Done()
	ready := false
	var lastReclaim time.Time
	for ctx.Err() == nil {
		if !ready {
			ok, err := d.store.EnsureGroup(ctx, shard)
			if err != nil && ctx.Err() == nil {
				d.log.Warn("notify dispatch: group not ready", "shard", shard, "err", err)
			}
			if !ok {
				_ = d.cfg.Sleep(ctx, d.cfg.Block)
				continue
			}
			ready = true
		}
		slots, ok := d.acquire(ctx, d.cfg.ReadCount)
		if !ok {
			return
		}
		if now := d.cfg.Now(); now.Sub(lastReclaim) >= d.cfg.ReclaimEvery {
			lastReclaim = now
			if _, slots = d.reclaim(ctx, shard, slots, true); slots == 0 {
				continue
			}
		}
		block := d.cfg.Block
		if d.waiting.Load() > 0 {
			block = 0 // do not sit on slots another loop is waiting for
		}
		ds, err := d.store.Read(ctx, shard, d.cfg.Consumer, slots, block)
		if err != nil {
			d.release(slots)
			if ctx.Err() == nil {
				d.log.Warn("notify dispatch: read failed", "shard", shard, "err", err)
				_ = d.cfg.Sleep(ctx, d.cfg.Block)
			}
			continue
		}
		for i := range ds {
			d.run(ds[i])
		}
		d.release(slots - len(ds))
		if block == 0 && len(ds) == 0 {
			_ = d.cfg.Sleep(ctx, d.cfg.Block)
		}
	}
}

// acquire takes between 1 and n delivery slots: it waits for the first
// (false when ctx ends first) and takes more only while they are free.
func (d *Dispatcher) acquire(ctx context.Context, n int) (int, bool) {
	select {
	case d.sem <- struct{}{}:
	default:
		d.waiting.Add(1)
		if d.slotWait != nil {
			d.slotWait()
		}
		select {
		case d.sem <- struct{}{}:
			d.waiting.Add(-1)
		case <-ctx.Done():
			d.waiting.Add(-1)
			return 0, false // nothing read: nothing left behind
		}
	}
	held := 1
	for held < n {
		select {
		case d.sem <- struct{}{}:
			held++
		default:
			return held, true
		}
	}
	return held, true
}

// release gives back n slots taken by acquire and not handed to a
// delivery.
func (d *Dispatcher) release(n int) {
	for range n {
		<-d.sem
	}
}

// run starts one delivery on a slot its read loop already holds; the
// delivery gives the slot back when it ends.
func (d *Dispatcher) run(del intent.Delivery) {
	d.flight.Add(1)
	go func() {
		defer func() { <-d.sem; d.flight.Done() }()
		d.Handle(d.work, &del)
	}()
}

// reclaim runs one reclaim scan of shard: it takes over entries pending
// for MinIdle a page at a time (one Store.Reclaim each), until a page
// comes back short having ended a lap of the PEL, or empty, up to
// ReclaimBatch entries (and as many pages). With async each entry runs at
// once on a slot of the caller's: held slots on entry, and between pages
// the scan waits for more; it returns the slots still held. Otherwise
// (Poll) pages of ReadCount entries are handled in turn before it returns.
func (d *Dispatcher) reclaim(ctx context.Context, shard, held int, async bool) (handled, left int) {
	if pending, lag, known, err := d.store.Backlog(ctx, shard); err == nil {
		if !known {
			lag = -1
		}
		d.cfg.Observer.Backlog(shard, pending, lag)
	}
	for page := 0; page < d.cfg.ReclaimBatch && handled < d.cfg.ReclaimBatch && ctx.Err() == nil; page++ {
		count := d.cfg.ReadCount
		if async {
			if held == 0 {
				n, ok := d.acquire(ctx, d.cfg.ReadCount)
				if !ok {
					break
				}
				held = n
			}
			count = held
		}
		count = min(count, d.cfg.ReclaimBatch-handled)
		rc, err := d.store.Reclaim(ctx, shard, d.cfg.Consumer, d.cfg.MinIdle, count)
		d.cfg.Observer.Reclaimed(shard, len(rc.Deliveries), rc.Trips, rc.Wrapped)
		// Entries claimed before an error are this consumer's now: run them.
		ds := rc.Deliveries
		for i := range ds {
			if async {
				d.run(ds[i])
				held--
			} else {
				d.Handle(ctx, &ds[i])
			}
		}
		handled += len(ds)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("notify dispatch: reclaim failed", "shard", shard, "err", err)
			}
			break
		}
		if rc.Trimmed > 0 {
			d.log.Warn("notify dispatch: pending entries were trimmed from the stream", "shard", shard, "count", rc.Trimmed)
		}
		if n := len(ds) + rc.Trimmed; n < count && (rc.Wrapped || n == 0) {
			// A short page that ended a lap: nothing more is idle long
			// enough. A short page that did not (its round trips found
			// idle entries far apart) goes on from the cursor.
			break
		}
	}
	return handled, held
}

// Poll runs one reclaim scan (page after page until one ends a lap of the
// PEL short, up to ReclaimBatch) and one non-blocking read of shard and handles what they
// return before it returns: the synchronous form of
// the loop, for tests and batch drains. n counts the deliveries handled.
func (d *Dispatcher) Poll(ctx context.Context, shard int) (n int, err error) {
	ok, err := d.store.EnsureGroup(ctx, shard)
	if err != nil || !ok {
		return 0, err
	}
	n, _ = d.reclaim(ctx, shard, 0, false)
	ds, err := d.store.Read(ctx, shard, d.cfg.Consumer, d.cfg.ReadCount, 0)
	if err != nil {
		return n, err
	}
	for i := range ds {
		d.Handle(ctx, &ds[i])
	}
	return n + len(ds), nil
}

// Handle delivers one entry: quarantine if it does not decode or was
// delivered too often; else claim → transport → finalize, with retries on
// definite rejections. Any Redis failure leaves the entry pending for a
// reclaim to decide again.
func (d *Dispatcher) Handle(ctx context.Context, del *intent.Delivery) {
	log := d.log.With("shard", del.Shard, "entry", del.EntryID)
	if errors.Is(del.Err, intent.ErrPlanKeyUnavailable) && del.Deliveries < d.cfg.MaxDeliveries {
		// A key roll-out that has not reached this process: the entry is
		// not corrupt, so it waits (pending, idle) for a reclaim by a
		// consumer that holds the key; MaxDeliveries still bounds it.
		d.cfg.Observer.Unopened()
		log.Warn("notify dispatch: plan sealed with a key version this process does not hold; left pending",
			"deliveries", del.Deliveries, "err", del.Err)
		return
	}
	if errors.Is(del.Err, intent.ErrPlanKeyUnavailable) {
		d.quarantine(ctx, del, intent.ReasonDeliveries, log)
		return
	}
	if del.Err != nil {
		d.quarantine(ctx, del, intent.ReasonUndecodable, log)
		return
	}
	log = log.With("intent", string(del.ID))
	if del.Deliveries >= d.cfg.MaxDeliveries {
		d.quarantine(ctx, del, intent.ReasonDeliveries, log)
		return
	}
	plan := &del.Plan
	// The entry's idle time in the group runs from its read, which the
	// read loop makes only with a free slot, so from about now: a retry
	// that would carry it past MinIdle is handed to the reclaim instead of
	// being held here, so no other consumer takes it over mid-attempt.
	start := d.cfg.Now()
	per := d.cfg.AttemptsPerTransport
	maxAttempts := per * len(plan.Transports)
	for {
		c, err := d.store.Claim(ctx, del, maxAttempts)
		if err != nil {
			log.Warn("notify dispatch: claim failed; the entry stays pending", "err", err)
			return
		}
		switch c.Status {
		case intent.AlreadyFinal, intent.Gone:
			log.Debug("notify dispatch: consumer dedup", "claim", c.Status.String())
			return
		case intent.Exhausted:
			d.cfg.Observer.Final(c.State)
			log.Info("notify dispatch: attempts exhausted", "state", c.State.String())
			return
		case intent.InDoubt:
			// An earlier attempt was claimed and never finalized: it may
			// have been sent. Never again, on any transport.
			d.cfg.Observer.Final(c.State)
			log.Warn("notify dispatch: an earlier attempt was never finalized and may have been sent; not sent again",
				"attempt", c.Attempt, "deliveries", del.Deliveries, "state", c.State.String())
			return
		}
		name := plan.Transports[(c.Attempt-1)/per]
		rc := d.call(ctx, name, del, c.Attempt)
		d.cfg.Observer.Dispatched(name, rc.Outcome)
		final := rc.Outcome != transport.RejectedDefinite || c.Attempt >= maxAttempts
		r := intent.Receipt{Attempt: c.Attempt, Transport: name, Outcome: rc.Outcome, Code: rc.Code, ProviderRef: rc.ProviderRef, At: d.cfg.Now().UTC().Truncate(time.Millisecond)}
		// Record what the call did even when ctx ended meanwhile (Close's
		// deadline): an unrecorded attempt ends INDETERMINATE at the next
		// claim, an accepted one included.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalizeTimeout)
		f, err := d.finalize(fctx, del, r, final)
		cancel()
		if err != nil {
			log.Warn("notify dispatch: finalize failed; the entry stays pending", "attempt", c.Attempt, "err", err)
			return
		}
		log.Info("notify dispatch: attempt", "attempt", c.Attempt, "transport", name, "outcome", rc.Outcome.String(), "code", rc.Code, "state", f.State.String())
		if f.State.Final() {
			if !f.AlreadyFinal {
				d.cfg.Observer.Final(f.State)
			}
			return
		}
		if f.Stale || f.AlreadyFinal {
			return
		}
		if ctx.Err() != nil {
			return // stopping: PENDING and still pending, for the reclaim
		}
		next := c.Attempt + 1
		nextName := plan.Transports[(next-1)/per]
		d.cfg.Observer.Retried(nextName)
		var delay time.Duration
		if retry := (next - 1) % per; retry > 0 {
			delay = d.Backoff(retry, rc.RetryAfter)
		}
		if d.cfg.Now().Sub(start)+delay+d.cfg.CallTimeout >= d.cfg.MinIdle {
			log.Info("notify dispatch: retry handed to the reclaim", "attempt", next, "transport", nextName)
			return // PENDING and still pending in the group: reclaimed after MinIdle
		}
		if delay > 0 {
			if err := d.cfg.Sleep(ctx, delay); err != nil {
				return // the entry stays pending
			}
		}
	}
}

// call runs one transport call and sanitises its receipt: an unknown
// transport is a definite rejection (nothing was sent), an out-of-set
// outcome is indeterminate, codes and references outside their bounds are
// replaced (they come from a plugin process).
func (d *Dispatcher) call(ctx context.Context, name string, del *intent.Delivery, attempt int) transport.Receipt {
	t := d.cfg.Transports[name]
	if t == nil {
		return transport.Receipt{Outcome: transport.RejectedDefinite, Code: "transport-unavailable"}
	}
	cctx, cancel := context.WithTimeout(ctx, d.cfg.CallTimeout)
	defer cancel()
	rc := t.Deliver(cctx, transport.Message{IntentID: string(del.ID), Attempt: uint32(attempt), Channel: string(del.Plan.Channel()),
		Recipient: del.Plan.Recipient, Parts: del.Plan.Parts()})
	if !rc.Outcome.Valid() {
		rc = transport.Receipt{Outcome: transport.Indeterminate, Code: "invalid-outcome"}
	}
	if !intent.ValidReceiptCode(rc.Code) {
		rc.Code = "invalid-code"
	}
	if !intent.ValidProviderRef(rc.ProviderRef) {
		rc.ProviderRef = ""
	}
	if rc.RetryAfter < 0 {
		rc.RetryAfter = 0
	}
	return rc
}

func (d *Dispatcher) finalize(ctx context.Context, del *intent.Delivery, r intent.Receipt, final bool) (intent.Finalization, error) {
	var err error
	for range finalizeTries {
		var f intent.Finalization
		if f, err = d.store.Finalize(ctx, del, r, final); err == nil || ctx.Err() != nil {
			return f, err
		}
	}
	return intent.Finalization{}, err
}

func (d *Dispatcher) quarantine(ctx context.Context, del *intent.Delivery, reason string, log *slog.Logger) {
	if _, err := d.store.Quarantine(ctx, del, reason); err != nil {
		log.Warn("notify dispatch: quarantine failed; the entry stays pending", "reason", reason, "err", err)
		return
	}
	d.cfg.Observer.Quarantined(reason)
	log.Warn("notify dispatch: quarantined", "reason", reason, "deliveries", del.Deliveries)
}

// Backoff is the delay before retry n (1-based) on the same transport:
// base × 2^(n−1) plus a full jitter uniform in [0, base], capped; a
// provider's retryAfter longer than that is honoured up to the cap.
func (d *Dispatcher) Backoff(n int, retryAfter time.Duration) time.Duration {
	exp := min(n-1, 30)
	delay := d.cfg.Cap
	if step := d.cfg.Base << exp; step > 0 && step/(1<<exp) == d.cfg.Base && step < d.cfg.Cap {
		delay = step
	}
	delay += time.Duration(d.cfg.Random.Int64N(int64(d.cfg.Base) + 1))
	delay = min(delay, d.cfg.Cap)
	if retryAfter > delay {
		delay = min(retryAfter, d.cfg.Cap)
	}
	return delay
}
