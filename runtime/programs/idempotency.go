package programs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// Bounds of the idempotency programs.
const (
	// DefaultMaxIdemResponseBytes is the response bound the host passes to
	// idempotency-complete-v1 unless configured otherwise (64 KiB).
	DefaultMaxIdemResponseBytes = 64 << 10
	// MaxIdemResponseBytes is the largest bound the program accepts (1 MiB).
	MaxIdemResponseBytes = maxValueBytes
	// MaxIdemTTL bounds every idempotency duration, and lease + retention
	// together (the catalog's maxTtlMillis, 30 days).
	MaxIdemTTL = MaxLeaseTTL
)

// IdemState is the state of an idempotency record as a reply reports it.
type IdemState uint8

// Record states (result field "state").
const (
	// IdemStateNone: the reply names no record (absent, or not disclosed).
	IdemStateNone IdemState = iota
	// IdemStateClaimed: claimed by an owner; its action has not started.
	IdemStateClaimed
	// IdemStateExecuting: the owner's action started (markExecutionStarted).
	IdemStateExecuting
	// IdemStateCompleted: a response is stored for the replay TTL.
	IdemStateCompleted
	// IdemStateFailedRetryable: no effect proven; the next claim takes over.
	IdemStateFailedRetryable
	// IdemStateAbandoned: the effect is unknown (the owner said so, or its
	// execution lease expired): every claim is RECOVERY_REQUIRED.
	IdemStateAbandoned
	// IdemStateReleased: released before execution; claims treat it as absent.
	IdemStateReleased
)

func idemStateNames() []string {
	return []string{"NONE", "CLAIMED", "EXECUTING", "COMPLETED", "FAILED_RETRYABLE", "ABANDONED", "RELEASED"}
}

// String returns the state's record name.
func (s IdemState) String() string {
	if n := idemStateNames(); int(s) < len(n) {
		return n[s]
	}
	return "UNKNOWN(" + strconv.Itoa(int(s)) + ")"
}

// IdemAttempt identifies one claim attempt: a secure random owner token
// and the claim's operation id, both minted before the first send and kept
// to repeat or inspect the claim after a lost reply (a new token would
// contend with itself).
type IdemAttempt struct {
	// Owner is the owner token, 1..128 bytes.
	Owner []byte
	// OperationID is the claim's operation id, 1..128 bytes.
	OperationID []byte
}

// IdemOwner is the owner handle a claim returns: the owner token and the
// attempt number. A takeover increments the attempt, so the handle of an
// older attempt can never change a newer owner's record.
type IdemOwner struct {
	Owner   []byte
	Attempt int64
}

// IdemRecord is what a reply reports about the record.
type IdemRecord struct {
	State IdemState
	// Attempt and StateRevision are the record's (0 when undisclosed).
	Attempt       int64
	StateRevision int64
	// Lease is the processing lease: the lease sent on ACQUIRED,
	// TAKEN_OVER_CLAIMED, STARTED and RENEWED; what remains of it on
	// replays, inspection and IN_PROGRESS (the retry-after; 0 once
	// expired); else 0.
	Lease time.Duration
	// TTL is the record's remaining life outside CLAIMED/EXECUTING: the
	// replay TTL of a COMPLETED record, the retention of a FAILED_RETRYABLE,
	// ABANDONED or RELEASED one (the TTL sent on COMPLETED and MARKED_*);
	// else 0.
	TTL time.Duration
}

// IdemResponse is a stored response, reported only with COMPLETED_REPLAY.
type IdemResponse struct {
	// CodecID is the codec the response was encoded with (the claim's).
	CodecID string
	// Version is the response's codec version (>= 1).
	Version int64
	// Digest is the host's lower-hex digest of the payload.
	Digest string
	// Payload is the encoded response.
	Payload []byte
}

// ---- claim ----

// IdemClaimStatus is the status enum of idempotency-claim-v1.
type IdemClaimStatus uint8

// Statuses of idempotency-claim-v1 (codes as in the manifest).
const (
	// IdemClaimAcquired is ACQUIRED (APPLIED): a new CLAIMED record.
	IdemClaimAcquired IdemClaimStatus = iota + 1
	// IdemClaimReplayedAcquire is REPLAYED_ACQUIRE (APPLIED): this attempt
	// already holds the claim (a repeat after a lost reply); nothing
	// changed; Record.State tells CLAIMED from EXECUTING.
	IdemClaimReplayedAcquire
	// IdemClaimTakenOverClaimed is TAKEN_OVER_CLAIMED (APPLIED): a
	// FAILED_RETRYABLE record, or a CLAIMED one whose lease expired, is now
	// this attempt's with attempt + 1.
	IdemClaimTakenOverClaimed
	// IdemClaimCompletedReplay is COMPLETED_REPLAY (APPLIED): the request
	// completed; Response is the stored response, Record.TTL the remaining
	// replay TTL.
	IdemClaimCompletedReplay
	// IdemClaimInProgress is IN_PROGRESS (CONFLICT): another owner holds a
	// live claim; RetryAfter is its remaining lease.
	IdemClaimInProgress
	// IdemClaimRecoveryRequired is RECOVERY_REQUIRED (CONFLICT): the record
	// is ABANDONED (an owner reported an unknown effect, or its execution
	// lease expired: then this claim marked it). Never retried
	// automatically: only reconciliation reopens it.
	IdemClaimRecoveryRequired
	// IdemClaimFingerprintMismatch is FINGERPRINT_MISMATCH (CONFLICT): the
	// key was used for another request.
	IdemClaimFingerprintMismatch
	// IdemClaimOwnerOperationConflict is OWNER_OPERATION_CONFLICT
	// (CONFLICT): the same owner token holds the claim for another
	// operation.
	IdemClaimOwnerOperationConflict
	// IdemClaimPolicyMismatch is POLICY_MISMATCH (CONFLICT): the completed
	// response was stored under another codec id or policy revision; it is
	// not replayed.
	IdemClaimPolicyMismatch
	// IdemClaimWrongType is WRONG_TYPE (REJECTED).
	IdemClaimWrongType
	// IdemClaimInvalid is INVALID (REJECTED).
	IdemClaimInvalid
)

