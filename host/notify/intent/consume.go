package intent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/host/notify/seal"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// ErrCorruptEntry is matched by a stream entry that is not exactly
// {i: <id of this shard>, p: <plan>}: it is quarantined, never sent.
var ErrCorruptEntry = errors.New("intent: corrupt stream entry")

// ErrPlanKeyUnavailable is matched by an entry whose plan is sealed with
// a key version this store does not hold (or sealed while this store has
// no ring): a roll-out that has not reached this process. The consumer
// leaves it pending for one that holds the key; it is not corrupt.
var ErrPlanKeyUnavailable = errors.New("intent: plan sealed with a key this store does not hold")

// Delivery is one stream entry handed to a consumer of the group.
type Delivery struct {
	Shard   int
	EntryID string
	// ID and Plan are the decoded entry; ID is "" when the entry names no
	// valid id of this shard.
	ID   ID
	Plan Plan
	// Deliveries is how often the group has delivered the entry, this
	// delivery included (1 for a new entry).
	Deliveries int64
	// Err is non-nil (ErrCorruptEntry, ErrCorruptPlan) when the entry does
	// not decode: the consumer quarantines it; ErrPlanKeyUnavailable when
	// this store cannot open it: the consumer leaves it pending.
	Err error
}

func (s *Store) checkShard(shard int) error {
	if shard < 0 || shard >= s.cfg.Shards {
		return fmt.Errorf("%w: shard %d outside 0..%d", ErrInvalidRequest, shard, s.cfg.Shards-1)
	}
	return nil
}

// EnsureGroup creates the consumer group of shard's stream (at its first
// entry). ready is false while the stream does not exist yet (no intent
// was ever submitted to it): try again later.
func (s *Store) EnsureGroup(ctx context.Context, shard int) (ready bool, err error) {
	if err := s.checkShard(shard); err != nil {
		return false, err
	}
	_, err = s.dep.StreamCreateGroup(ctx, s.intents.Anchor(shard), s.cfg.Group)
	if errors.Is(err, runtime.ErrStreamAbsent) {
		return false, nil
	}
	return err == nil, err
}

// Read takes at most count new entries of shard for consumer, waiting up
// to block (blocking lane). A missing group is runtime.ErrNoGroup.
func (s *Store) Read(ctx context.Context, shard int, consumer string, count int, block time.Duration) ([]Delivery, error) {
	if err := s.checkShard(shard); err != nil {
		return nil, err
	}
	es, err := s.dep.StreamReadGroup(ctx, s.intents.Anchor(shard), s.cfg.Group, consumer, count, block)
	if err != nil {
		return nil, err
	}
	out := make([]Delivery, len(es))
	for i, e := range es {
		out[i] = s.decodeEntry(shard, e, 1)
	}
	return out, nil
}

// Reclaim transfers to consumer at most count entries of shard pending for
// at least minIdle (a dead or stalled consumer's), with their delivery
// counts. trimmed counts pending entries that no longer exist in the
// stream (MAXLEN trimmed them): Redis dropped them from the PEL, their
// records stay as they were until retention (see the package doc).
func (s *Store) Reclaim(ctx context.Context, shard int, consumer string, minIdle time.Duration, count int) (ds []Delivery, trimmed int, err error) {
	if err := s.checkShard(shard); err != nil {
		return nil, 0, err
	}
	stream := s.intents.Anchor(shard)
	// The delivery counts first: XAUTOCLAIM does not report them, and it
	// increments them.
	pend, err := s.dep.StreamPendingIdle(ctx, stream, s.cfg.Group, minIdle, count)
	if err != nil || len(pend) == 0 {
		return nil, 0, err
	}
	counts := make(map[string]int64, len(pend))
	for _, p := range pend {
		counts[p.ID] = p.Deliveries
	}
	es, _, deleted, err := s.dep.StreamAutoClaim(ctx, stream, s.cfg.Group, consumer, minIdle, "0-0", count)
	if err != nil {
		return nil, 0, err
	}
	out := make([]Delivery, 0, len(es))
	for _, e := range es {
		if e.Fields == nil {
			trimmed++
			continue
		}
		out = append(out, s.decodeEntry(shard, e, counts[e.ID]+1))
	}
	return out, trimmed + len(deleted), nil
}

