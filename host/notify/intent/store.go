package intent

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/host/notify/seal"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Bounds and defaults.
const (
	maxAttempts     = programs.MaxNotifyAttempts
	maxReceiptBytes = programs.MaxNotifyReceiptBytes

	// MaxIdempotencyKeyBytes bounds a caller's idempotency key.
	MaxIdempotencyKeyBytes = 256
	// MaxRetention is the longest record retention (the catalog's TTL cap).
	MaxRetention = 30 * 24 * time.Hour

	DefaultShards           = 4
	DefaultRetention        = 7 * 24 * time.Hour
	DefaultMaxLen           = 100_000
	DefaultQuarantineMaxLen = 10_000
	DefaultGroup            = "caphost-notify"
	DefaultRegion           = "intents"

	// submitFlights and submitBatch bound the submit batcher: one send
	// in flight, at most 64 submits per pipeline. With one flight the
	// submits that queue meanwhile leave as one batch, so more of them
	// share a shard and its notify-submit-v3 calls (2.9 intents per call
	// at 32 submitters over 4 shards, 2.3 with 4 flights) and the server
	// spends less per submit. The queue holds 64 (flights × batch):
	// submits beyond it go out alone, unbatched.
	submitFlights = 1
	submitBatch   = 64
)

var (
	// ErrInvalidConfig is matched by New's errors.
	ErrInvalidConfig = errors.New("intent: invalid config")
	// ErrInvalidRequest is matched by a call refused before anything was
	// sent (certainty REJECTED).
	ErrInvalidRequest = errors.New("intent: invalid request")
	// ErrNotFound is matched by Get for an id without a record (never
	// submitted, or its retention is over).
	ErrNotFound = errors.New("intent: not found")
)

// Config configures a Store. The zero value takes every default.
type Config struct {
	// Role is the Redis role (default coordination: durable intents never
	// live on the evictable cache role).
	Role policy.Role
	// Region is the key region slug (default "intents").
	Region string
	// Shards spreads intents over streams (default 4, 1..256). Part of the
	// layout: changing it moves records.
	Shards int
	// Retention is each record's TTL: the dedup window and how long Get
	// can answer (default 7 days, at most 30).
	Retention time.Duration
	// MaxLen bounds each shard's stream (XADD MAXLEN ~; default 100000).
	MaxLen int64
	// QuarantineMaxLen bounds each quarantine stream (default 10000).
	QuarantineMaxLen int64
	// Group is the consumer group (default "caphost-notify").
	Group string
	// Seal, when set, encrypts every plan before it reaches Redis and
	// opens it after the read; the record's plan digest is then keyed
	// (see the package doc). nil stores plans in plain text.
	Seal *seal.Ring
	// AcceptPlaintext lets a store with Seal still deliver plans stored
	// in plain text before encryption was turned on; without it such an
	// entry is quarantined. It needs Seal.
	AcceptPlaintext bool
}

func (c *Config) fill() error {
	if c.Role == "" {
		c.Role = policy.RoleCoordination
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.Shards == 0 {
		c.Shards = DefaultShards
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.MaxLen == 0 {
		c.MaxLen = DefaultMaxLen
	}
	if c.QuarantineMaxLen == 0 {
		c.QuarantineMaxLen = DefaultQuarantineMaxLen
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	var errs []error
	bad := func(f string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+f, append([]any{ErrInvalidConfig}, a...)...))
	}
	if c.Shards < 1 || c.Shards > keys.MaxShards {
		bad("shards %d outside 1..%d", c.Shards, keys.MaxShards)
	}
	if c.Retention < time.Second || c.Retention > MaxRetention {
		bad("retention %s outside 1s..%s", c.Retention, MaxRetention)
	}
	if c.MaxLen < 1 || c.MaxLen > programs.MaxNotifyStreamLen || c.QuarantineMaxLen < 1 || c.QuarantineMaxLen > programs.MaxNotifyStreamLen {
		bad("stream bounds outside 1..%d", programs.MaxNotifyStreamLen)
	}
	if !ValidTransportName(c.Group) {
		bad("group must be [a-z0-9-]{1,64}")
	}
	if c.AcceptPlaintext && c.Seal == nil {
		bad("accept-plaintext needs a seal key ring (without one every plan is plain text)")
	}
	return errors.Join(errs...)
}

// ID identifies an intent: 64 lower-hex characters, the keyed digest of
// the caller's idempotency key (see the package doc).
type ID string

// ParseID validates s as an ID (for an id received over HTTP).
func ParseID(s string) (ID, error) {
	if len(s) != 2*sha256.Size {
		return "", fmt.Errorf("%w: id is not 64 lower-hex characters", ErrInvalidRequest)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", fmt.Errorf("%w: id is not 64 lower-hex characters", ErrInvalidRequest)
		}
	}
	return ID(s), nil
}

