package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Bounds and defaults.
const (
	// MaxTTL is the longest lease (the catalog's TTL bound).
	MaxTTL = programs.MaxLeaseTTL
	// MaxWait bounds one Acquire's wait.
	MaxWait = 10 * time.Minute
	// MaxOperationIDBytes bounds an operation id.
	MaxOperationIDBytes = owner.MaxOperationIDBytes
	// MaxResourceBytes bounds a resource name (it is only digested).
	MaxResourceBytes = 1024
	// MaxPurposes bounds Config.Purposes (and the purpose metric label).
	MaxPurposes = 64
	// DefaultDriftBudget is subtracted from every validity estimate: the
	// clock-rate difference between this process and Redis over a TTL plus
	// the scheduling delay between the reply and its reading.
	DefaultDriftBudget = 50 * time.Millisecond
	// keyVersion is the lease keys' schema version.
	keyVersion = 1
	// backoff bounds of a waiting acquire (full jitter between them).
	backoffMin = 5 * time.Millisecond
	backoffMax = 250 * time.Millisecond
)

// Config configures a Client.
type Config struct {
	// Role is the Redis role leases live on (default coordination, a
	// correctness role: never the evictable cache).
	Role policy.Role
	// DriftBudget (default DefaultDriftBudget) is subtracted from every
	// validity; a TTL must exceed it.
	DriftBudget time.Duration
	// MaxTTL (default and at most the package's MaxTTL) bounds a request's
	// TTL.
	MaxTTL time.Duration
	// MaxWait (default and at most the package's MaxWait) bounds a
	// request's wait.
	MaxWait time.Duration
	// Purposes, when not empty, is the closed set of purposes the client
	// accepts (at most MaxPurposes slugs); any other purpose is an invalid
	// request. It is also the set of purpose metric labels.
	Purposes []string
}

// Option configures a Client beyond Config.
type Option func(*options)

type options struct {
	log    *slog.Logger
	reg    prometheus.Registerer
	now    func() time.Time
	jitter func(n int64) int64
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the client's metrics on reg (default: none; the
// instruments still count). One client per registry.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithClock replaces time.Now for validity (tests). The clock must carry a
// monotonic reading or be monotonic itself.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Client acquires efficiency leases on one Redis role. It is safe for
// concurrent use.
type Client struct {
	exec *programs.Executor
	// batch pipelines concurrent acquires and releases (lease-acquire-v3,
	// lease-release-v3): a lone call is sent at once; calls arriving while
	// batchFlights sends are in flight leave together, each its own atomic
	// call with its own certainty. Validity is measured from before the
	// call is handed to it, so time spent queued only shortens it.
	batch    *programs.Batcher
	keys     *keys.Builder
	drift    time.Duration
	maxTTL   time.Duration
	maxWait  time.Duration
	purposes map[string]bool // nil: any purpose
	m        *metrics
	log      *slog.Logger
	now      func() time.Time
	jitter   func(n int64) int64

	mu      sync.Mutex
	closed  bool
	holds   sync.WaitGroup
	closing chan struct{}

	// Test hooks: beforeRepeat runs before the reconciling repeat of an
	// acquire whose reply was lost, beforeReleaseRepeat before the repeat
	// of a release whose reply was lost, afterContended after each
	// contended try of a waiting acquire, afterRenew after each watchdog
	// renew.
	beforeRepeat        func()
	beforeReleaseRepeat func()
	afterContended      func()
	afterRenew          func(RenewKind)
}

// New binds a client to cfg.Role of rt.
func New(rt *runtime.Runtime, cfg Config, opts ...Option) (*Client, error) {
	o := options{log: slog.Default(), now: time.Now, jitter: rand.Int64N}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if rt == nil {
		return nil, fmt.Errorf("%w: New needs a runtime", ErrInvalidRequest)
	}
	role := cfg.Role
	if role == "" {
		role = policy.RoleCoordination
	}
	drift := cfg.DriftBudget
	if drift == 0 {
		drift = DefaultDriftBudget
	}
	maxTTL, maxWait := cfg.MaxTTL, cfg.MaxWait
	if maxTTL == 0 {
		maxTTL = MaxTTL
	}
	if maxWait == 0 {
		maxWait = MaxWait
	}
	switch {
	case drift < 0 || drift >= MaxTTL:
		return nil, fmt.Errorf("%w: drift budget %s out of range", ErrInvalidRequest, drift)
	case maxTTL <= drift || maxTTL > MaxTTL || maxTTL%time.Millisecond != 0:
		return nil, fmt.Errorf("%w: max TTL %s must be whole milliseconds above the drift budget and at most %s", ErrInvalidRequest, maxTTL, MaxTTL)
	case maxWait < 0 || maxWait > MaxWait:
		return nil, fmt.Errorf("%w: max wait %s out of range", ErrInvalidRequest, maxWait)
	case len(cfg.Purposes) > MaxPurposes:
		return nil, fmt.Errorf("%w: at most %d purposes", ErrInvalidRequest, MaxPurposes)
	}
	var purposes map[string]bool
	if len(cfg.Purposes) > 0 {
		purposes = make(map[string]bool, len(cfg.Purposes))
		for _, p := range cfg.Purposes {
			if !ValidPurpose(p) {
				return nil, fmt.Errorf("%w: purpose %q is not a slug", ErrInvalidRequest, p)
			}
			purposes[p] = true
		}
	}
	dep, err := rt.Role(role)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.reg, cfg.Purposes)
	if err != nil {
		return nil, err
	}
	exec := dep.Programs()
	return &Client{exec: exec, batch: exec.NewBatcher(batchFlights, batchSize), keys: rt.Keys(), drift: drift, maxTTL: maxTTL, maxWait: maxWait,
		purposes: purposes, m: m, log: o.log, now: o.now, jitter: o.jitter, closing: make(chan struct{})}, nil
}

