package fenced

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Errors specific to fencing (the lease's own are host/lease's:
// ErrInvalidRequest, ErrNotActive, ErrCorrupt, ErrValidityExpired, ErrLost).
var (
	// ErrFenceBroken is a handle's cause when Redis answered that the
	// resource's counter no longer matches the lease's token (missing,
	// another epoch or registration, regressed): the token cannot be
	// trusted to order writes any more.
	ErrFenceBroken = errors.New("fenced: the resource's fence counter no longer matches the token")
	// ErrNotPending: Activate found the registration not PENDING.
	ErrNotPending = errors.New("fenced: registration is not pending")
)

const (
	keyVersion = 1
	backoffMin = 5 * time.Millisecond
	backoffMax = 250 * time.Millisecond
)

// Config configures a Client.
type Config struct {
	// Role is the Redis role (default coordination; the counter needs a
	// noeviction deployment, which the startup probe checks for correctness
	// roles).
	Role policy.Role
	// DriftBudget is subtracted from every validity (default
	// lease.DefaultDriftBudget).
	DriftBudget time.Duration
	// HardFailThreshold is the highest counter an acquire may issue
	// (default fence.MaxCounter); above it acquires answer Exhausted and
	// the resource must be re-registered under a new epoch.
	HardFailThreshold int64
	// MaxTTL (default and at most lease.MaxTTL) bounds a request's TTL.
	MaxTTL time.Duration
	// MaxWait (default and at most lease.MaxWait) bounds a request's wait.
	MaxWait time.Duration
	// Purposes, when not empty, is the closed set of purposes the client
	// accepts (at most lease.MaxPurposes slugs); any other purpose is an
	// invalid request. It is also the set of purpose metric labels.
	Purposes []string
	// Replication, when set (Acks > 0), is the opt-in replica
	// acknowledgement profile: every acquire and provision is followed by
	// WAIT on the same connection, and a grant fewer replicas acknowledged
	// is NotReplicated (released, no token handed out). The zero value is
	// off: no WAIT is sent.
	Replication Replication
}

// Replication is the replica acknowledgement profile
// (capabilities.fenced-lease.replication).
type Replication struct {
	// Acks is how many replicas must acknowledge a grant, 1..MaxAcks.
	Acks int
	// Timeout bounds each WAIT: whole milliseconds within 1ms..MaxTimeout,
	// and at most the coordination deployment's script-lane command
	// timeout minus programs.ReplicaWaitMargin (New checks it).
	Timeout time.Duration
}

// Bounds of Replication.
const (
	MaxAcks    = programs.MaxReplicaAcks
	MaxTimeout = programs.MaxReplicaWait
)

// Enabled reports whether the profile is on.
func (r Replication) Enabled() bool { return r != Replication{} }

func (r Replication) wait() programs.ReplicaWait {
	return programs.ReplicaWait{Acks: r.Acks, Timeout: r.Timeout}
}

// profile is what the startup probe proves of r on role.
func (r Replication) profile(role policy.Role) runtime.ReplicaWaitProfile {
	return runtime.ReplicaWaitProfile{Role: role, Acks: r.Acks, Timeout: r.Timeout}
}

// Option configures a Client beyond Config.
type Option func(*options)

type options struct {
	log *slog.Logger
	reg prometheus.Registerer
	now func() time.Time
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the client's metrics on reg (default: none; the
// instruments still count). One client per registry.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithClock replaces time.Now for validity (tests); it must be monotonic.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Client acquires fenced leases on one Redis role. It is safe for
// concurrent use.
type Client struct {
	exec      *programs.Executor
	keys      *keys.Builder
	drift     time.Duration
	threshold int64
	maxTTL    time.Duration
	maxWait   time.Duration
	purposes  map[string]bool // nil: any purpose slug
	log       *slog.Logger
	m         *metrics
	now       func() time.Time
	jitter    func(int64) int64
	repl      Replication // zero: no WAIT

	// Test hooks: beforeRepeat runs before the reconciling repeat of an
	// acquire whose reply was lost, beforeReleaseRepeat before the repeat
	// of a release whose reply was lost, afterRenew after each Hold renew.
	beforeRepeat        func()
	beforeReleaseRepeat func()
	afterRenew          func(lease.RenewKind)
}

// New binds a client to cfg.Role of rt.
func New(rt *runtime.Runtime, cfg Config, opts ...Option) (*Client, error) {
	o := options{log: slog.Default(), now: time.Now}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	if rt == nil {
		return nil, fmt.Errorf("%w: New needs a runtime", lease.ErrInvalidRequest)
	}
	role := cfg.Role
	if role == "" {
		role = policy.RoleCoordination
	}
	if role == policy.RoleCache {
		return nil, fmt.Errorf("%w: fence counters never live on the evictable cache role", lease.ErrInvalidRequest)
	}
	drift := cfg.DriftBudget
	if drift == 0 {
		drift = lease.DefaultDriftBudget
	}
	threshold := cfg.HardFailThreshold
	if threshold == 0 {
		threshold = fence.MaxCounter
	}
	switch {
	case drift < 0 || drift >= lease.MaxTTL:
		return nil, fmt.Errorf("%w: drift budget %s out of range", lease.ErrInvalidRequest, drift)
	case threshold < 1 || threshold > fence.MaxCounter:
		return nil, fmt.Errorf("%w: hard-fail threshold must be within 1..%d", lease.ErrInvalidRequest, fence.MaxCounter)
	}
	maxTTL, maxWait := cfg.MaxTTL, cfg.MaxWait
	if maxTTL == 0 {
		maxTTL = lease.MaxTTL
	}
	if maxWait == 0 {
		maxWait = lease.MaxWait
	}
	switch {
	case maxTTL <= drift || maxTTL > lease.MaxTTL:
		return nil, fmt.Errorf("%w: max TTL must exceed the drift budget and be at most %s", lease.ErrInvalidRequest, lease.MaxTTL)
	case maxWait < 0 || maxWait > lease.MaxWait:
		return nil, fmt.Errorf("%w: max wait must be within 0..%s", lease.ErrInvalidRequest, lease.MaxWait)
	case len(cfg.Purposes) > lease.MaxPurposes:
		return nil, fmt.Errorf("%w: at most %d purposes", lease.ErrInvalidRequest, lease.MaxPurposes)
	}
	var purposes map[string]bool
	for i, p := range cfg.Purposes {
		if !lease.ValidPurpose(p) || slices.Contains(cfg.Purposes[:i], p) {
			return nil, fmt.Errorf("%w: purposes must be distinct slugs", lease.ErrInvalidRequest)
		}
		if purposes == nil {
			purposes = map[string]bool{}
		}
		purposes[p] = true
	}
	dep, err := rt.Role(role)
	if err != nil {
		return nil, err
	}
	if cfg.Replication.Enabled() {
		// A profile the host cannot act on is an error, never a silent
		// downgrade: out of bounds, or a WAIT timeout the script lane's
		// read deadline would cut (every slow acknowledgement would look
		// like a lost reply).
		if err := dep.Programs().CheckReplicaWait(cfg.Replication.wait()); err != nil {
			return nil, fmt.Errorf("%w: replication: %w", lease.ErrInvalidRequest, err)
		}
		// Every later startup probe of the role proves the profile: WAIT
		// admitted for the script lane's user, enough replicas online. (The
		// host registers it before its handshake starts: ReplicaWait.)
		if err := rt.ExpectReplicaWait(cfg.Replication.profile(role)); err != nil {
			return nil, fmt.Errorf("%w: replication: %w", lease.ErrInvalidRequest, err)
		}
	}
	m, err := newMetrics(o.reg, cfg.Purposes)
	if err != nil {
		return nil, err
	}
	return &Client{exec: dep.Programs().Batched(batchFlights, batchSize), keys: rt.Keys(), drift: drift, threshold: threshold, maxTTL: maxTTL, maxWait: maxWait,
		purposes: purposes, log: o.log, m: m, now: o.now, jitter: rand.Int64N, repl: cfg.Replication}, nil
}

// batchFlights and batchSize bound the batching of the fenced programs'
// calls (programs.Executor.Batched): a lone call is sent at once; calls
// arriving while 4 are in flight leave together, at most 64 per pipeline,
// each its own atomic call with its own certainty. Validity is measured
// from before a call is handed over, so time spent queued only shortens
// it. The replicated variants (program then WAIT) are sent alone.
const (
	batchFlights = 4
	batchSize    = 64
)

// AcceptsPurpose reports whether purpose is on the configured list (every
// purpose slug when the list is empty).
func (c *Client) AcceptsPurpose(purpose string) bool {
	return lease.ValidPurpose(purpose) && (c.purposes == nil || c.purposes[purpose])
}

// keysOf builds the owner and counter keys of a resource (one hash slot).
func (c *Client) keysOf(purpose, resource string) (owner, counter keys.Key, err error) {
	ks, err := c.keys.Group(keys.Spec{Capability: keys.CapFence, Region: purpose, KeyVersion: keyVersion,
		Parts: [][]byte{[]byte(resource)}}, "owner", "counter")
	if err != nil {
		return keys.Key{}, keys.Key{}, fmt.Errorf("%w: purpose must be a slug of 1..64 lower-case letters, digits and '-'", lease.ErrInvalidRequest)
	}
	return ks[0], ks[1], nil
}

func registration(reg fence.Registration) (programs.FenceRegistration, error) {
	if reg.Epoch == 0 || reg.Epoch > fence.MaxEpoch || reg.Resource == "" {
		return programs.FenceRegistration{}, fmt.Errorf("%w: a registration needs a resource and an epoch within 1..%d",
			lease.ErrInvalidRequest, fence.MaxEpoch)
	}
	return programs.FenceRegistration{Epoch: int64(reg.Epoch), Digest: reg.Digest.String()}, nil
}

func tokenOf(t programs.FencingToken) fence.Token {
	return fence.Token{Epoch: uint64(t.Epoch), Counter: t.Counter}
}

// ProvisionKind is what provisioning found.
type ProvisionKind uint8

// Provision outcomes.
const (
	// Provisioned: the counter was created at the registration's high
	// watermark.
	Provisioned ProvisionKind = iota + 1
	// AlreadySame: the counter exists for this registration (a repeat), at
	// or above the watermark.
	AlreadySame
	// ProvisionConflict: the counter belongs to another registration.
	ProvisionConflict
	// ProvisionRegression: the counter exists for this registration but
	// below the watermark the protected store has admitted — the Redis
	// side lost increments; never used until an operator reprovisions.
	ProvisionRegression
	// ProvisionNotReplicated (replication profile only): the counter is
	// there for this registration (created or already the same) but fewer
	// replicas than the configured acks acknowledged it in time. The
	// registration must stay PENDING (Activate does); repeating
	// provisioning once the replicas are back settles it.
	ProvisionNotReplicated
)

var provisionNames = [...]string{Provisioned: "PROVISIONED", AlreadySame: "ALREADY_SAME",
	ProvisionConflict: "REGISTRATION_CONFLICT", ProvisionRegression: "REGRESSION", ProvisionNotReplicated: "NOT_REPLICATED"}

func (k ProvisionKind) String() string {
	if int(k) <= 0 || int(k) >= len(provisionNames) {
		return "INVALID"
	}
	return provisionNames[k]
}

// Provision creates the Redis counter of reg (step 2 of provisioning) at
// its high watermark, or reports what is there. It never lowers or
// replaces a counter. With a replication profile the counter must also be
// acknowledged by the configured replicas (ProvisionNotReplicated
// otherwise; a WAIT that did not answer is the runtime's INDETERMINATE
// error). Errors are caller mistakes, ErrCorrupt and the runtime's (an
// outage: provisioning is an operator or reconciler step and is simply
// repeated).
func (c *Client) Provision(ctx context.Context, purpose string, reg fence.Registration) (ProvisionKind, fence.Token, error) {
	if c.purposes != nil && !c.purposes[purpose] {
		return 0, fence.Token{}, fmt.Errorf("%w: the purpose is not on the configured list", lease.ErrInvalidRequest)
	}
	preg, err := registration(reg)
	if err != nil {
		return 0, fence.Token{}, err
	}
	_, counter, err := c.keysOf(purpose, reg.Resource)
	if err != nil {
		return 0, fence.Token{}, err
	}
	var (
		res  programs.FenceProvisionResult
		reps programs.Replicas
	)
	if c.repl.Enabled() {
		res, reps, err = c.exec.FenceCounterProvisionReplicated(ctx, counter, preg, reg.HighWatermark, c.repl.wait())
	} else {
		res, err = c.exec.FenceCounterProvision(ctx, counter, preg, reg.HighWatermark)
	}
	if err != nil {
		return 0, fence.Token{}, err
	}
	tok := tokenOf(res.Fence)
	if c.repl.Enabled() && (res.Status == programs.FenceProvisioned || res.Status == programs.FenceAlreadySame) && !reps.OK() {
		c.log.Warn("fenced: provisioned counter not acknowledged by enough replicas; registration stays pending",
			"purpose", purpose, "replicas", reps.Reached, "wanted", reps.Wanted, "refused", reps.Refused)
		return ProvisionNotReplicated, tok, nil
	}
	switch res.Status {
	case programs.FenceProvisioned:
		return Provisioned, tok, nil
	case programs.FenceAlreadySame:
		return AlreadySame, tok, nil
	case programs.FenceProvisionRegistrationConflict:
		return ProvisionConflict, tok, nil
	case programs.FenceProvisionRegression:
		return ProvisionRegression, tok, nil
	case programs.FenceProvisionWrongType:
		return 0, fence.Token{}, lease.ErrCorrupt
	}
	return 0, fence.Token{}, fmt.Errorf("fenced: fenced-counter-provision-v1 answered %s to a validated request", res.Status)
}

// Activate runs the provisioning protocol for a PENDING registration of
// store: provision the Redis counter from the durable registration, check
// the receipt, then mark the registration ACTIVE. It is what the
// after-commit reconciler calls, and it is safe to repeat (a crash between
// the steps leaves a PENDING row whose counter answers AlreadySame).
func (c *Client) Activate(ctx context.Context, purpose string, store *fence.Store, resource string) (fence.Registration, error) {
	reg, err := store.Lookup(ctx, resource)
	if err != nil {
		return fence.Registration{}, err
	}
	if reg.State != fence.Pending {
		return reg, fmt.Errorf("%w: %q is %v", ErrNotPending, resource, reg.State)
	}
	kind, tok, err := c.Provision(ctx, purpose, reg)
	if err != nil {
		return reg, err
	}
	if (kind != Provisioned && kind != AlreadySame) || tok.Epoch != reg.Epoch || tok.Counter < reg.HighWatermark {
		return reg, fmt.Errorf("fenced: provisioning %q answered %s (counter %s): registration left PENDING", resource, kind, tok)
	}
	if err := store.Activate(ctx, resource, reg.Epoch, reg.Digest); err != nil {
		return reg, err
	}
	reg.State = fence.Active
	return reg, nil
}

// Request is one fenced acquisition.
type Request struct {
	// Purpose names what the lease is for (a key region slug).
	Purpose string
	// Registration is the resource's ACTIVE durable registration, read from
	// the protected store (its Resource names the resource).
	Registration fence.Registration
	// TTL is the lease's TTL: whole milliseconds above the drift budget, at
	// most lease.MaxTTL.
	TTL time.Duration
	// Wait bounds how long Acquire retries a contended lease (0: one try).
	Wait time.Duration
	// Attempt is the caller's attempt (lease.NewAttempt), minted before the
	// first send and kept for repeats.
	Attempt lease.Attempt
}

// call is one request's keys, registration and purpose label. The attempt is kept as
// its redacting type and rendered for each send only: a handle printed
// with %v must not show the owner token.
type call struct {
	owner, counter keys.Key
	reg            programs.FenceRegistration
	attempt        lease.Attempt
	label          string // the purpose's metric label
}

func (k call) program() programs.LeaseAttempt {
	return programs.LeaseAttempt{Owner: []byte(k.attempt.Owner().Reveal()), OperationID: []byte(k.attempt.OperationID())}
}

func (c *Client) prepare(r *Request) (call, error) {
	switch {
	case r.Attempt.IsZero():
		return call{}, fmt.Errorf("%w: no attempt (mint one with lease.NewAttempt)", lease.ErrInvalidRequest)
	case r.TTL <= c.drift || r.TTL > c.maxTTL || r.TTL%time.Millisecond != 0:
		return call{}, fmt.Errorf("%w: TTL must be whole milliseconds above the drift budget (%s) and at most %s",
			lease.ErrInvalidRequest, c.drift, c.maxTTL)
	case r.Wait < 0 || r.Wait > c.maxWait:
		return call{}, fmt.Errorf("%w: wait must be within 0..%s", lease.ErrInvalidRequest, c.maxWait)
	case c.purposes != nil && !c.purposes[r.Purpose]:
		return call{}, fmt.Errorf("%w: the purpose is not on the configured list", lease.ErrInvalidRequest)
	}
	reg, err := registration(r.Registration)
	if err != nil {
		return call{}, err
	}
	owner, counter, err := c.keysOf(r.Purpose, r.Registration.Resource)
	if err != nil {
		return call{}, err
	}
	return call{owner: owner, counter: counter, reg: reg, attempt: r.Attempt, label: c.m.purpose(r.Purpose)}, nil
}