// State is an intent's delivery state.
type State = programs.NotifyState

// The states (see programs.NotifyState).
const (
	Pending       = programs.NotifyPending
	Delivering    = programs.NotifyDelivering
	Delivered     = programs.NotifyDelivered
	Failed        = programs.NotifyFailed
	Quarantined   = programs.NotifyQuarantined
	Indeterminate = programs.NotifyIndeterminate
)

// Store is the durable intent store of one deployment. It is safe for
// concurrent use; its only mutable state is the submit batcher's queue
// and the reclaim cursors.
type Store struct {
	dep  *runtime.Deployment
	exec *programs.Executor
	// submits pipelines concurrent submits (notify-submit-v3): a lone
	// submit goes out at once, alone; those arriving while
	// submitFlights sends are in flight leave together, those of one
	// shard sharing calls of up to four intents, each intent judged on
	// its own.
	submits    *programs.Batcher
	intents    *keys.Sharded
	quarantine *keys.Sharded
	cfg        Config
	// reclaim holds each shard's reclaim cursor (consume.go).
	reclaim reclaimCursors
}

// New binds a Store to rt's role (coordination by default).
func New(rt *runtime.Runtime, cfg Config) (*Store, error) {
	if rt == nil {
		return nil, fmt.Errorf("%w: New needs a runtime", ErrInvalidConfig)
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	dep, err := rt.Role(cfg.Role)
	if err != nil {
		return nil, err
	}
	spec := keys.ShardSpec{Capability: keys.CapNotify, Region: cfg.Region, KeyVersion: 1, Shards: cfg.Shards, AnchorKind: "stream"}
	spec.MemberKinds = []string{"intent"}
	in, err := rt.Keys().PrepareSharded(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	spec.MemberKinds = []string{"quarantine"}
	q, err := rt.Keys().PrepareSharded(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	exec := dep.Programs()
	return &Store{dep: dep, exec: exec, submits: exec.NewBatcher(submitFlights, submitBatch), intents: in, quarantine: q, cfg: cfg}, nil
}

// Shards returns the number of shards.
func (s *Store) Shards() int { return s.cfg.Shards }

// Group returns the consumer group name.
func (s *Store) Group() string { return s.cfg.Group }

// Submission is the result of Submit.
type Submission struct {
	// ID is the intent's id; it is known before anything is sent, so an
	// INDETERMINATE submit can be looked up or repeated.
	ID ID
	// Duplicate reports that the key was used before: ID is the first
	// intent and nothing was appended. OtherPlan reports that the first
	// intent's plan differs from this one (it stands).
	Duplicate, OtherPlan bool
	State                State
	Attempts             int
	// Certainty is APPLIED for a new or duplicate submit, CONFLICT for a
	// duplicate with another plan; on error it is the error's outcome
	// (INDETERMINATE: repeat with the same key).
	Certainty certainty.Outcome
}

// Submit stores plan durably under idempotencyKey (1..256 bytes; HMAC'd,
// never stored raw). A repeat with the same key returns the first intent.
func (s *Store) Submit(ctx context.Context, idempotencyKey []byte, plan Plan) (Submission, error) {
	return s.submit(ctx, idempotencyKey, plan, nil)
}

// SubmitRequest is Submit with the duplicate check on fingerprint, the
// SHA-256 of the caller's request, instead of on the plan's bytes. A
// caller that renders on every submit needs it: a render records its time
// and the renderer module's digest, so repeating the same request freezes
// a different plan, which Submit would report as OtherPlan. The first
// plan stands either way.
func (s *Store) SubmitRequest(ctx context.Context, idempotencyKey []byte, plan Plan, fingerprint [sha256.Size]byte) (Submission, error) {
	return s.submit(ctx, idempotencyKey, plan, fingerprint[:])
}

func (s *Store) submit(ctx context.Context, idempotencyKey []byte, plan Plan, fingerprint []byte) (Submission, error) {
	if len(idempotencyKey) == 0 || len(idempotencyKey) > MaxIdempotencyKeyBytes {
		return Submission{Certainty: certainty.Rejected}, fmt.Errorf("%w: idempotency key must be 1..%d bytes", ErrInvalidRequest, MaxIdempotencyKeyBytes)
	}
	enc, err := plan.MarshalBinary()
	if err != nil {
		return Submission{Certainty: certainty.Rejected}, err
	}
	loc, err := s.intents.Locate([][]byte{idempotencyKey})
	if err != nil {
		return Submission{Certainty: certainty.Rejected}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	d := loc.Digest()
	id := ID(hex.EncodeToString(d[:]))
	stream, record, err := s.keysOf(loc)
	if err != nil {
		return Submission{ID: id, Certainty: certainty.Rejected}, err
	}
	var dig string
	if fingerprint != nil {
		dig, err = s.planDigest(fingerprint)
	} else {
		sum := sha256.Sum256(enc)
		dig, err = s.planDigest(sum[:])
	}
	if err != nil {
		return Submission{ID: id, Certainty: certainty.Rejected}, err
	}
	if s.cfg.Seal != nil {
		// The binding is the intent id: a sealed plan copied into another
		// intent's entry does not open there.
		if enc, err = s.cfg.Seal.Seal(make([]byte, 0, len(enc)+seal.Overhead), enc, []byte(id)); err != nil {
			return Submission{ID: id, Certainty: certainty.Rejected}, err
		}
	}
	r, err := s.submits.NotifySubmit(ctx, stream, record, programs.NotifySubmitRequest{IntentID: string(id), Plan: enc,
		PlanDigest: dig, Retention: s.cfg.Retention, MaxLen: s.cfg.MaxLen})
	if err != nil {
		return Submission{ID: id, Certainty: outcomeOf(err)}, err
	}
	sub := Submission{ID: id, State: r.State, Attempts: r.Attempts, Certainty: r.Outcome()}
	switch r.Status {
	case programs.NotifySubmitted:
	case programs.NotifyDuplicate:
		sub.Duplicate = true
	case programs.NotifyDuplicateOtherPlan:
		sub.Duplicate, sub.OtherPlan = true, true // Certainty CONFLICT: the first intent stands, nothing changed
	default:
		return sub, fmt.Errorf("intent: submit refused by the server: %s", r.Status)
	}
	return sub, nil
}

// Existing reports the intent a submit with idempotencyKey and
// fingerprint (as given to SubmitRequest) would find, without storing
// anything: found false when the key names no intent. A found intent is
// a Duplicate, with OtherPlan and certainty CONFLICT when it was submitted
// with another fingerprint. A caller that cannot build a plan any more
// (its renderer changed since the first submit) uses it so that a repeat
// still returns the first intent.
func (s *Store) Existing(ctx context.Context, idempotencyKey []byte, fingerprint [sha256.Size]byte) (sub Submission, found bool, err error) {
	if len(idempotencyKey) == 0 || len(idempotencyKey) > MaxIdempotencyKeyBytes {
		return Submission{Certainty: certainty.Rejected}, false, fmt.Errorf("%w: idempotency key must be 1..%d bytes", ErrInvalidRequest, MaxIdempotencyKeyBytes)
	}
	loc, err := s.intents.Locate([][]byte{idempotencyKey})
	if err != nil {
		return Submission{Certainty: certainty.Rejected}, false, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	d := loc.Digest()
	id := ID(hex.EncodeToString(d[:]))
	_, record, err := s.keysOf(loc)
	if err != nil {
		return Submission{ID: id, Certainty: certainty.Rejected}, false, err
	}
	r, err := s.exec.NotifyInspect(ctx, record)
	if err != nil {
		return Submission{ID: id, Certainty: outcomeOf(err)}, false, err
	}
	switch r.Status {
	case programs.NotifyFound:
	case programs.NotifyInspectAbsent:
		return Submission{ID: id, Certainty: certainty.NotApplied}, false, nil
	default:
		return Submission{ID: id, Certainty: certainty.Rejected}, false, fmt.Errorf("intent: inspect refused by the server: %s", r.Status)
	}
	sub = Submission{ID: id, Duplicate: true, State: r.State, Attempts: r.Attempts, Certainty: certainty.Applied}
	want, err := s.planDigest(fingerprint[:])
	if err != nil {
		return Submission{ID: id, Certainty: certainty.Rejected}, false, err
	}
	if r.PlanDigest != want {
		sub.OtherPlan, sub.Certainty = true, certainty.Conflict
	}
	return sub, true, nil
}

// Status is what Get reports of one intent.
type Status struct {
	ID       ID
	State    State
	Attempts int
	// Receipts are in arrival order, repeats collapsed.
	Receipts []Receipt
	// Retention is the record's remaining TTL.
	Retention time.Duration
}

// Get reads an intent's state (ErrNotFound without a record).
func (s *Store) Get(ctx context.Context, id ID) (Status, error) {
	loc, err := s.locationOf(id)
	if err != nil {
		return Status{}, err
	}
	_, record, err := s.keysOf(loc)
	if err != nil {
		return Status{}, err
	}
	r, err := s.exec.NotifyInspect(ctx, record)
	if err != nil {
		return Status{}, err
	}
	switch r.Status {
	case programs.NotifyFound:
	case programs.NotifyInspectAbsent:
		return Status{}, ErrNotFound
	default:
		return Status{}, fmt.Errorf("intent: inspect refused by the server: %s", r.Status)
	}
	rs, err := decodeReceiptLog(r.Receipts)
	if err != nil {
		return Status{}, err
	}
	return Status{ID: id, State: r.State, Attempts: r.Attempts, Receipts: rs, Retention: r.RecordTTL}, nil
}

// A sealed plan of the largest size still fits the program's bound.
var _ [programs.MaxNotifyPlanBytes - MaxPlanBytes - seal.Overhead]struct{}

// planDigestDomain separates the keyed plan digest from every other
// location of the intents layout (those have one part, this two).
const planDigestDomain = "caphost notify plan digest v1"

// planDigest is what the record keeps to tell a repeat from another
// plan: the hex of sum (a SHA-256) without a seal ring; with one, the
// layout's keyed digest of it, so that a record does not let anyone who
// guesses a recipient and a text confirm the guess.
func (s *Store) planDigest(sum []byte) (string, error) {
	if s.cfg.Seal == nil {
		return hex.EncodeToString(sum), nil
	}
	loc, err := s.intents.Locate([][]byte{[]byte(planDigestDomain), sum})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	d := loc.Digest()
	return hex.EncodeToString(d[:]), nil
}

func (s *Store) locationOf(id ID) (keys.Location, error) {
	if _, err := ParseID(string(id)); err != nil {
		return keys.Location{}, err
	}
	var d [sha256.Size]byte
	if _, err := hex.Decode(d[:], []byte(id)); err != nil {
		return keys.Location{}, fmt.Errorf("%w: id", ErrInvalidRequest)
	}
	return s.intents.LocationOf(d), nil
}

// keysOf returns the stream and the record key of loc.
func (s *Store) keysOf(loc keys.Location) (stream, record keys.Key, err error) {
	var buf [1]keys.Key
	ks, err := s.intents.AppendMembers(buf[:0], loc, []byte("intent"))
	if err != nil {
		return keys.Key{}, keys.Key{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return s.intents.AnchorOf(loc), ks[0], nil
}

// StreamKeys returns the Redis key names of shard's stream and of its
// quarantine stream, for operators' tools: the runbook reads a quarantine
// stream by name (XRANGE), and nothing else should touch either key.
func (s *Store) StreamKeys(shard int) (stream, quarantine string, err error) {
	if shard < 0 || shard >= s.Shards() {
		return "", "", fmt.Errorf("%w: shard %d of %d", ErrInvalidRequest, shard, s.Shards())
	}
	q, err := s.quarantineKey(shard)
	if err != nil {
		return "", "", err
	}
	return s.intents.Anchor(shard).Redis(), q.Redis(), nil
}

// quarantineKey returns shard's quarantine stream: a member of the
// quarantine layout located at a digest whose first 8 bytes select the
// shard, so it shares the shard stream's slot.
func (s *Store) quarantineKey(shard int) (keys.Key, error) {
	var d [sha256.Size]byte
	binary.BigEndian.PutUint64(d[:8], uint64(shard))
	var buf [1]keys.Key
	ks, err := s.quarantine.AppendMembers(buf[:0], s.quarantine.LocationOf(d), []byte("quarantine"))
	if err != nil {
		return keys.Key{}, err
	}
	return ks[0], nil
}

// outcomeOf classifies a call error: the runtime's certainty for a
// transport or server error, INDETERMINATE for a reply that did not decode
// (the program may have applied).
func outcomeOf(err error) certainty.Outcome {
	var ce *certainty.Error
	if errors.As(err, &ce) {
		return ce.Outcome
	}
	if errors.Is(err, programs.ErrIncompatible) {
		return certainty.Indeterminate
	}
	if w, ok := certainty.Wrap("notify", err, true).(*certainty.Error); ok {
		return w.Outcome
	}
	return certainty.Indeterminate
}
