package programs

import (
	"context"
	"strconv"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// Notification intent programs (notify-submit/claim/finalize/quarantine/
// inspect-v1, notify-submit-v2 and -v3, notify-claim-v2, notify-finalize-v2).
// A shard's stream, its quarantine stream and the intent
// records located in it share one Cluster slot (a keys.Sharded layout of
// keys.CapNotify); every facade refuses keys of different slots before
// sending (ErrCrossSlot).

// Bounds of the notify programs (the Lua sources check the same numbers).
const (
	// MaxNotifyPlanBytes bounds a stored plan.
	MaxNotifyPlanBytes = 1 << 20
	// MaxNotifyReceiptBytes bounds one encoded receipt.
	MaxNotifyReceiptBytes = 512
	// MaxNotifyReceiptLogBytes bounds an intent's receipt log; receipts
	// beyond it are dropped (the state still reduces).
	MaxNotifyReceiptLogBytes = 16384
	// MaxNotifyAttempts bounds an intent's attempts.
	MaxNotifyAttempts = 1000
	// MaxNotifyStreamLen bounds the MAXLEN of a notify stream.
	MaxNotifyStreamLen = 999_999_999
)

// NotifyState is an intent record's state; 0 means no record.
type NotifyState uint8

// Intent states, as stored (field st).
const (
	NotifyPending       NotifyState = iota + 1 // submitted, or a definite rejection with a retry to follow
	NotifyDelivering                           // an attempt was claimed; its outcome is not recorded yet
	NotifyDelivered                            // a transport accepted the message (final; nothing leaves it)
	NotifyFailed                               // definite rejections only, attempts exhausted (final)
	NotifyQuarantined                          // taken out of dispatch (final)
	NotifyIndeterminate                        // a send may have happened; never retried (final)
)

var notifyStateNames = [...]string{"NONE", "PENDING", "DELIVERING", "DELIVERED", "FAILED", "QUARANTINED", "INDETERMINATE"}

// String returns the state's name ("PENDING", ...; "NONE" for 0).
func (s NotifyState) String() string {
	if int(s) < len(notifyStateNames) {
		return notifyStateNames[s]
	}
	return "UNKNOWN(" + strconv.Itoa(int(s)) + ")"
}

// Final reports whether s ends dispatch.
func (s NotifyState) Final() bool { return s >= NotifyDelivered && s <= NotifyIndeterminate }

// NotifyReceiptOutcome is a transport call's submission certainty as the
// finalize program takes it.
type NotifyReceiptOutcome uint8

// Receipt outcomes (codes as notify-finalize-v1 takes them).
const (
	NotifyAccepted             NotifyReceiptOutcome = iota + 1 // the provider took the message
	NotifyRejectedDefinite                                     // provably not sent: retry or fallback allowed
	NotifyIndeterminateOutcome                                 // may have been sent: final, never retried
)

// NotifySubmitRequest is one durable submit.
type NotifySubmitRequest struct {
	// IntentID is 64 lower-hex characters (the record location's digest).
	IntentID string
	// Plan is the encoded frozen plan, 1..MaxNotifyPlanBytes.
	Plan []byte
	// PlanDigest is 64 lower-hex characters the duplicate check compares:
	// the SHA-256 of Plan, or of the request the caller froze it from.
	PlanDigest string
	// Retention is the record's TTL (dedup window and state retention).
	Retention time.Duration
	// MaxLen bounds the stream (XADD MAXLEN ~).
	MaxLen int64
}

// NotifySubmitResult is the result of notify-submit-v1, -v2 and -v3.
type NotifySubmitResult struct {
	Status NotifySubmitStatus
	// EntryID is the stream entry of the intent (the first one on a
	// duplicate); notify-submit-v2 and -v3 do not report it ("").
	EntryID  string
	State    NotifyState
	Attempts int
	// RecordTTL is the record's TTL; notify-submit-v3 reports it for a
	// new intent only (the retention it set; 0 on a duplicate).
	RecordTTL time.Duration
}

// Outcome returns the certainty of the call.
func (r NotifySubmitResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// NotifySubmit appends a plan and creates its intent record, unless the
// record exists (DUPLICATE / DUPLICATE_OTHER_PLAN: nothing appended).
// Repeating it after a timeout is the reconciliation: DUPLICATE with the
// same plan digest means the first call applied.
func (e *Executor) NotifySubmit(ctx context.Context, stream, record keys.Key, req NotifySubmitRequest) (NotifySubmitResult, error) {
	const id = "notify-submit-v1"
	if err := sameSlot(id, stream, record); err != nil {
		return NotifySubmitResult{}, err
	}
	r, err := e.run(ctx, id, []keys.Key{stream, record}, req.IntentID, req.Plan, req.PlanDigest,
		millis(req.Retention), strconv.FormatInt(req.MaxLen, 10))
	if err != nil {
		return NotifySubmitResult{}, err
	}
	return notifySubmitResult(&r)
}

// notifySubmitResult checks a decoded notify-submit-v1 reply beyond its
// manifest shape.
func notifySubmitResult(r *reply) (NotifySubmitResult, error) {
	const id = "notify-submit-v1"
	res := NotifySubmitResult{Status: NotifySubmitStatus(r.status), EntryID: string(r.bytes(0)),
		State: NotifyState(r.int(1)), Attempts: int(r.int(2)), RecordTTL: time.Duration(r.int(3)) * time.Millisecond}
	switch res.Status {
	case NotifySubmitted, NotifyDuplicate, NotifyDuplicateOtherPlan:
		if res.EntryID == "" || !validNotifyState(r.int(1)) || !validAttempts(r.int(2)) || r.int(3) < 0 {
			return NotifySubmitResult{}, notifyIncompatible(id, "a submit or duplicate without entry, state or attempts")
		}
	}
	return res, nil
}

// notifySubmitV2 is the program Executor.NotifySubmitV2 runs.
const notifySubmitV2 = "notify-submit-v2"

// NotifySubmitV2 is NotifySubmit through notify-submit-v2: the same keys,
// arguments, record and statuses in fewer Redis calls, with an
// integer-only reply (a Batcher pipelines it). EntryID is not reported.
func (e *Executor) NotifySubmitV2(ctx context.Context, stream, record keys.Key, req NotifySubmitRequest) (NotifySubmitResult, error) {
	return notifySubmitV2Call(ctx, e, stream, record, &req)
}

func notifySubmitV2Call(ctx context.Context, s intsSender, stream, record keys.Key, req *NotifySubmitRequest) (NotifySubmitResult, error) {
	r, err := sendFast(ctx, s, s.executor().notifySubmit, notifySubmitV2, []keys.Key{stream, record},
		req.IntentID, req.Plan, req.PlanDigest, req.Retention.Milliseconds(), req.MaxLen)
	if err != nil {
		return NotifySubmitResult{}, err
	}
	return notifySubmitV2Result(&r)
}

// notifySubmitV2Result checks a decoded notify-submit-v2 reply beyond its
// manifest shape.
func notifySubmitV2Result(r *reply) (NotifySubmitResult, error) {
	res := NotifySubmitResult{Status: NotifySubmitStatus(r.status), State: NotifyState(r.int(0)), Attempts: int(r.int(1)),
		RecordTTL: time.Duration(r.int(2)) * time.Millisecond}
	switch res.Status {
	case NotifySubmitted, NotifyDuplicate, NotifyDuplicateOtherPlan:
		if !validNotifyState(r.int(0)) || !validAttempts(r.int(1)) || r.int(2) < 0 {
			return NotifySubmitResult{}, notifyIncompatible(notifySubmitV2, "a submit or duplicate without state or attempts")
		}
		if res.Status == NotifySubmitted && (res.State != NotifyPending || res.Attempts != 0) {
			return NotifySubmitResult{}, notifyIncompatible(notifySubmitV2, "a new intent that is not pending")
		}
	}
	return res, nil
}

// NotifyClaimResult is the result of notify-claim-v1 and -v2.
type NotifyClaimResult struct {
	Status   NotifyClaimStatus
	State    NotifyState
	Attempts int
	// Acked reports that the entry was acknowledged by this call.
	Acked bool
}

// Outcome returns the certainty of the call.
func (r NotifyClaimResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// NotifyClaim begins one delivery attempt of the intent whose stream entry
// is entryID through notify-claim-v1: CLAIMED (attempts + 1) or, for a
// final, absent or exhausted record, the entry is acknowledged and nothing
// may be sent. It is not retry-safe (a repeat begins another attempt):
// after a timeout, inspect. v1 also claims a record found DELIVERING,
// whose last attempt may have been sent; NotifyClaimV2 does not.
func (e *Executor) NotifyClaim(ctx context.Context, stream, record keys.Key, group, entryID string, maxAttempts int) (NotifyClaimResult, error) {
	return e.notifyClaim(ctx, notifyClaimV1, stream, record, group, entryID, maxAttempts)
}

// NotifyClaimV2 is NotifyClaim through notify-claim-v2 (what
// host/notify/intent runs): the same keys, arguments and record, but a
// record found DELIVERING — an earlier attempt began and was never
// finalized, so its send may have happened — is never claimed again:
// it becomes INDETERMINATE (final), the entry is acknowledged and the
// status is IN_DOUBT. A repeat after a lost CLAIMED reply is therefore
// IN_DOUBT too: the attempt is given up unsent rather than risk a second
// send.
func (e *Executor) NotifyClaimV2(ctx context.Context, stream, record keys.Key, group, entryID string, maxAttempts int) (NotifyClaimResult, error) {
	return e.notifyClaim(ctx, notifyClaimV2, stream, record, group, entryID, maxAttempts)
}

// The notify claim programs.
const (
	notifyClaimV1 = "notify-claim-v1"
	notifyClaimV2 = "notify-claim-v2"
)

func (e *Executor) notifyClaim(ctx context.Context, id string, stream, record keys.Key, group, entryID string, maxAttempts int) (NotifyClaimResult, error) {
	if err := sameSlot(id, stream, record); err != nil {
		return NotifyClaimResult{}, err
	}
	r, err := e.run(ctx, id, []keys.Key{stream, record}, group, entryID, strconv.Itoa(maxAttempts))
	if err != nil {
		return NotifyClaimResult{}, err
	}
	return notifyClaimResult(id, &r)
}

// notifyClaimResult checks a decoded notify-claim-v1 or -v2 reply.
func notifyClaimResult(id string, r *reply) (NotifyClaimResult, error) {
	res := NotifyClaimResult{Status: NotifyClaimStatus(r.status), State: NotifyState(r.int(0)), Attempts: int(r.int(1)), Acked: r.int(2) == 1}
	if !validAttempts(r.int(1)) || r.int(2) < 0 || r.int(2) > 1 {
		return NotifyClaimResult{}, notifyIncompatible(id, "attempts or acked out of range")
	}
	switch res.Status {
	case NotifyClaimed:
		if res.State != NotifyDelivering || res.Attempts < 1 || res.Acked {
			return NotifyClaimResult{}, notifyIncompatible(id, "a claim that is not a new attempt")
		}
	case NotifyClaimAlreadyFinal, NotifyClaimExhausted:
		if !res.State.Final() {
			return NotifyClaimResult{}, notifyIncompatible(id, "a final status with a state that is not final")
		}
		if id == notifyClaimV2 && res.Status == NotifyClaimExhausted && res.State != NotifyFailed {
			return NotifyClaimResult{}, notifyIncompatible(id, "an exhausted claim that is not FAILED")
		}
	case NotifyClaimInDoubt:
		if id != notifyClaimV2 || res.State != NotifyIndeterminate {
			return NotifyClaimResult{}, notifyIncompatible(id, "an in-doubt claim that is not INDETERMINATE")
		}
	}
	return res, nil
}

// NotifyFinalizeRequest is one receipt to record.
type NotifyFinalizeRequest struct {
	Group string
	// EntryID is the stream entry to acknowledge when the state is final
	// after the call; "" records a receipt that arrived out of band.
	EntryID string
	// Attempt is the attempt the receipt is for (1..MaxNotifyAttempts).
	Attempt int
	Outcome NotifyReceiptOutcome
	// Final ends the dispatch (FAILED / INDETERMINATE); an indeterminate
	// outcome must be final.
	Final bool
	// Receipt is the host-encoded receipt, 0..MaxNotifyReceiptBytes.
	Receipt []byte
}

// NotifyFinalizeResult is the result of notify-finalize-v1 and -v2.
type NotifyFinalizeResult struct {
	Status   NotifyFinalizeStatus
	State    NotifyState
	Attempts int
	Acked    bool
}

// Outcome returns the certainty of the call.
func (r NotifyFinalizeResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// NotifyFinalize records a receipt and reduces the intent's state
// monotonically through notify-finalize-v1. A repeat after a timeout is
// ALREADY_FINAL for a final call, RECORDED again for a retry (the receipt
// log may then hold the receipt twice; readers deduplicate). v1's result
// depends on the order of an attempt's receipts: INDETERMINATE then
// REJECTED_DEFINITE ends INDETERMINATE, the other order FAILED;
// NotifyFinalizeV2 does not.
func (e *Executor) NotifyFinalize(ctx context.Context, stream, record keys.Key, req NotifyFinalizeRequest) (NotifyFinalizeResult, error) {
	return e.notifyFinalize(ctx, notifyFinalizeV1, stream, record, req)
}

// NotifyFinalizeV2 is NotifyFinalize through notify-finalize-v2 (what
// host/notify/intent runs): the same keys, arguments, record, reply and
// statuses, but the state an attempt's receipts leave depends only on
// which receipts arrived, not on their order. A definite report resolves
// the doubt: a REJECTED_DEFINITE receipt for the record's current attempt
// turns INDETERMINATE into FAILED (RECONCILED; acknowledged when EntryID
// is given), whether Final or not — the entry may be acknowledged
// already, so no retry may follow — and an INDETERMINATE receipt for the
// current attempt of a PENDING record (its rejection was recorded with a
// retry to follow) makes it FAILED (FINALIZED), not INDETERMINATE.
func (e *Executor) NotifyFinalizeV2(ctx context.Context, stream, record keys.Key, req NotifyFinalizeRequest) (NotifyFinalizeResult, error) {
	return e.notifyFinalize(ctx, notifyFinalizeV2, stream, record, req)
}

// The notify finalize programs.
const (
	notifyFinalizeV1 = "notify-finalize-v1"
	notifyFinalizeV2 = "notify-finalize-v2"
)

func (e *Executor) notifyFinalize(ctx context.Context, id string, stream, record keys.Key, req NotifyFinalizeRequest) (NotifyFinalizeResult, error) {
	if err := sameSlot(id, stream, record); err != nil {
		return NotifyFinalizeResult{}, err
	}
	fin := "0"
	if req.Final {
		fin = "1"
	}
	r, err := e.run(ctx, id, []keys.Key{stream, record}, req.Group, req.EntryID, strconv.Itoa(req.Attempt),
		strconv.Itoa(int(req.Outcome)), fin, req.Receipt)
	if err != nil {
		return NotifyFinalizeResult{}, err
	}
	return notifyFinalizeResult(id, &r)
}

// notifyFinalizeResult checks a decoded notify-finalize-v1 or -v2 reply.
func notifyFinalizeResult(id string, r *reply) (NotifyFinalizeResult, error) {
	res := NotifyFinalizeResult{Status: NotifyFinalizeStatus(r.status), State: NotifyState(r.int(0)), Attempts: int(r.int(1)), Acked: r.int(2) == 1}
	if !validAttempts(r.int(1)) || r.int(2) < 0 || r.int(2) > 1 {
		return NotifyFinalizeResult{}, notifyIncompatible(id, "attempts or acked out of range")
	}
	switch res.Status {
	case NotifyFinalized, NotifyReconciled, NotifyFinalizeAlreadyFinal:
		if !res.State.Final() {
			return NotifyFinalizeResult{}, notifyIncompatible(id, "a final status with a state that is not final")
		}
		// v1 reconciles only to DELIVERED (an ACCEPTED receipt); v2 also
		// to FAILED (a definite rejection resolving INDETERMINATE).
		if res.Status == NotifyReconciled && res.State != NotifyDelivered && (id != notifyFinalizeV2 || res.State != NotifyFailed) {
			return NotifyFinalizeResult{}, notifyIncompatible(id, "a reconciled state that is neither DELIVERED nor a v2 FAILED")
		}
	case NotifyRecorded:
		if res.State != NotifyPending || res.Acked {
			return NotifyFinalizeResult{}, notifyIncompatible(id, "a recorded retry that is not pending")
		}
	}
	return res, nil
}

// NotifyQuarantineRequest moves one pending entry out of dispatch.
type NotifyQuarantineRequest struct {
	Group, EntryID string
	// IntentID names the record to mark QUARANTINED ("" when the entry
	// does not decode to an intent id).
	IntentID string
	// Reason is a slug ([a-z0-9-], 1..32 bytes), e.g. "deliveries" or
	// "undecodable".
	Reason string
	MaxLen int64
}

// NotifyQuarantineResult is the result of notify-quarantine-v1.
type NotifyQuarantineResult struct {
	Status NotifyQuarantineStatus
	// Copied reports that the entry's fields were copied (false when the
	// pending entry had been trimmed from the stream).
	Copied bool
	State  NotifyState
}

// Outcome returns the certainty of the call.
func (r NotifyQuarantineResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// NotifyQuarantine copies a pending entry to the quarantine stream,
// acknowledges it and marks its record QUARANTINED unless final. A repeat
// after a timeout is NOT_PENDING (copied once).
func (e *Executor) NotifyQuarantine(ctx context.Context, stream, quarantine, record keys.Key, req NotifyQuarantineRequest) (NotifyQuarantineResult, error) {
	const id = "notify-quarantine-v1"
	if err := sameSlot(id, stream, quarantine); err != nil {
		return NotifyQuarantineResult{}, err
	}
	if err := sameSlot(id, stream, record); err != nil {
		return NotifyQuarantineResult{}, err
	}
	r, err := e.run(ctx, id, []keys.Key{stream, quarantine, record}, req.Group, req.EntryID, req.IntentID, req.Reason,
		strconv.FormatInt(req.MaxLen, 10))
	if err != nil {
		return NotifyQuarantineResult{}, err
	}
	return notifyQuarantineResult(&r)
}

// notifyQuarantineResult checks a decoded notify-quarantine-v1 reply.
func notifyQuarantineResult(r *reply) (NotifyQuarantineResult, error) {
	const id = "notify-quarantine-v1"
	if r.int(0) < 0 || r.int(0) > 1 || (r.int(1) != 0 && !validNotifyState(r.int(1))) {
		return NotifyQuarantineResult{}, notifyIncompatible(id, "copied or state out of range")
	}
	return NotifyQuarantineResult{Status: NotifyQuarantineStatus(r.status), Copied: r.int(0) == 1, State: NotifyState(r.int(1))}, nil
}

// NotifyInspectResult is the result of notify-inspect-v1.
type NotifyInspectResult struct {
	Status     NotifyInspectStatus
	State      NotifyState
	Attempts   int
	RecordTTL  time.Duration
	EntryID    string
	PlanDigest string
	// Receipts is the receipt log: two-byte big-endian length-prefixed
	// host-encoded receipts, in arrival order.
	Receipts []byte
}

// Outcome returns the certainty of the call.
func (r NotifyInspectResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// NotifyInspect reads an intent record (FCALL_RO in functions mode).
func (e *Executor) NotifyInspect(ctx context.Context, record keys.Key) (NotifyInspectResult, error) {
	const id = "notify-inspect-v1"
	r, err := e.run(ctx, id, []keys.Key{record})
	if err != nil {
		return NotifyInspectResult{}, err
	}
	return notifyInspectResult(&r)
}

// notifyInspectResult checks a decoded notify-inspect-v1 reply.
func notifyInspectResult(r *reply) (NotifyInspectResult, error) {
	const id = "notify-inspect-v1"
	res := NotifyInspectResult{Status: NotifyInspectStatus(r.status), State: NotifyState(r.int(0)), Attempts: int(r.int(1)),
		RecordTTL: time.Duration(r.int(2)) * time.Millisecond, EntryID: string(r.bytes(3)), PlanDigest: string(r.bytes(4)), Receipts: r.bytes(5)}
	if res.Status == NotifyFound && (!validNotifyState(r.int(0)) || !validAttempts(r.int(1)) || r.int(2) < 0 ||
		res.EntryID == "" || len(res.PlanDigest) != 64 || len(res.Receipts) > MaxNotifyReceiptLogBytes) {
		return NotifyInspectResult{}, notifyIncompatible(id, "a found record out of bounds")
	}
	return res, nil
}

func validNotifyState(n int64) bool {
	return n >= int64(NotifyPending) && n <= int64(NotifyIndeterminate)
}

func validAttempts(n int64) bool { return n >= 0 && n <= MaxNotifyAttempts }

func notifyIncompatible(id, why string) error {
	return &CompatibilityError{Program: id, Reason: why}
}