// decodeEntry strictly decodes {i, p}.
func (s *Store) decodeEntry(shard int, e runtime.StreamEntry, deliveries int64) Delivery {
	d := Delivery{Shard: shard, EntryID: e.ID, Deliveries: deliveries}
	id, plan, err := s.decodeFields(shard, e.Fields)
	if err != nil {
		d.Err = err
		return d
	}
	d.ID, d.Plan = id, plan
	return d
}

func (s *Store) decodeFields(shard int, fields []runtime.StreamField) (ID, Plan, error) {
	if len(fields) != 2 || string(fields[0].Name) != "i" || string(fields[1].Name) != "p" {
		return "", Plan{}, fmt.Errorf("%w: want exactly the fields i, p", ErrCorruptEntry)
	}
	id, err := ParseID(string(fields[0].Value))
	if err != nil {
		return "", Plan{}, fmt.Errorf("%w: id", ErrCorruptEntry)
	}
	loc, err := s.locationOf(id)
	if err != nil || loc.Shard() != shard {
		return "", Plan{}, fmt.Errorf("%w: id of another shard", ErrCorruptEntry)
	}
	raw, err := s.open(id, fields[1].Value)
	if err != nil {
		return id, Plan{}, err
	}
	var p Plan
	if err := p.UnmarshalBinary(raw); err != nil {
		return id, Plan{}, err
	}
	return id, p, nil
}

// open returns the plain plan bytes of a stored plan b of intent id:
// with a seal ring, b must be sealed for id (or plain text under
// AcceptPlaintext); without one, b must be plain text.
func (s *Store) open(id ID, b []byte) ([]byte, error) {
	ring := s.cfg.Seal
	if !seal.IsSealed(b) {
		if ring != nil && !s.cfg.AcceptPlaintext {
			return nil, fmt.Errorf("%w: stored in plain text, and this store accepts only sealed plans", ErrCorruptPlan)
		}
		return b, nil
	}
	if ring == nil {
		return nil, fmt.Errorf("%w: sealed, and this store has no seal key ring", ErrPlanKeyUnavailable)
	}
	out, err := ring.Open(make([]byte, 0, len(b)), b, []byte(id))
	switch {
	case errors.Is(err, seal.ErrUnknownVersion):
		return nil, fmt.Errorf("%w: %w", ErrPlanKeyUnavailable, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrCorruptPlan, err)
	}
	return out, nil
}

// ClaimStatus tells a consumer what to do with a delivery.
type ClaimStatus uint8

// Claim statuses.
const (
	// Proceed: attempt number Claim.Attempt may be sent.
	Proceed ClaimStatus = iota + 1
	// AlreadyFinal: consumer dedup — the intent is final; the entry was
	// acknowledged and nothing may be sent.
	AlreadyFinal
	// Exhausted: the attempts ran out after definite rejections only (the
	// record became FAILED); acknowledged.
	Exhausted
	// Gone: no record (retention over); acknowledged.
	Gone
	// InDoubt: an earlier attempt (Claim.Attempt) began and was never
	// finalized — its consumer died, was stopped or could not record the
	// receipt — so its send may have happened. The record became
	// INDETERMINATE (final) and the entry was acknowledged: nothing may be
	// sent, on this transport or any fallback. The attempt may also never
	// have reached its transport; nothing here can tell.
	InDoubt
)

var claimNames = [...]string{"", "proceed", "already-final", "exhausted", "gone", "in-doubt"}

// String returns a bounded name ("proceed", ...).
func (c ClaimStatus) String() string {
	if int(c) < len(claimNames) && c != 0 {
		return claimNames[c]
	}
	return "unknown"
}

// Claim is the result of Store.Claim.
type Claim struct {
	Status  ClaimStatus
	Attempt int
	State   State
}