func idemClaimStatuses() []statusDef {
	return []statusDef{
		{"ACQUIRED", certainty.Applied},
		{"REPLAYED_ACQUIRE", certainty.Applied},
		{"TAKEN_OVER_CLAIMED", certainty.Applied},
		{"COMPLETED_REPLAY", certainty.Applied},
		{"IN_PROGRESS", certainty.Conflict},
		{"RECOVERY_REQUIRED", certainty.Conflict},
		{"FINGERPRINT_MISMATCH", certainty.Conflict},
		{"OWNER_OPERATION_CONFLICT", certainty.Conflict},
		{"POLICY_MISMATCH", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s IdemClaimStatus) String() string { return statusName(idemClaimStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s IdemClaimStatus) Outcome() certainty.Outcome {
	return statusOutcome(idemClaimStatuses(), uint8(s))
}

// idemClaimShapes is what each claim status may carry, by code - 1.
func idemClaimShapes() []idemShape {
	return []idemShape{
		{states: stateSet(IdemStateClaimed), lease: ruleSent},
		{states: stateSet(IdemStateClaimed, IdemStateExecuting), lease: ruleLive},
		{states: stateSet(IdemStateClaimed), lease: ruleSent, minAttempt: 2},
		{states: stateSet(IdemStateCompleted), ttl: ruleAny, response: true},
		{states: stateSet(IdemStateClaimed, IdemStateExecuting), lease: ruleLive},
		{states: stateSet(IdemStateAbandoned), ttl: ruleAny},
		{}, {}, {}, {}, {},
	}
}

// IdemClaimRequest is one claim: the request's identity and the durations
// of its record.
type IdemClaimRequest struct {
	Attempt IdemAttempt
	// Fingerprint is the request fingerprint, lower-hex 16..128.
	Fingerprint string
	// Lease is the processing lease while CLAIMED.
	Lease time.Duration
	// Retention is how long a CLAIMED or EXECUTING record outlives its
	// lease (the key lives Lease + Retention): an expired execution stays
	// visible, and becomes ABANDONED, for that long. Lease + Retention <=
	// MaxIdemTTL.
	Retention time.Duration
	// CodecID (1..64 bytes) and PolicyRevision (1..128 bytes) are stored
	// with the claim; a completed response is replayed only to the same.
	CodecID        string
	PolicyRevision string
}

// IdemClaimResult is the result of idempotency-claim-v1.
type IdemClaimResult struct {
	Status IdemClaimStatus
	// ServerNowMillis is 0: the program reads no clock.
	ServerNowMillis int64
	Record          IdemRecord
	// Response is set on COMPLETED_REPLAY only.
	Response IdemResponse
}

// Outcome returns the certainty of the call.
func (r IdemClaimResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// RetryAfter is the holder's remaining lease on IN_PROGRESS, else 0.
func (r IdemClaimResult) RetryAfter() time.Duration {
	if r.Status == IdemClaimInProgress {
		return r.Record.Lease
	}
	return 0
}

// Owned reports whether the claim is this attempt's (ACQUIRED,
// REPLAYED_ACQUIRE, TAKEN_OVER_CLAIMED) and returns its handle.
func (r IdemClaimResult) Owned(a IdemAttempt) (IdemOwner, bool) {
	switch r.Status {
	case IdemClaimAcquired, IdemClaimReplayedAcquire, IdemClaimTakenOverClaimed:
		return IdemOwner{Owner: a.Owner, Attempt: r.Record.Attempt}, true
	}
	return IdemOwner{}, false
}

// IdempotencyClaim claims record for req in one atomic step. Repeating the
// same request after a timeout is safe: REPLAYED_ACQUIRE (or the state the
// record reached since); IdempotencyInspect answers without writing.
func (e *Executor) IdempotencyClaim(ctx context.Context, record keys.Key, req IdemClaimRequest) (IdemClaimResult, error) {
	const id = "idempotency-claim-v1"
	r, err := e.run(ctx, id, []keys.Key{record}, req.Attempt.Owner, req.Attempt.OperationID, req.Fingerprint,
		millis(req.Lease), millis(req.Retention), req.CodecID, req.PolicyRevision)
	if err != nil {
		return IdemClaimResult{}, err
	}
	return idemClaimResult(id, &r, req)
}

func idemClaimResult(id string, r *reply, req IdemClaimRequest) (IdemClaimResult, error) {
	st := IdemClaimStatus(r.status)
	rec, resp, err := idemDecode(id, st, r, idemClaimShapes()[r.status-1], idemWant{lease: req.Lease, codec: req.CodecID})
	if err != nil {
		return IdemClaimResult{}, err
	}
	return IdemClaimResult{Status: st, ServerNowMillis: r.serverNow, Record: rec, Response: resp}, nil
}

// ---- inspect ----

// IdemInspectStatus is the status enum of idempotency-inspect-v1.
type IdemInspectStatus uint8

// Statuses of idempotency-inspect-v1 (codes as in the manifest).
const (
	// IdemInspectAbsent is ABSENT (NOT_APPLIED): no record (or a released
	// one).
	IdemInspectAbsent IdemInspectStatus = iota + 1
	// IdemInspectClaimedSameOperation is CLAIMED_SAME_OPERATION (APPLIED):
	// the attempt holds the claim; Record carries its attempt and the
	// remaining lease (0 once expired).
	IdemInspectClaimedSameOperation
	// IdemInspectExecutingSameOperation is EXECUTING_SAME_OPERATION
	// (APPLIED): the attempt's action started. It cannot tell a running
	// action from one that produced its effect: never run the action again
	// on this alone.
	IdemInspectExecutingSameOperation
	// IdemInspectCompletedReplay is COMPLETED_REPLAY (APPLIED).
	IdemInspectCompletedReplay
	// IdemInspectInProgressOther is IN_PROGRESS_OTHER (CONFLICT): another
	// owner's claim; Record.Lease is its remaining lease.
	IdemInspectInProgressOther
	// IdemInspectFailedRetryable is FAILED_RETRYABLE (NOT_APPLIED).
	IdemInspectFailedRetryable
	// IdemInspectAbandoned is ABANDONED (CONFLICT).
	IdemInspectAbandoned
	// IdemInspectFingerprintMismatch is FINGERPRINT_MISMATCH (CONFLICT).
	IdemInspectFingerprintMismatch
	// IdemInspectOperationConflict is OPERATION_CONFLICT (CONFLICT): the
	// same owner token under another claim operation.
	IdemInspectOperationConflict
	// IdemInspectPolicyMismatch is POLICY_MISMATCH (CONFLICT).
	IdemInspectPolicyMismatch
	// IdemInspectWrongType is WRONG_TYPE (REJECTED).
	IdemInspectWrongType
	// IdemInspectInvalid is INVALID (REJECTED).
	IdemInspectInvalid
)

func idemInspectStatuses() []statusDef {
	return []statusDef{
		{"ABSENT", certainty.NotApplied},
		{"CLAIMED_SAME_OPERATION", certainty.Applied},
		{"EXECUTING_SAME_OPERATION", certainty.Applied},
		{"COMPLETED_REPLAY", certainty.Applied},
		{"IN_PROGRESS_OTHER", certainty.Conflict},
		{"FAILED_RETRYABLE", certainty.NotApplied},
		{"ABANDONED", certainty.Conflict},
		{"FINGERPRINT_MISMATCH", certainty.Conflict},
		{"OPERATION_CONFLICT", certainty.Conflict},
		{"POLICY_MISMATCH", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s IdemInspectStatus) String() string { return statusName(idemInspectStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s IdemInspectStatus) Outcome() certainty.Outcome {
	return statusOutcome(idemInspectStatuses(), uint8(s))
}

func idemInspectShapes() []idemShape {
	return []idemShape{
		{},
		{states: stateSet(IdemStateClaimed), lease: ruleAny},
		{states: stateSet(IdemStateExecuting), lease: ruleAny},
		{states: stateSet(IdemStateCompleted), ttl: ruleAny, response: true},
		{states: stateSet(IdemStateClaimed, IdemStateExecuting), lease: ruleAny},
		{states: stateSet(IdemStateFailedRetryable), ttl: ruleAny},
		{states: stateSet(IdemStateAbandoned), ttl: ruleAny},
		{}, {}, {}, {}, {},
	}
}

// IdemInspectRequest is what an inspection compares: the claim attempt,
// the fingerprint, and the codec id and policy revision a replay needs.
type IdemInspectRequest struct {
	Attempt        IdemAttempt
	Fingerprint    string
	CodecID        string
	PolicyRevision string
}

// IdemInspectResult is the result of idempotency-inspect-v1.
type IdemInspectResult struct {
	Status          IdemInspectStatus
	ServerNowMillis int64
	Record          IdemRecord
	Response        IdemResponse
}

// Outcome returns the certainty of the call.
func (r IdemInspectResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// IdempotencyInspect reports what record holds for req without writing
// (FCALL_RO in functions-provisioned mode): how a caller whose claim or
// start reply was lost recovers its handle. If it fails too, the claim
// stays INDETERMINATE: never claim again as a new owner.
func (e *Executor) IdempotencyInspect(ctx context.Context, record keys.Key, req IdemInspectRequest) (IdemInspectResult, error) {
	const id = "idempotency-inspect-v1"
	r, err := e.run(ctx, id, []keys.Key{record}, req.Attempt.Owner, req.Attempt.OperationID, req.Fingerprint, req.CodecID, req.PolicyRevision)
	if err != nil {
		return IdemInspectResult{}, err
	}
	return idemInspectResult(id, &r, req)
}

func idemInspectResult(id string, r *reply, req IdemInspectRequest) (IdemInspectResult, error) {
	st := IdemInspectStatus(r.status)
	rec, resp, err := idemDecode(id, st, r, idemInspectShapes()[r.status-1], idemWant{codec: req.CodecID})
	if err != nil {
		return IdemInspectResult{}, err
	}
	return IdemInspectResult{Status: st, ServerNowMillis: r.serverNow, Record: rec, Response: resp}, nil
}

// ---- start ----

// IdemStartStatus is the status enum of idempotency-start-v1.
type IdemStartStatus uint8

// Statuses of idempotency-start-v1 (codes as in the manifest).
const (
	// IdemStarted is STARTED (APPLIED): CLAIMED -> EXECUTING with the lease
	// sent. Only now may the action run.
	IdemStarted IdemStartStatus = iota + 1
	// IdemAlreadyStartedSameOperation is ALREADY_STARTED_SAME_OPERATION
	// (APPLIED): this start already applied (a lost reply); the remaining
	// lease is reported, not extended.
	IdemAlreadyStartedSameOperation
	// IdemStartAbsent is ABSENT (NOT_APPLIED).
	IdemStartAbsent
	// IdemStartNotOwner is NOT_OWNER (CONFLICT): another owner or attempt.
	IdemStartNotOwner
	// IdemStartNotClaimed is NOT_CLAIMED (CONFLICT): the record is past
	// CLAIMED (COMPLETED, FAILED_RETRYABLE, ABANDONED).
	IdemStartNotClaimed
	// IdemStartOperationConflict is OPERATION_CONFLICT (CONFLICT).
	IdemStartOperationConflict
	// IdemStartWrongType is WRONG_TYPE (REJECTED).
	IdemStartWrongType
	// IdemStartInvalid is INVALID (REJECTED).
	IdemStartInvalid
)

func idemStartStatuses() []statusDef {
	return []statusDef{
		{"STARTED", certainty.Applied},
		{"ALREADY_STARTED_SAME_OPERATION", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"NOT_CLAIMED", certainty.Conflict},
		{"OPERATION_CONFLICT", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s IdemStartStatus) String() string { return statusName(idemStartStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s IdemStartStatus) Outcome() certainty.Outcome {
	return statusOutcome(idemStartStatuses(), uint8(s))
}

func idemStartShapes() []idemShape {
	return []idemShape{
		{states: stateSet(IdemStateExecuting), lease: ruleSent, owned: true},
		{states: stateSet(IdemStateExecuting), lease: ruleAny, owned: true},
		{}, {},
		{states: stateSet(IdemStateCompleted, IdemStateFailedRetryable, IdemStateAbandoned), owned: true},
		{}, {}, {},
	}
}

// IdemTransitionResult is the result of idempotency-start-v1,
// idempotency-renew-v1, idempotency-complete-v1, idempotency-fail-v1 and
// idempotency-release-v1, parameterised by the program's status enum.
type IdemTransitionResult[S idemTransitionStatus] struct {
	Status          S
	ServerNowMillis int64
	// Record reports the owner's record after the call (its state, attempt,
	// new revision, lease or TTL); zero on ABSENT, NOT_OWNER and the
	// conflicts, so nothing about another owner's record is disclosed.
	Record IdemRecord
}

type idemTransitionStatus interface {
	IdemStartStatus | IdemRenewStatus | IdemCompleteStatus | IdemFailStatus | IdemReleaseStatus
	String() string
	Outcome() certainty.Outcome
}

// Outcome returns the certainty of the call.
func (r IdemTransitionResult[S]) Outcome() certainty.Outcome { return r.Status.Outcome() }

// IdempotencyStart marks owner's claimed record EXECUTING with a fresh
// processing lease, immediately before the action: the action runs only on
// STARTED or ALREADY_STARTED_SAME_OPERATION. operationID names this
// transition (not the claim's).
func (e *Executor) IdempotencyStart(ctx context.Context, record keys.Key, owner IdemOwner, operationID []byte, lease time.Duration) (IdemTransitionResult[IdemStartStatus], error) {
	const id = "idempotency-start-v1"
	r, err := e.run(ctx, id, []keys.Key{record}, owner.Owner, owner.Attempt, operationID, millis(lease))
	if err != nil {
		return IdemTransitionResult[IdemStartStatus]{}, err
	}
	return idemTransition(id, IdemStartStatus(r.status), &r, idemStartShapes(), idemWant{lease: lease, attempt: owner.Attempt})
}

// ---- renew ----

// IdemRenewStatus is the status enum of idempotency-renew-v1.
type IdemRenewStatus uint8

// Statuses of idempotency-renew-v1 (codes as in the manifest).
const (
	// IdemRenewed is RENEWED (APPLIED): the remaining lease is now exactly
	// the lease sent.
	IdemRenewed IdemRenewStatus = iota + 1
	// IdemAlreadyRenewedSameOperation is ALREADY_RENEWED_SAME_OPERATION
	// (APPLIED): this renew already applied; the remaining lease is
	// reported, not extended twice.
	IdemAlreadyRenewedSameOperation
	// IdemRenewAbsent is ABSENT (NOT_APPLIED).
	IdemRenewAbsent
	// IdemRenewNotOwner is NOT_OWNER (CONFLICT): the claim is lost.
	IdemRenewNotOwner
	// IdemRenewNotInProgress is NOT_IN_PROGRESS (CONFLICT): the record is
	// past EXECUTING.
	IdemRenewNotInProgress
	// IdemRenewOperationConflict is OPERATION_CONFLICT (CONFLICT).
	IdemRenewOperationConflict
	// IdemRenewWrongType is WRONG_TYPE (REJECTED).
	IdemRenewWrongType
	// IdemRenewInvalid is INVALID (REJECTED).
	IdemRenewInvalid
)

func idemRenewStatuses() []statusDef {
	return []statusDef{
		{"RENEWED", certainty.Applied},
		{"ALREADY_RENEWED_SAME_OPERATION", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"NOT_IN_PROGRESS", certainty.Conflict},
		{"OPERATION_CONFLICT", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s IdemRenewStatus) String() string { return statusName(idemRenewStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s IdemRenewStatus) Outcome() certainty.Outcome {
	return statusOutcome(idemRenewStatuses(), uint8(s))
}

func idemRenewShapes() []idemShape {
	return []idemShape{
		{states: stateSet(IdemStateClaimed, IdemStateExecuting), lease: ruleSent, owned: true},
		{states: stateSet(IdemStateClaimed, IdemStateExecuting), lease: ruleAny, owned: true},
		{}, {},
		{states: stateSet(IdemStateCompleted, IdemStateFailedRetryable, IdemStateAbandoned), owned: true},
		{}, {}, {},
	}
}

// IdempotencyRenew sets the remaining processing lease of owner's CLAIMED
// or EXECUTING record to exactly lease. Anything but RENEWED or
// ALREADY_RENEWED_SAME_OPERATION, or an error, means the caller may no
// longer assume it is the single owner.
func (e *Executor) IdempotencyRenew(ctx context.Context, record keys.Key, owner IdemOwner, operationID []byte, lease time.Duration) (IdemTransitionResult[IdemRenewStatus], error) {
	const id = "idempotency-renew-v1"
	r, err := e.run(ctx, id, []keys.Key{record}, owner.Owner, owner.Attempt, operationID, millis(lease))
	if err != nil {
		return IdemTransitionResult[IdemRenewStatus]{}, err
	}
	return idemTransition(id, IdemRenewStatus(r.status), &r, idemRenewShapes(), idemWant{lease: lease, attempt: owner.Attempt})
}

// ---- complete ----

// IdemCompleteStatus is the status enum of idempotency-complete-v1.
type IdemCompleteStatus uint8

// Statuses of idempotency-complete-v1 (codes as in the manifest).
const (
	// IdemCompleted is COMPLETED (APPLIED): the response is stored for the
	// replay TTL.
	IdemCompleted IdemCompleteStatus = iota + 1
	// IdemAlreadyCompletedSameResult is ALREADY_COMPLETED_SAME_RESULT
	// (APPLIED): this complete already applied (a lost reply).
	IdemAlreadyCompletedSameResult
	// IdemCompleteResponseConflict is RESPONSE_CONFLICT (CONFLICT): the
	// record completed with another response version or digest.
	IdemCompleteResponseConflict
	// IdemCompleteAbsent is ABSENT (NOT_APPLIED).
	IdemCompleteAbsent
	// IdemCompleteNotOwner is NOT_OWNER (CONFLICT): a stale owner.
	IdemCompleteNotOwner
	// IdemCompleteNotInProgress is NOT_IN_PROGRESS (CONFLICT): not
	// EXECUTING (an ABANDONED record completes only by reconciliation).
	IdemCompleteNotInProgress
	// IdemCompleteOperationConflict is OPERATION_CONFLICT (CONFLICT).
	IdemCompleteOperationConflict
	// IdemCompleteResponseTooLarge is RESPONSE_TOO_LARGE (REJECTED): the
	// payload exceeds the bound sent; nothing was written. The facade
	// refuses such a call before sending (ErrResponseTooLarge).
	IdemCompleteResponseTooLarge
	// IdemCompleteWrongType is WRONG_TYPE (REJECTED).
	IdemCompleteWrongType
	// IdemCompleteInvalid is INVALID (REJECTED).
	IdemCompleteInvalid
)

func idemCompleteStatuses() []statusDef {
	return []statusDef{
		{"COMPLETED", certainty.Applied},
		{"ALREADY_COMPLETED_SAME_RESULT", certainty.Applied},
		{"RESPONSE_CONFLICT", certainty.Conflict},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"NOT_IN_PROGRESS", certainty.Conflict},
		{"OPERATION_CONFLICT", certainty.Conflict},
		{"RESPONSE_TOO_LARGE", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s IdemCompleteStatus) String() string { return statusName(idemCompleteStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s IdemCompleteStatus) Outcome() certainty.Outcome {
	return statusOutcome(idemCompleteStatuses(), uint8(s))
}

func idemCompleteShapes() []idemShape {
	return []idemShape{
		{states: stateSet(IdemStateCompleted), ttl: ruleSent, owned: true},
		{states: stateSet(IdemStateCompleted), ttl: ruleAny, owned: true},
		{}, {}, {},
		{states: stateSet(IdemStateClaimed, IdemStateFailedRetryable, IdemStateAbandoned), owned: true},
		{}, {}, {}, {},
	}
}

// IdemCompleteRequest is one owner-safe completion.
type IdemCompleteRequest struct {
	Owner IdemOwner
	// OperationID names this transition.
	OperationID []byte
	// Response is what a replay returns; CodecID is the claim's and is not
	// sent again. Digest is the host's lower-hex digest (16..128) of the
	// payload: the program compares it, it cannot recompute it.
	Response IdemResponse
	// ReplayTTL is how long the response is replayed.
	ReplayTTL time.Duration
	// MaxResponseBytes bounds the payload (0: DefaultMaxIdemResponseBytes;
	// at most MaxIdemResponseBytes).
	MaxResponseBytes int
}

// IdempotencyComplete stores the response of owner's EXECUTING record and
// makes it COMPLETED for the replay TTL. A payload above the bound is
// refused before anything is sent (ErrResponseTooLarge); the program
// enforces the same bound before any write.
func (e *Executor) IdempotencyComplete(ctx context.Context, record keys.Key, req IdemCompleteRequest) (IdemTransitionResult[IdemCompleteStatus], error) {
	const id = "idempotency-complete-v1"
	limit := req.MaxResponseBytes
	if limit == 0 {
		limit = DefaultMaxIdemResponseBytes
	}
	if limit > 0 && len(req.Response.Payload) > limit {
		return IdemTransitionResult[IdemCompleteStatus]{}, &ResponseTooLargeError{Program: id, Size: len(req.Response.Payload), Limit: limit}
	}
	r, err := e.run(ctx, id, []keys.Key{record}, req.Owner.Owner, req.Owner.Attempt, req.OperationID,
		req.Response.Version, req.Response.Digest, req.Response.Payload, millis(req.ReplayTTL), limit)
	if err != nil {
		return IdemTransitionResult[IdemCompleteStatus]{}, err
	}
	return idemTransition(id, IdemCompleteStatus(r.status), &r, idemCompleteShapes(), idemWant{ttl: req.ReplayTTL, attempt: req.Owner.Attempt})
}

// ResponseTooLargeError refuses a completion whose payload exceeds the
// bound before anything is sent. It matches ErrResponseTooLarge and reports
// certainty.Rejected (nothing was sent, nothing can have applied).
type ResponseTooLargeError struct {
	Program     string
	Size, Limit int
}

// Error implements error.
func (e *ResponseTooLargeError) Error() string {
	return fmt.Sprintf("programs: %s: response of %d bytes exceeds the bound of %d", e.Program, e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrResponseTooLarge) true.
func (e *ResponseTooLargeError) Is(target error) bool { return target == ErrResponseTooLarge }

// CertaintyOutcome is certainty.Rejected: refused before send.
func (e *ResponseTooLargeError) CertaintyOutcome() certainty.Outcome { return certainty.Rejected }

// ---- fail ----

// IdemDisposition is how an owner's failed execution is recorded.
type IdemDisposition uint8

// Dispositions of idempotency-fail-v1.
const (
	// IdemRetryable: no effect is proven; the next claim takes over.
	IdemRetryable IdemDisposition = iota + 1
	// IdemAbandon: the effect is unknown; reconciliation only.
	IdemAbandon
)

// String returns the wire value ("retryable", "abandoned").
func (d IdemDisposition) String() string {
	switch d {
	case IdemRetryable:
		return "retryable"
	case IdemAbandon:
		return "abandoned"
	}
	return "unknown"
}

// IdemFailStatus is the status enum of idempotency-fail-v1.
type IdemFailStatus uint8

// Statuses of idempotency-fail-v1 (codes as in the manifest).
const (
	// IdemMarkedRetryable is MARKED_RETRYABLE (APPLIED).
	IdemMarkedRetryable IdemFailStatus = iota + 1
	// IdemMarkedAbandoned is MARKED_ABANDONED (APPLIED).
	IdemMarkedAbandoned
	// IdemAlreadyMarkedSameOperation is ALREADY_MARKED_SAME_OPERATION
	// (APPLIED): this mark already applied (a lost reply).
	IdemAlreadyMarkedSameOperation
	// IdemFailAbsent is ABSENT (NOT_APPLIED).
	IdemFailAbsent
	// IdemFailNotOwner is NOT_OWNER (CONFLICT).
	IdemFailNotOwner
	// IdemFailNotInProgress is NOT_IN_PROGRESS (CONFLICT): not EXECUTING
	// (a CLAIMED record is released instead; an expired execution was
	// already ABANDONED by a claim).
	IdemFailNotInProgress
	// IdemFailOperationConflict is OPERATION_CONFLICT (CONFLICT).
	IdemFailOperationConflict
	// IdemFailWrongType is WRONG_TYPE (REJECTED).
	IdemFailWrongType
	// IdemFailInvalid is INVALID (REJECTED).
	IdemFailInvalid
)

func idemFailStatuses() []statusDef {
	return []statusDef{
		{"MARKED_RETRYABLE", certainty.Applied},
		{"MARKED_ABANDONED", certainty.Applied},
		{"ALREADY_MARKED_SAME_OPERATION", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"NOT_IN_PROGRESS", certainty.Conflict},
		{"OPERATION_CONFLICT", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s IdemFailStatus) String() string { return statusName(idemFailStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s IdemFailStatus) Outcome() certainty.Outcome {
	return statusOutcome(idemFailStatuses(), uint8(s))
}

func idemFailShapes(d IdemDisposition) []idemShape {
	marked := stateSet(IdemStateFailedRetryable)
	if d == IdemAbandon {
		marked = stateSet(IdemStateAbandoned)
	}
	return []idemShape{
		{states: stateSet(IdemStateFailedRetryable), ttl: ruleSent, owned: true},
		{states: stateSet(IdemStateAbandoned), ttl: ruleSent, owned: true},
		{states: marked, ttl: ruleAny, owned: true},
		{}, {},
		{states: stateSet(IdemStateClaimed, IdemStateCompleted, IdemStateAbandoned), owned: true},
		{}, {}, {},
	}
}

// IdempotencyFail records that owner's started action failed: retryable
// (FAILED_RETRYABLE) or with an unknown effect (ABANDONED), kept for
// retention.
func (e *Executor) IdempotencyFail(ctx context.Context, record keys.Key, owner IdemOwner, operationID []byte, d IdemDisposition, retention time.Duration) (IdemTransitionResult[IdemFailStatus], error) {
	const id = "idempotency-fail-v1"
	r, err := e.run(ctx, id, []keys.Key{record}, owner.Owner, owner.Attempt, operationID, d.String(), millis(retention))
	if err != nil {
		return IdemTransitionResult[IdemFailStatus]{}, err
	}
	st := IdemFailStatus(r.status)
	if (st == IdemMarkedRetryable && d != IdemRetryable) || (st == IdemMarkedAbandoned && d != IdemAbandon) {
		return IdemTransitionResult[IdemFailStatus]{}, &CompatibilityError{Program: id, Reason: fmt.Sprintf("%s for disposition %s", st, d)}
	}
	return idemTransition(id, st, &r, idemFailShapes(d), idemWant{ttl: retention, attempt: owner.Attempt})
}

// ---- release ----

// IdemReleaseStatus is the status enum of idempotency-release-v1.
type IdemReleaseStatus uint8

// Statuses of idempotency-release-v1 (codes as in the manifest).
const (
	// IdemReleasedBeforeExecution is RELEASED_BEFORE_EXECUTION (APPLIED).
	IdemReleasedBeforeExecution IdemReleaseStatus = iota + 1
	// IdemAlreadyReleasedSameOperation is ALREADY_RELEASED_SAME_OPERATION
	// (APPLIED).
	IdemAlreadyReleasedSameOperation
	// IdemReleaseAbsent is ABSENT (NOT_APPLIED).
	IdemReleaseAbsent
	// IdemReleaseNotOwner is NOT_OWNER (CONFLICT).
	IdemReleaseNotOwner
	// IdemReleaseExecutionAlreadyStarted is EXECUTION_ALREADY_STARTED
	// (CONFLICT): the record is past CLAIMED and stays.
	IdemReleaseExecutionAlreadyStarted
	// IdemReleaseOperationConflict is OPERATION_CONFLICT (CONFLICT).
	IdemReleaseOperationConflict
	// IdemReleaseWrongType is WRONG_TYPE (REJECTED).
	IdemReleaseWrongType
	// IdemReleaseInvalid is INVALID (REJECTED).
	IdemReleaseInvalid
)

func idemReleaseStatuses() []statusDef {
	return []statusDef{
		{"RELEASED_BEFORE_EXECUTION", certainty.Applied},
		{"ALREADY_RELEASED_SAME_OPERATION", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"EXECUTION_ALREADY_STARTED", certainty.Conflict},
		{"OPERATION_CONFLICT", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s IdemReleaseStatus) String() string { return statusName(idemReleaseStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s IdemReleaseStatus) Outcome() certainty.Outcome {
	return statusOutcome(idemReleaseStatuses(), uint8(s))
}

func idemReleaseShapes() []idemShape {
	return []idemShape{
		{states: stateSet(IdemStateReleased), ttl: ruleAny, owned: true},
		{states: stateSet(IdemStateReleased), ttl: ruleAny, owned: true},
		{}, {},
		{states: stateSet(IdemStateExecuting, IdemStateCompleted, IdemStateFailedRetryable, IdemStateAbandoned), owned: true},
		{}, {}, {},
	}
}

// IdempotencyRelease releases owner's claim before its action started
// (cancellation, or a failure proven to precede the action). Once the
// action started the record stays (EXECUTION_ALREADY_STARTED): deleting it
// would erase the evidence that prevents a duplicate execution.
func (e *Executor) IdempotencyRelease(ctx context.Context, record keys.Key, owner IdemOwner, operationID []byte) (IdemTransitionResult[IdemReleaseStatus], error) {
	const id = "idempotency-release-v1"
	r, err := e.run(ctx, id, []keys.Key{record}, owner.Owner, owner.Attempt, operationID)
	if err != nil {
		return IdemTransitionResult[IdemReleaseStatus]{}, err
	}
	return idemTransition(id, IdemReleaseStatus(r.status), &r, idemReleaseShapes(), idemWant{attempt: owner.Attempt})
}

// ---- reply checks ----

// idemRule is what a duration field may hold for a status.
type idemRule uint8

const (
	ruleZero idemRule = iota // exactly 0
	ruleSent                 // exactly the duration sent
	ruleLive                 // 1..MaxIdemTTL
	ruleAny                  // 0..MaxIdemTTL
)

// idemShape is what one status may carry. The zero shape is a reply that
// names no record: every field zero or empty.
type idemShape struct {
	states     uint8 // allowed IdemState bits; 0: IdemStateNone only
	lease, ttl idemRule
	response   bool  // a stored response (COMPLETED_REPLAY)
	minAttempt int64 // lowest attempt (default 1)
	owned      bool  // the attempt must be the owner handle's
}

func stateSet(s ...IdemState) uint8 {
	var m uint8
	for _, x := range s {
		m |= 1 << x
	}
	return m
}

// idemWant is what the request sent, for the checks.
type idemWant struct {
	lease, ttl time.Duration
	attempt    int64
	codec      string
}

func idemTransition[S idemTransitionStatus](id string, st S, r *reply, shapes []idemShape, want idemWant) (IdemTransitionResult[S], error) {
	rec, _, err := idemDecode(id, st, r, shapes[r.status-1], want)
	if err != nil {
		return IdemTransitionResult[S]{}, err
	}
	return IdemTransitionResult[S]{Status: st, ServerNowMillis: r.serverNow, Record: rec}, nil
}

// idemDecode reads the uniform result {state, attempt, stateRevision,
// leaseMillis, recordTtlMillis, responseVersion, codecId, responseDigest,
// response} and refuses any reply the status and the request rule out as
// ErrIncompatible.
func idemDecode(id string, st fmt.Stringer, r *reply, sh idemShape, want idemWant) (IdemRecord, IdemResponse, error) {
	bad := func(format string, a ...any) (IdemRecord, IdemResponse, error) {
		return IdemRecord{}, IdemResponse{}, &CompatibilityError{Program: id, Reason: st.String() + ": " + fmt.Sprintf(format, a...)}
	}
	state, att, rev, lease, ttl, ver := r.int(0), r.int(1), r.int(2), r.int(3), r.int(4), r.int(5)
	codec, digest, payload := r.bytes(6), r.bytes(7), r.bytes(8)
	if sh.states == 0 {
		if state != 0 || att != 0 || rev != 0 || lease != 0 || ttl != 0 || ver != 0 || len(codec)+len(digest)+len(payload) != 0 {
			return bad("discloses a record")
		}
		return IdemRecord{}, IdemResponse{}, nil
	}
	if state < 1 || state > int64(IdemStateReleased) || sh.states&(1<<state) == 0 {
		return bad("state %d", state)
	}
	minAttempt := max(sh.minAttempt, 1)
	if att < minAttempt || att > maxSafeInteger || rev < 1 || rev > maxSafeInteger {
		return bad("attempt %d, revision %d", att, rev)
	}
	if sh.owned && att != want.attempt {
		return bad("attempt %d, the handle's is %d", att, want.attempt)
	}
	if err := idemCheckRule(sh.lease, lease, want.lease); err != "" {
		return bad("lease %s", err)
	}
	if err := idemCheckRule(sh.ttl, ttl, want.ttl); err != "" {
		return bad("ttl %s", err)
	}
	rec := IdemRecord{State: IdemState(state), Attempt: att, StateRevision: rev,
		Lease: time.Duration(lease) * time.Millisecond, TTL: time.Duration(ttl) * time.Millisecond}
	if !sh.response {
		if ver != 0 || len(codec)+len(digest)+len(payload) != 0 {
			return bad("carries a response")
		}
		return rec, IdemResponse{}, nil
	}
	if ver < 1 || ver > maxSafeInteger || len(digest) < 16 || len(digest) > 128 || !reLowerHex.Match(digest) {
		return bad("response version %d, digest %q", ver, digest)
	}
	if string(codec) != want.codec {
		return bad("codec %q, requested %q", codec, want.codec)
	}
	return rec, IdemResponse{CodecID: string(codec), Version: ver, Digest: string(digest), Payload: payload}, nil
}

func idemCheckRule(rule idemRule, got int64, sent time.Duration) string {
	lo, hi := int64(0), int64(0)
	switch rule {
	case ruleSent:
		lo, hi = sent.Milliseconds(), sent.Milliseconds()
	case ruleLive:
		lo, hi = 1, MaxIdemTTL.Milliseconds()
	case ruleAny:
		hi = MaxIdemTTL.Milliseconds()
	}
	if got < lo || got > hi {
		return fmt.Sprintf("%d, want %d..%d", got, lo, hi)
	}
	return ""
}