// batchFlights and batchSize bound the acquire/release batcher: at most 4
// sends in flight, at most 64 calls per pipeline (the rate limiter's
// defaults).
const (
	batchFlights = 4
	batchSize    = 64
)

var purposePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// ValidPurpose reports whether p is a purpose slug: 1..64 lower-case
// letters, digits and '-', not starting with '-' (the key builder's region
// slug).
func ValidPurpose(p string) bool { return purposePattern.MatchString(p) }

// MaxTTL is the longest TTL the client accepts.
func (c *Client) MaxTTL() time.Duration { return c.maxTTL }

// MaxWait is the longest wait the client accepts.
func (c *Client) MaxWait() time.Duration { return c.maxWait }

// DriftBudget is what the client subtracts from every validity.
func (c *Client) DriftBudget() time.Duration { return c.drift }

// Close stops every Hold's watchdog (their functions' contexts are
// cancelled and their leases released) and waits for them; later calls
// fail with ErrClosed.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.closing)
	}
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.holds.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// Attempt identifies one acquisition: an owner token minted by the host and
// the caller's operation id (host/owner's attempt, shared with idempotency
// claims). Keep it until the work is done: inspecting or repeating an
// acquire whose reply was lost needs the same attempt.
type Attempt = owner.Attempt

// NewAttempt mints a fresh owner token for operationID (1..128 bytes of
// UTF-8). It touches no network.
func NewAttempt(operationID string) (Attempt, error) {
	a, err := owner.NewAttempt(operationID)
	if err != nil {
		return Attempt{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return a, nil
}

// ResumeAttempt rebuilds an attempt from its parts (a holder in another
// process, or one restarted with the token it stored).
func ResumeAttempt(token owner.Token, operationID string) (Attempt, error) {
	a, err := owner.ResumeAttempt(token, operationID)
	if err != nil {
		return Attempt{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return a, nil
}

// program renders a for a lease program's arguments.
func program(a Attempt) programs.LeaseAttempt {
	return programs.LeaseAttempt{Owner: []byte(a.Owner().Reveal()), OperationID: []byte(a.OperationID())}
}

// Request is one acquisition.
type Request struct {
	// Purpose names what the lease is for (a key region slug: lower-case
	// letters, digits and '-', 1..64 bytes), e.g. "nightly-cleanup".
	Purpose string
	// Resource names the resource (1..1024 bytes, only ever digested).
	Resource []byte
	// TTL is the lease's time to live on the server: whole milliseconds,
	// more than the drift budget, at most MaxTTL.
	TTL time.Duration
	// Wait bounds how long Acquire retries a contended lease (0: one try).
	Wait time.Duration
	// Attempt is the caller's attempt (NewAttempt).
	Attempt Attempt
}

// key validates r and builds its lease key.
func (c *Client) key(r *Request) (keys.Key, error) {
	switch {
	case r.Attempt.IsZero():
		return keys.Key{}, fmt.Errorf("%w: no attempt (mint one with NewAttempt)", ErrInvalidRequest)
	case r.TTL <= c.drift || r.TTL > c.maxTTL || r.TTL%time.Millisecond != 0:
		return keys.Key{}, fmt.Errorf("%w: TTL must be whole milliseconds above the drift budget (%s) and at most %s",
			ErrInvalidRequest, c.drift, c.maxTTL)
	case r.Wait < 0 || r.Wait > c.maxWait:
		return keys.Key{}, fmt.Errorf("%w: wait must be within 0..%s", ErrInvalidRequest, c.maxWait)
	}
	return c.resourceKey(r.Purpose, r.Resource)
}

// resourceKey validates a purpose and a resource and builds their lease key.
func (c *Client) resourceKey(purpose string, resource []byte) (keys.Key, error) {
	if len(resource) == 0 || len(resource) > MaxResourceBytes {
		return keys.Key{}, fmt.Errorf("%w: resource must be 1..%d bytes", ErrInvalidRequest, MaxResourceBytes)
	}
	if c.purposes != nil && !c.purposes[purpose] {
		return keys.Key{}, fmt.Errorf("%w: purpose is not one of the configured purposes", ErrInvalidRequest)
	}
	k, err := c.keys.Build(keys.Spec{Capability: keys.CapLease, Region: purpose, KeyVersion: keyVersion,
		Kind: "owner", Parts: [][]byte{resource}})
	if err != nil {
		return keys.Key{}, fmt.Errorf("%w: purpose must be a slug of 1..64 lower-case letters, digits and '-'", ErrInvalidRequest)
	}
	return k, nil
}

// Acquire acquires the lease for r.Attempt, waiting up to r.Wait while
// another owner holds it or Redis is unreachable. A reply lost after the
// send is reconciled by repeating the same attempt once (the program
// answers REPLAYED_SAME_OPERATION if the first send applied); if that too
// is lost the outcome is Indeterminate. Errors are ErrInvalidRequest,
// ErrClosed, ErrCorrupt and ctx's.
func (c *Client) Acquire(ctx context.Context, r Request) (Acquisition, error) {
	key, err := c.key(&r)
	if err != nil {
		return Acquisition{}, err
	}
	if c.isClosed() {
		return Acquisition{}, ErrClosed
	}
	start := c.now()
	out, err := c.acquire(ctx, key, r)
	c.m.acquired(r.Purpose, out.Kind, err, c.now().Sub(start))
	return out, err
}

// acquire is Acquire once r is validated.
func (c *Client) acquire(ctx context.Context, key keys.Key, r Request) (Acquisition, error) {
	deadline := c.now().Add(r.Wait)
	var (
		out        Acquisition
		reconciled bool // the one immediate repeat after a lost reply was made
		unsettled  bool // a send's reply was lost and no later answer settled it
		pause      = backoffMin
	)
	for {
		start := c.now()
		res, err := c.batch.LeaseAcquireV3(ctx, key, program(r.Attempt), r.TTL)
		out.Attempts++
		if err != nil {
			o := certainty.Classify(err, true)
			out = Acquisition{Kind: Unavailable, Certainty: o, Attempts: out.Attempts, Cause: err,
				Overloaded: o == certainty.OverloadedBeforeSend}
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) && !unsettled {
				return Acquisition{}, ctx.Err()
			}
			if o == certainty.Indeterminate {
				unsettled = true
			}
			if unsettled {
				// A later call that was never sent settles nothing: the lost
				// one may have applied.
				out.Kind, out.Certainty = Indeterminate, certainty.Indeterminate
			}
			if o == certainty.Indeterminate {
				if !reconciled && ctx.Err() == nil {
					reconciled = true
					if c.beforeRepeat != nil {
						c.beforeRepeat()
					}
					continue // the same attempt: a replay if the first applied
				}
				return out, nil
			}
		} else {
			out = Acquisition{Certainty: res.Outcome(), Attempts: out.Attempts}
			switch res.Status {
			case programs.LeaseAcquired:
				out.Kind, out.Handle = Acquired, c.handle(key, r, start, r.TTL)
				return out, nil
			case programs.LeaseReplayedSameOperation:
				out.Kind, out.Handle = ReplayedSameOperation, c.handle(key, r, start, res.PTTL)
				return out, nil
			case programs.LeaseContended:
				out.Kind, out.RetryAfter = Contended, res.PTTL
			case programs.LeaseOwnerOperationConflict:
				out.Kind, out.RetryAfter = OwnerOperationConflict, res.PTTL
				return out, nil
			case programs.LeaseAcquireWrongType:
				return Acquisition{}, ErrCorrupt
			default:
				return Acquisition{}, fmt.Errorf("lease: lease-acquire-v3 answered %s to a validated request", res.Status)
			}
		}
		// Contended or not sent: retry within the wait (the same attempt,
		// so a send lost earlier is found as a replay).
		if out.Kind == Contended && c.afterContended != nil {
			c.afterContended()
		}
		left := deadline.Sub(c.now())
		if left <= 0 {
			return out, nil
		}
		d := c.jitter(int64(pause)) + 1 // full jitter in (0, pause]
		if out.Kind == Contended {
			d = min(d, int64(out.RetryAfter)+1)
		}
		if err := sleep(ctx, c.closing, min(time.Duration(d), left)); err != nil {
			if errors.Is(err, ErrClosed) || unsettled {
				return out, nil
			}
			return Acquisition{}, err
		}
		pause = min(2*pause, backoffMax)
	}
}

// sleep waits d, or until ctx ends (its error) or the client closes
// (ErrClosed).
func sleep(ctx context.Context, closing <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closing:
		return ErrClosed
	}
}

// Inspect reports whether attempt holds the lease of (purpose, resource),
// without changing it. When it does, the outcome is ReplayedSameOperation
// with a handle whose validity counts from the server's remaining TTL and
// whose renewals use ttl: this is how a lost acquire reply is reconciled.
func (c *Client) Inspect(ctx context.Context, purpose string, resource []byte, attempt Attempt, ttl time.Duration) (Acquisition, error) {
	r := Request{Purpose: purpose, Resource: resource, TTL: ttl, Attempt: attempt}
	key, err := c.key(&r)
	if err != nil {
		return Acquisition{}, err
	}
	out, err := c.inspect(ctx, key, r)
	c.m.inspected(purpose, out.Kind, err)
	return out, err
}

// inspect is Inspect once its request is validated.
func (c *Client) inspect(ctx context.Context, key keys.Key, r Request) (Acquisition, error) {
	attempt := r.Attempt
	start := c.now()
	res, err := c.exec.LeaseInspect(ctx, key, program(attempt))
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return Acquisition{}, ctx.Err()
		}
		o := certainty.Classify(err, false)
		kind := Unavailable
		if o == certainty.Indeterminate {
			kind = Indeterminate
		}
		return Acquisition{Kind: kind, Certainty: o, Attempts: 1, Cause: err, Overloaded: o == certainty.OverloadedBeforeSend}, nil
	}
	out := Acquisition{Certainty: res.Outcome(), Attempts: 1}
	switch res.Status {
	case programs.LeaseOwned:
		out.Kind, out.Handle = ReplayedSameOperation, c.handle(key, r, start, res.PTTL)
	case programs.LeaseInspectAbsent:
		out.Kind = Absent
	case programs.LeaseInspectNotOwner:
		out.Kind, out.RetryAfter = Contended, res.PTTL
	case programs.LeaseInspectOwnerOperationConflict:
		out.Kind, out.RetryAfter = OwnerOperationConflict, res.PTTL
	case programs.LeaseInspectWrongType:
		return Acquisition{}, ErrCorrupt
	default:
		return Acquisition{}, fmt.Errorf("lease: lease-inspect-v1 answered %s to a validated request", res.Status)
	}
	return out, nil
}