// Claim begins the next attempt of d (at most maxAttempts in all) with
// notify-claim-v2: Proceed only from PENDING. A record found DELIVERING
// (an attempt claimed and never finalized) is never claimed again: InDoubt,
// the intent INDETERMINATE. Claim is not retry-safe: on an error the
// attempt may have begun, and the consumer leaves the entry pending; the
// reclaim's Claim then finds either PENDING (the claim did not apply:
// Proceed) or DELIVERING (it did: InDoubt, nothing sent).
func (s *Store) Claim(ctx context.Context, d *Delivery, maxAttempts int) (Claim, error) {
	stream, record, err := s.deliveryKeys(d)
	if err != nil {
		return Claim{}, err
	}
	r, err := s.exec.NotifyClaimV2(ctx, stream, record, s.cfg.Group, d.EntryID, maxAttempts)
	if err != nil {
		return Claim{}, err
	}
	c := Claim{Attempt: r.Attempts, State: r.State}
	switch r.Status {
	case programs.NotifyClaimed:
		c.Status = Proceed
	case programs.NotifyClaimAlreadyFinal:
		c.Status = AlreadyFinal
	case programs.NotifyClaimExhausted:
		c.Status = Exhausted
	case programs.NotifyClaimAbsent:
		c.Status = Gone
	case programs.NotifyClaimInDoubt:
		c.Status = InDoubt
	default:
		return Claim{}, fmt.Errorf("intent: claim refused by the server: %s", r.Status)
	}
	return c, nil
}

// Finalization is the result of Finalize and RecordReceipt.
type Finalization struct {
	State State
	// AlreadyFinal: the intent was final before (a late or repeated
	// receipt); Stale: the receipt is for an older attempt. Neither
	// changed the state.
	AlreadyFinal, Stale bool
	// Acked reports that this call acknowledged the entry.
	Acked bool
}

// Finalize records r for d's attempt r.Attempt through
// notify-finalize-v2. final ends the dispatch (an Accepted or
// Indeterminate receipt always does); the entry is acknowledged in the
// same step when the state is final. Repeating the same call after a lost
// reply is safe (AlreadyFinal).
//
// The state an attempt's receipts leave depends on which receipts
// arrived, never on their order (in band here, out of band through
// RecordReceipt, and a Claim that found the attempt in doubt): Accepted
// makes any state Delivered and nothing leaves Delivered; a definite
// rejection of the current attempt resolves the doubt, so it turns
// Indeterminate into Failed even when final is false (the entry may be
// acknowledged already: no retry may follow), and an Indeterminate
// receipt for an attempt whose rejection was recorded with a retry to
// follow makes the intent Failed, not Indeterminate; otherwise a
// rejection or an Indeterminate receipt never changes a final state, and
// one for an older attempt changes nothing (Stale).
func (s *Store) Finalize(ctx context.Context, d *Delivery, r Receipt, final bool) (Finalization, error) {
	stream, record, err := s.deliveryKeys(d)
	if err != nil {
		return Finalization{}, err
	}
	return s.finalize(ctx, stream, record, d.EntryID, r, final)
}

// RecordReceipt records a receipt that arrived out of band (a provider's
// delivery report) through notify-finalize-v2, as final and acknowledging
// nothing: an Accepted receipt makes the intent Delivered from any state;
// a RejectedDefinite one for the current attempt makes it Failed unless
// it is Delivered or Quarantined — an Indeterminate intent included: the
// report resolves the doubt (see Finalize). A provider's report says
// delivered or rejected, never "unknown": an Indeterminate receipt is
// refused with ErrInvalidRequest before anything is sent.
func (s *Store) RecordReceipt(ctx context.Context, id ID, r Receipt) (Finalization, error) {
	if r.Outcome == transport.Indeterminate {
		return Finalization{}, fmt.Errorf("%w: an out-of-band receipt is accepted or rejected, never indeterminate", ErrInvalidRequest)
	}
	loc, err := s.locationOf(id)
	if err != nil {
		return Finalization{}, err
	}
	stream, record, err := s.keysOf(loc)
	if err != nil {
		return Finalization{}, err
	}
	return s.finalize(ctx, stream, record, "", r, true)
}

