package intent

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// reclaimTrips bounds the XAUTOCLAIM calls of one Reclaim. Each is
// preceded by an XPENDING from the same cursor, and one more XPENDING
// may follow a wrap, so a Reclaim makes at most 2×reclaimTrips+1 round
// trips (plus one XPENDING per entry a race took out of the counts it
// read; see Reclaim).
const reclaimTrips = 4

// reclaimCursors holds each shard's reclaim cursor between Reclaim
// calls: the PEL entry id the next scan starts from ("0-0", the start,
// when absent). The zero value is ready; it is safe for concurrent use.
// Concurrent Reclaims of one shard each scan from the cursor they read
// and the last to end stores its own: a cursor only says where to look
// first, and every scan wraps, so none of them misses an entry for good.
type reclaimCursors struct {
	mu sync.Mutex
	at map[int]string
	// beforeClaim, when set (tests of this package), runs between a
	// round trip's XPENDING and its XAUTOCLAIM.
	beforeClaim func()
}

func (c *reclaimCursors) load(shard int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.at[shard]; ok {
		return at
	}
	return "0-0"
}

func (c *reclaimCursors) store(shard int, at string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == nil {
		c.at = map[int]string{}
	}
	c.at[shard] = at
}

// Reclaimed is the result of Reclaim.
type Reclaimed struct {
	// Deliveries are the entries transferred to the consumer, with their
	// delivery counts (this delivery included).
	Deliveries []Delivery
	// Trimmed counts pending entries that no longer exist in the stream
	// (MAXLEN trimmed them): Redis dropped them from the PEL, their
	// records stay as they were until retention (see the package doc).
	Trimmed int
	// Trips counts the XAUTOCLAIM calls made (at most 4).
	Trips int
	// Wrapped reports that the scan reached the end of the shard's PEL:
	// a lap ended, and the cursor went back to its start.
	Wrapped bool
}

// Reclaim transfers to consumer at most count (1..64) entries of shard
// pending for at least minIdle (a dead or stalled consumer's), with
// their delivery counts.
//
// XAUTOCLAIM looks at no more than 10×count PEL entries per call, so a
// scan that always began at the start of the PEL would never get past a
// head of entries that live consumers hold (not idle long enough): a
// dead consumer's entries behind them would starve. Reclaim therefore
// keeps a cursor per shard in the Store and goes on from it. Each round
// trip first reads, with XPENDING IDLE from the cursor, the delivery
// counts of the first idle entries (XAUTOCLAIM does not report the
// counts, and it increments them), then runs XAUTOCLAIM from the first
// of those entries: the live entries before it are skipped by the
// server in one step, and the entries it claims are those the counts
// were read for. An entry that a race made idle in between (or another
// reclaimer claimed first) has its count read after the claim, on its
// own. Round trips go on from the cursor XAUTOCLAIM returns until count
// entries were claimed or trimmed, a lap of the PEL ended (the cursor
// wraps to "0-0" where Redis returns it, or where nothing idle is left
// after the cursor; a scan that began at the start stops at the end), or
// 4 XAUTOCLAIM calls were made.
//
// On an error, the result still holds the entries handed over before it
// (they are consumer's now: run them); any other entry the failing round
// trip claimed stays pending for consumer until a reclaim after minIdle.
// The cursor then stays where that round trip began.
func (s *Store) Reclaim(ctx context.Context, shard int, consumer string, minIdle time.Duration, count int) (Reclaimed, error) {
	var r Reclaimed
	if err := s.checkShard(shard); err != nil {
		return r, err
	}
	if count < 1 || count > runtime.MaxStreamCount {
		return r, fmt.Errorf("%w: count %d outside 1..%d", ErrInvalidRequest, count, runtime.MaxStreamCount)
	}
	stream := s.intents.Anchor(shard)
	cursor := s.reclaim.load(shard)
	defer func() { s.reclaim.store(shard, cursor) }()
	// whole: the scan went through the start of the PEL, so reaching its
	// end completes a lap.
	whole := cursor == "0-0"
	atEnd := func() (stop bool) {
		r.Wrapped, cursor = true, "0-0"
		if whole {
			return true
		}
		whole = true
		return false
	}
	for r.Trips < reclaimTrips && len(r.Deliveries)+r.Trimmed < count {
		want := count - len(r.Deliveries) - r.Trimmed
		pend, err := s.dep.StreamPendingRange(ctx, stream, s.cfg.Group, minIdle, cursor, "+", want)
		if err != nil {
			return r, err
		}
		if len(pend) == 0 {
			if atEnd() {
				break
			}
			continue
		}
		counts := make(map[string]int64, len(pend))
		for _, p := range pend {
			counts[p.ID] = p.Deliveries + 1 // the claim delivers it once more
		}
		if s.reclaim.beforeClaim != nil {
			s.reclaim.beforeClaim()
		}
		es, next, deleted, err := s.dep.StreamAutoClaim(ctx, stream, s.cfg.Group, consumer, minIdle, pend[0].ID, want)
		r.Trips++
		if err != nil {
			return r, err
		}
		r.Trimmed += len(deleted)
		for _, e := range es {
			if e.Fields == nil {
				r.Trimmed++
				continue
			}
			n, ok := counts[e.ID]
			if !ok {
				if n, err = s.deliveriesOf(ctx, stream, e.ID); err != nil {
					return r, err
				}
			}
			r.Deliveries = append(r.Deliveries, s.decodeEntry(shard, e, n))
		}
		cursor = next
		if next == "0-0" && atEnd() {
			break
		}
	}
	return r, nil
}

// deliveriesOf reads the delivery count of one pending entry after it
// was claimed (1 if it is no longer pending: acknowledged meanwhile).
func (s *Store) deliveriesOf(ctx context.Context, stream keys.Key, entryID string) (int64, error) {
	p, err := s.dep.StreamPendingRange(ctx, stream, s.cfg.Group, 0, entryID, entryID, 1)
	if err != nil || len(p) == 0 {
		return 1, err
	}
	return p[0].Deliveries, nil
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