func (s *Store) finalize(ctx context.Context, stream, record keys.Key, entryID string, r Receipt, final bool) (Finalization, error) {
	enc, err := appendReceipt(nil, &r)
	if err != nil {
		return Finalization{}, err
	}
	res, err := s.exec.NotifyFinalizeV2(ctx, stream, record, programs.NotifyFinalizeRequest{Group: s.cfg.Group, EntryID: entryID,
		Attempt: r.Attempt, Outcome: programs.NotifyReceiptOutcome(r.Outcome), Final: final || r.Outcome != transport.RejectedDefinite, Receipt: enc})
	if err != nil {
		return Finalization{}, err
	}
	f := Finalization{State: res.State, Acked: res.Acked}
	switch res.Status {
	case programs.NotifyFinalized, programs.NotifyRecorded, programs.NotifyReconciled:
	case programs.NotifyFinalizeAlreadyFinal:
		f.AlreadyFinal = true
	case programs.NotifyFinalizeStaleAttempt:
		f.Stale = true
	case programs.NotifyFinalizeAbsent:
		return f, ErrNotFound
	default:
		return Finalization{}, fmt.Errorf("intent: finalize refused by the server: %s", res.Status)
	}
	return f, nil
}

// Quarantine reasons (a closed set: they become metric labels).
const (
	ReasonDeliveries  = "deliveries"
	ReasonUndecodable = "undecodable"
)

// Quarantine moves d to its shard's quarantine stream, acknowledges it and
// marks its record QUARANTINED unless final, in one step. A repeat after a
// lost reply copies nothing twice.
func (s *Store) Quarantine(ctx context.Context, d *Delivery, reason string) (copied bool, err error) {
	if reason != ReasonDeliveries && reason != ReasonUndecodable {
		return false, fmt.Errorf("%w: unknown quarantine reason", ErrInvalidRequest)
	}
	if err := s.checkShard(d.Shard); err != nil {
		return false, err
	}
	q, err := s.quarantineKey(d.Shard)
	if err != nil {
		return false, err
	}
	stream := s.intents.Anchor(d.Shard)
	record := q // not read without an intent id; any key of the slot will do
	if d.ID != "" {
		if _, record, err = s.deliveryKeys(d); err != nil {
			return false, err
		}
	}
	r, err := s.exec.NotifyQuarantine(ctx, stream, q, record, programs.NotifyQuarantineRequest{Group: s.cfg.Group,
		EntryID: d.EntryID, IntentID: string(d.ID), Reason: reason, MaxLen: s.cfg.QuarantineMaxLen})
	if err != nil {
		return false, err
	}
	switch r.Status {
	case programs.NotifyQuarantinedStatus, programs.NotifyQuarantineNotPending:
		return r.Copied, nil
	}
	return false, fmt.Errorf("intent: quarantine refused by the server: %s", r.Status)
}

// Backlog reports shard's pending count and lag (entries not yet
// delivered to the group; lagKnown false when Redis cannot tell).
func (s *Store) Backlog(ctx context.Context, shard int) (pending, lag int64, lagKnown bool, err error) {
	if err := s.checkShard(shard); err != nil {
		return 0, 0, false, err
	}
	info, err := s.dep.StreamGroupInfo(ctx, s.intents.Anchor(shard), s.cfg.Group)
	if err != nil {
		return 0, 0, false, err
	}
	return info.Pending, info.Lag, info.LagKnown, nil
}

// deliveryKeys returns the stream and record of a decoded delivery.
func (s *Store) deliveryKeys(d *Delivery) (stream, record keys.Key, err error) {
	if d == nil || d.ID == "" || d.Err != nil {
		return keys.Key{}, keys.Key{}, fmt.Errorf("%w: the delivery did not decode", ErrInvalidRequest)
	}
	loc, err := s.locationOf(d.ID)
	if err != nil {
		return keys.Key{}, keys.Key{}, err
	}
	if loc.Shard() != d.Shard {
		return keys.Key{}, keys.Key{}, fmt.Errorf("%w: id of another shard", ErrInvalidRequest)
	}
	return s.keysOf(loc)
}
