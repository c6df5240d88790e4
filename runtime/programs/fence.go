package programs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// MaxFenceInteger bounds every epoch, counter, watermark and threshold of
// the fenced programs: 2^53-1, so Lua numbers stay exact. It is the
// program-side hard bound; the configured hard-fail threshold lies below it.
const MaxFenceInteger = 1<<53 - 1

// FenceRegistration is a fenced resource's durable registration, owned by
// the protected store (not by Redis): the epoch the resource was activated
// under and its registration digest. A Redis caller cannot raise the epoch;
// the counter key carries both and every fenced program compares them.
type FenceRegistration struct {
	// Epoch is the resource epoch, 1..MaxFenceInteger; a reused resource id
	// never reuses an epoch.
	Epoch int64
	// Digest is the registration digest, 16..128 lower-case hex characters.
	Digest string
}

// FencingToken is a fenced lease's token (resource epoch, counter). The
// protected resource rejects a token not above the last it accepted:
// a lower epoch, or the same epoch and a counter not above.
type FencingToken struct {
	Epoch   int64
	Counter int64
}

// IsZero reports the zero token (no token reported).
func (t FencingToken) IsZero() bool { return t == FencingToken{} }

// Less reports whether t orders before u (epoch first, then counter).
func (t FencingToken) Less(u FencingToken) bool {
	return t.Epoch < u.Epoch || (t.Epoch == u.Epoch && t.Counter < u.Counter)
}

// String renders the token as "epoch:counter".
func (t FencingToken) String() string {
	return strconv.FormatInt(t.Epoch, 10) + ":" + strconv.FormatInt(t.Counter, 10)
}

// FenceProvisionStatus is the status enum of fenced-counter-provision-v1.
type FenceProvisionStatus uint8

// Statuses of fenced-counter-provision-v1 (codes as in the manifest).
const (
	// FenceProvisioned is PROVISIONED (code 1, APPLIED): the counter was
	// created at the durable high watermark, without a TTL.
	FenceProvisioned FenceProvisionStatus = iota + 1
	// FenceAlreadySame is ALREADY_SAME (code 2, APPLIED): the counter holds
	// this registration at or above the watermark (a repeat, or a later
	// reconcile); nothing was written.
	FenceAlreadySame
	// FenceProvisionRegistrationConflict is REGISTRATION_CONFLICT (code 3,
	// CONFLICT): the counter holds another epoch or digest; nothing written.
	FenceProvisionRegistrationConflict
	// FenceProvisionRegression is REGRESSION (code 4, REJECTED): the counter
	// holds this registration below the durable watermark (it lost
	// increments the protected store saw); nothing written: fail closed,
	// operator recovery.
	FenceProvisionRegression
	// FenceProvisionWrongType is WRONG_TYPE (code 5, REJECTED): another
	// type, a string that is no counter, or a counter with a TTL.
	FenceProvisionWrongType
	// FenceProvisionInvalid is INVALID (code 6, REJECTED).
	FenceProvisionInvalid
)

func fenceProvisionStatuses() []statusDef {
	return []statusDef{
		{"PROVISIONED", certainty.Applied},
		{"ALREADY_SAME", certainty.Applied},
		{"REGISTRATION_CONFLICT", certainty.Conflict},
		{"REGRESSION", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s FenceProvisionStatus) String() string { return statusName(fenceProvisionStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s FenceProvisionStatus) Outcome() certainty.Outcome {
	return statusOutcome(fenceProvisionStatuses(), uint8(s))
}

// FencedAcquireStatus is the status enum of fenced-lease-acquire-v1.
type FencedAcquireStatus uint8

// Statuses of fenced-lease-acquire-v1 (codes as in the manifest).
const (
	// FencedAcquired is ACQUIRED (code 1, APPLIED): the counter went up by
	// one and the attempt holds the lease with the new token.
	FencedAcquired FencedAcquireStatus = iota + 1
	// FencedReplayedSameOperation is REPLAYED_SAME_OPERATION (code 2,
	// APPLIED): the attempt already holds the lease; its token and the
	// remaining PTTL, no increment, not extended.
	FencedReplayedSameOperation
	// FencedContended is CONTENDED (code 3, CONFLICT): another owner holds
	// the lease; PTTL is the retry-after.
	FencedContended
	// FencedOwnerOperationConflict is OWNER_OPERATION_CONFLICT (code 4,
	// CONFLICT).
	FencedOwnerOperationConflict
	// FencedAcquireCounterMissing is FENCE_COUNTER_MISSING (code 5,
	// REJECTED): no counter; never created on the request path.
	FencedAcquireCounterMissing
	// FencedAcquireEpochMismatch is EPOCH_MISMATCH (code 6, CONFLICT).
	FencedAcquireEpochMismatch
	// FencedAcquireRegistrationConflict is REGISTRATION_CONFLICT (code 7,
	// CONFLICT).
	FencedAcquireRegistrationConflict
	// FencedAcquireRegression is FENCE_REGRESSION (code 8, REJECTED): the
	// counter is below a live lease's token.
	FencedAcquireRegression
	// FencedAcquireExhausted is FENCE_EXHAUSTED (code 9, REJECTED): the
	// next counter would exceed the hard-fail threshold.
	FencedAcquireExhausted
	// FencedAcquireWrongType is WRONG_TYPE (code 10, REJECTED).
	FencedAcquireWrongType
	// FencedAcquireInvalid is INVALID (code 11, REJECTED).
	FencedAcquireInvalid
)

func fencedAcquireStatuses() []statusDef {
	return []statusDef{
		{"ACQUIRED", certainty.Applied},
		{"REPLAYED_SAME_OPERATION", certainty.Applied},
		{"CONTENDED", certainty.Conflict},
		{"OWNER_OPERATION_CONFLICT", certainty.Conflict},
		{"FENCE_COUNTER_MISSING", certainty.Rejected},
		{"EPOCH_MISMATCH", certainty.Conflict},
		{"REGISTRATION_CONFLICT", certainty.Conflict},
		{"FENCE_REGRESSION", certainty.Rejected},
		{"FENCE_EXHAUSTED", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s FencedAcquireStatus) String() string { return statusName(fencedAcquireStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s FencedAcquireStatus) Outcome() certainty.Outcome {
	return statusOutcome(fencedAcquireStatuses(), uint8(s))
}

// FencedInspectStatus is the status enum of fenced-lease-inspect-v1.
type FencedInspectStatus uint8

// Statuses of fenced-lease-inspect-v1 (codes as in the manifest).
const (
	// FencedOwned is OWNED (code 1, APPLIED): resource, owner and operation
	// all match a live record.
	FencedOwned FencedInspectStatus = iota + 1
	// FencedInspectAbsent is ABSENT (code 2, NOT_APPLIED).
	FencedInspectAbsent
	// FencedInspectNotOwner is NOT_OWNER (code 3, CONFLICT).
	FencedInspectNotOwner
	// FencedInspectOwnerOperationConflict is OWNER_OPERATION_CONFLICT (code
	// 4, CONFLICT).
	FencedInspectOwnerOperationConflict
	// FencedInspectCounterMissing is FENCE_COUNTER_MISSING (code 5, REJECTED).
	FencedInspectCounterMissing
	// FencedInspectEpochMismatch is EPOCH_MISMATCH (code 6, CONFLICT).
	FencedInspectEpochMismatch
	// FencedInspectRegistrationConflict is REGISTRATION_CONFLICT (code 7,
	// CONFLICT).
	FencedInspectRegistrationConflict
	// FencedInspectRegression is FENCE_REGRESSION (code 8, REJECTED).
	FencedInspectRegression
	// FencedInspectWrongType is WRONG_TYPE (code 9, REJECTED).
	FencedInspectWrongType
	// FencedInspectInvalid is INVALID (code 10, REJECTED).
	FencedInspectInvalid
)

func fencedInspectStatuses() []statusDef {
	return []statusDef{
		{"OWNED", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"OWNER_OPERATION_CONFLICT", certainty.Conflict},
		{"FENCE_COUNTER_MISSING", certainty.Rejected},
		{"EPOCH_MISMATCH", certainty.Conflict},
		{"REGISTRATION_CONFLICT", certainty.Conflict},
		{"FENCE_REGRESSION", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s FencedInspectStatus) String() string { return statusName(fencedInspectStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s FencedInspectStatus) Outcome() certainty.Outcome {
	return statusOutcome(fencedInspectStatuses(), uint8(s))
}

// FencedRenewStatus is the status enum of fenced-lease-renew-v1.
type FencedRenewStatus uint8

// Statuses of fenced-lease-renew-v1 (codes as in the manifest).
const (
	// FencedRenewed is RENEWED (code 1, APPLIED): the TTL is now the TTL sent.
	FencedRenewed FencedRenewStatus = iota + 1
	// FencedRenewAbsent is ABSENT (code 2, NOT_APPLIED): the lease is lost.
	FencedRenewAbsent
	// FencedRenewNotOwner is NOT_OWNER (code 3, CONFLICT): another owner
	// holds it; the lease is lost.
	FencedRenewNotOwner
	// FencedRenewTokenMismatch is TOKEN_MISMATCH (code 4, CONFLICT): the
	// owner holds it under another token (a later acquisition).
	FencedRenewTokenMismatch
	// FencedRenewEpochMismatch is EPOCH_MISMATCH (code 5, CONFLICT).
	FencedRenewEpochMismatch
	// FencedRenewRegistrationConflict is REGISTRATION_CONFLICT (code 6,
	// CONFLICT).
	FencedRenewRegistrationConflict
	// FencedRenewCounterMissing is FENCE_COUNTER_MISSING (code 7, REJECTED).
	FencedRenewCounterMissing
	// FencedRenewRegression is FENCE_REGRESSION (code 8, REJECTED).
	FencedRenewRegression
	// FencedRenewWrongType is WRONG_TYPE (code 9, REJECTED).
	FencedRenewWrongType
	// FencedRenewInvalid is INVALID (code 10, REJECTED).
	FencedRenewInvalid
)

// String returns the manifest name of the status.
func (s FencedRenewStatus) String() string {
	return statusName(fencedHoldStatuses("RENEWED"), uint8(s))
}

// Outcome returns the certainty the status reports.
func (s FencedRenewStatus) Outcome() certainty.Outcome {
	return statusOutcome(fencedHoldStatuses("RENEWED"), uint8(s))
}

// FencedReleaseStatus is the status enum of fenced-lease-release-v1.
type FencedReleaseStatus uint8

// Statuses of fenced-lease-release-v1 (codes as in the manifest).
const (
	// FencedReleased is RELEASED (code 1, APPLIED).
	FencedReleased FencedReleaseStatus = iota + 1
	// FencedReleaseAbsent is ABSENT (code 2, NOT_APPLIED): the desired
	// absence holds.
	FencedReleaseAbsent
	// FencedReleaseNotOwner is NOT_OWNER (code 3, CONFLICT): another owner
	// holds it, and keeps it.
	FencedReleaseNotOwner
	// FencedReleaseTokenMismatch is TOKEN_MISMATCH (code 4, CONFLICT).
	FencedReleaseTokenMismatch
	// FencedReleaseEpochMismatch is EPOCH_MISMATCH (code 5, CONFLICT).
	FencedReleaseEpochMismatch
	// FencedReleaseRegistrationConflict is REGISTRATION_CONFLICT (code 6,
	// CONFLICT).
	FencedReleaseRegistrationConflict
	// FencedReleaseCounterMissing is FENCE_COUNTER_MISSING (code 7,
	// REJECTED).
	FencedReleaseCounterMissing
	// FencedReleaseRegression is FENCE_REGRESSION (code 8, REJECTED).
	FencedReleaseRegression
	// FencedReleaseWrongType is WRONG_TYPE (code 9, REJECTED).
	FencedReleaseWrongType
	// FencedReleaseInvalid is INVALID (code 10, REJECTED).
	FencedReleaseInvalid
)

// String returns the manifest name of the status.
func (s FencedReleaseStatus) String() string {
	return statusName(fencedHoldStatuses("RELEASED"), uint8(s))
}

// Outcome returns the certainty the status reports.
func (s FencedReleaseStatus) Outcome() certainty.Outcome {
	return statusOutcome(fencedHoldStatuses("RELEASED"), uint8(s))
}

// fencedHoldStatuses is the status table of fenced-lease-renew-v1 and
// fenced-lease-release-v1, which differ only in code 1.
func fencedHoldStatuses(applied string) []statusDef {
	return []statusDef{
		{applied, certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"TOKEN_MISMATCH", certainty.Conflict},
		{"EPOCH_MISMATCH", certainty.Conflict},
		{"REGISTRATION_CONFLICT", certainty.Conflict},
		{"FENCE_COUNTER_MISSING", certainty.Rejected},
		{"FENCE_REGRESSION", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// Wire codes shared by the renew and release statuses (FencedRenewStatus
// and FencedReleaseStatus have the same codes).
const (
	holdApplied uint8 = iota + 1
	holdAbsent
	holdNotOwner
	holdTokenMismatch
	holdEpochMismatch
	holdRegistrationConflict
	holdCounterMissing
	holdRegression
)

// FenceProvisionResult is the result of fenced-counter-provision-v1: the
// read-back receipt the provisioning reconciler verifies before it marks
// the registration ACTIVE.
type FenceProvisionResult struct {
	Status FenceProvisionStatus
	// ServerNowMillis is 0: the program reads no clock.
	ServerNowMillis int64
	// Fence is the counter key's (epoch, counter) after the call; zero on
	// WRONG_TYPE and INVALID.
	Fence FencingToken
	// Digest is the counter key's registration digest ("" on WRONG_TYPE
	// and INVALID).
	Digest string
}

// Outcome returns the certainty of the call.
func (r FenceProvisionResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// FenceCounterProvision creates the fence counter of a registered resource
// at the durable high watermark (0 for a new resource), without a TTL, or
// reports what the counter holds. It never overwrites or lowers a counter.
// Run it from the provisioning reconciler (PENDING -> ACTIVE), never on
// the request path.
func (e *Executor) FenceCounterProvision(ctx context.Context, counter keys.Key, reg FenceRegistration, highWatermark int64) (FenceProvisionResult, error) {
	const id = "fenced-counter-provision-v1"
	r, err := e.run(ctx, id, []keys.Key{counter}, strconv.FormatInt(reg.Epoch, 10), reg.Digest, strconv.FormatInt(highWatermark, 10))
	if err != nil {
		return FenceProvisionResult{}, err
	}
	return fenceProvisionResult(id, &r, reg, highWatermark)
}

func fenceProvisionResult(id string, r *reply, reg FenceRegistration, mark int64) (FenceProvisionResult, error) {
	res := FenceProvisionResult{Status: FenceProvisionStatus(r.status), ServerNowMillis: r.serverNow,
		Fence: FencingToken{Epoch: r.int(0), Counter: r.int(1)}, Digest: string(r.bytes(2))}
	same := res.Fence.Epoch == reg.Epoch && res.Digest == reg.Digest
	var ok bool
	switch res.Status {
	case FenceProvisioned:
		ok = same && res.Fence.Counter == mark
	case FenceAlreadySame:
		ok = same && res.Fence.Counter >= mark
	case FenceProvisionRegistrationConflict:
		ok = !same && res.Fence.Epoch >= 1 && res.Digest != ""
	case FenceProvisionRegression:
		ok = same && res.Fence.Counter < mark
	default:
		ok = res.Fence.IsZero() && res.Digest == ""
	}
	if !ok || res.Fence.Counter < 0 || res.Fence.Counter > MaxFenceInteger {
		return FenceProvisionResult{}, &CompatibilityError{Program: id,
			Reason: fmt.Sprintf("%s with fence %s digest %q (sent epoch %d, watermark %d)", res.Status, res.Fence, res.Digest, reg.Epoch, mark)}
	}
	return res, nil
}

// FencedLeaseState is what a fenced lease program reports besides its
// status.
type FencedLeaseState struct {
	// Token is the attempt's fencing token: the new one on ACQUIRED, the
	// held one on REPLAYED_SAME_OPERATION, OWNED, RENEWED and RELEASED;
	// zero otherwise (another owner's token is never reported).
	Token FencingToken
	// PTTL is the lease's remaining TTL: the TTL sent on ACQUIRED and
	// RENEWED, what is left on REPLAYED_SAME_OPERATION (not extended) and
	// OWNED, the holder's on CONTENDED and OWNER_OPERATION_CONFLICT (the
	// retry-after); 0 otherwise.
	PTTL time.Duration
	// Fence is the counter key's (epoch, counter) whenever the program read
	// it (zero on FENCE_COUNTER_MISSING, WRONG_TYPE and INVALID): after the
	// increment on ACQUIRED; the other epoch on EPOCH_MISMATCH; the value
	// under a live token on FENCE_REGRESSION (for the regression alert).
	Fence FencingToken
}

// FencedAcquireResult is the result of fenced-lease-acquire-v1.
type FencedAcquireResult struct {
	Status          FencedAcquireStatus
	ServerNowMillis int64
	FencedLeaseState
}

// Outcome returns the certainty of the call.
func (r FencedAcquireResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// RetryAfter is the holder's PTTL on CONTENDED, else 0.
func (r FencedAcquireResult) RetryAfter() time.Duration {
	if r.Status == FencedContended {
		return r.PTTL
	}
	return 0
}

// FencedLeaseAcquireRequest is one fenced-lease-acquire-v1 call.
type FencedLeaseAcquireRequest struct {
	// Registration is the resource's ACTIVE durable registration.
	Registration FenceRegistration
	// Attempt is minted before the first send and reused to repeat.
	Attempt LeaseAttempt
	// TTL is the lease TTL, 1 ms..30 days.
	TTL time.Duration
	// HardFailThreshold (1..MaxFenceInteger) is the highest counter the
	// acquire may issue; above it FENCE_EXHAUSTED.
	HardFailThreshold int64
}

// FencedLeaseAcquire acquires the fenced lease of a resource: owner (the
// lease record) and counter (the fence counter) must share a slot
// (ErrCrossSlot before sending otherwise; build both with one
// keys.Builder.Group call of keys.CapFence). Repeating the same attempt is
// safe (REPLAYED_SAME_OPERATION, the same token, no increment).
func (e *Executor) FencedLeaseAcquire(ctx context.Context, owner, counter keys.Key, req FencedLeaseAcquireRequest) (FencedAcquireResult, error) {
	const id = "fenced-lease-acquire-v1"
	if err := sameSlot(id, owner, counter); err != nil {
		return FencedAcquireResult{}, err
	}
	reg := req.Registration
	r, err := e.run(ctx, id, []keys.Key{owner, counter}, strconv.FormatInt(reg.Epoch, 10), reg.Digest,
		req.Attempt.Owner, millis(req.TTL), req.Attempt.OperationID, strconv.FormatInt(req.HardFailThreshold, 10))
	if err != nil {
		return FencedAcquireResult{}, err
	}
	return fencedAcquireResult(id, &r, req)
}

// fencedAcquireResult decodes and checks a fenced-lease-acquire-v1 reply.
func fencedAcquireResult(id string, r *reply, req FencedLeaseAcquireRequest) (FencedAcquireResult, error) {
	reg := req.Registration
	res := FencedAcquireResult{Status: FencedAcquireStatus(r.status), ServerNowMillis: r.serverNow, FencedLeaseState: fencedState(r)}
	var shape fencedShape
	switch res.Status {
	case FencedAcquired:
		ttl := req.TTL.Milliseconds()
		shape = fencedShape{token: true, lo: ttl, hi: ttl, fence: fenceSameEpoch}
		if res.Fence != res.Token {
			return FencedAcquireResult{}, fencedIncompatible(id, res.Status, res.FencedLeaseState, "the counter is not the new token")
		}
	case FencedReplayedSameOperation:
		shape = fencedShape{token: true, hi: MaxLeaseTTL.Milliseconds(), fence: fenceSameEpoch}
	case FencedContended, FencedOwnerOperationConflict:
		shape = fencedShape{hi: MaxLeaseTTL.Milliseconds(), fence: fenceSameEpoch}
	case FencedAcquireEpochMismatch:
		shape = fencedShape{fence: fenceOtherEpoch}
	case FencedAcquireRegistrationConflict, FencedAcquireRegression, FencedAcquireExhausted:
		shape = fencedShape{fence: fenceSameEpoch}
	}
	if err := shape.check(id, res.Status, res.FencedLeaseState, reg); err != nil {
		return FencedAcquireResult{}, err
	}
	return res, nil
}

// FencedInspectResult is the result of fenced-lease-inspect-v1.
type FencedInspectResult struct {
	Status          FencedInspectStatus
	ServerNowMillis int64
	FencedLeaseState
}

// Outcome returns the certainty of the call.
func (r FencedInspectResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// FencedLeaseInspect reports the attempt's token and remaining TTL only
// while resource, owner and operation all match a live record (OWNED). It
// writes nothing (FCALL_RO in functions-provisioned mode).
func (e *Executor) FencedLeaseInspect(ctx context.Context, owner, counter keys.Key, reg FenceRegistration, attempt LeaseAttempt) (FencedInspectResult, error) {
	const id = "fenced-lease-inspect-v1"
	if err := sameSlot(id, owner, counter); err != nil {
		return FencedInspectResult{}, err
	}
	r, err := e.run(ctx, id, []keys.Key{owner, counter}, strconv.FormatInt(reg.Epoch, 10), reg.Digest, attempt.Owner, attempt.OperationID)
	if err != nil {
		return FencedInspectResult{}, err
	}
	res := FencedInspectResult{Status: FencedInspectStatus(r.status), ServerNowMillis: r.serverNow, FencedLeaseState: fencedState(&r)}
	var shape fencedShape
	switch res.Status {
	case FencedOwned:
		shape = fencedShape{token: true, hi: MaxLeaseTTL.Milliseconds(), fence: fenceSameEpoch}
	case FencedInspectAbsent, FencedInspectNotOwner, FencedInspectOwnerOperationConflict,
		FencedInspectRegistrationConflict, FencedInspectRegression:
		shape = fencedShape{fence: fenceSameEpoch}
	case FencedInspectEpochMismatch:
		shape = fencedShape{fence: fenceOtherEpoch}
	}
	if err := shape.check(id, res.Status, res.FencedLeaseState, reg); err != nil {
		return FencedInspectResult{}, err
	}
	return res, nil
}

// FencedLeaseHold names a held fenced lease for renew and release: the
// registration, the owner token and the counter of the token the acquire
// (or inspect) reported; the token is (Registration.Epoch, Counter).
type FencedLeaseHold struct {
	Registration FenceRegistration
	Owner        []byte
	Counter      int64
}

// FencedRenewResult is the result of fenced-lease-renew-v1.
type FencedRenewResult struct {
	Status          FencedRenewStatus
	ServerNowMillis int64
	FencedLeaseState
}

// Outcome returns the certainty of the call.
func (r FencedRenewResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// FencedReleaseResult is the result of fenced-lease-release-v1.
type FencedReleaseResult struct {
	Status          FencedReleaseStatus
	ServerNowMillis int64
	FencedLeaseState
}

// Outcome returns the certainty of the call.
func (r FencedReleaseResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// FencedLeaseRenew sets the held lease's TTL to ttl (reported in PTTL) only
// while hold's owner holds it under hold's token. A timeout leaves the
// handle UNKNOWN/LOST: no automatic retry.
func (e *Executor) FencedLeaseRenew(ctx context.Context, owner, counter keys.Key, hold FencedLeaseHold, ttl time.Duration) (FencedRenewResult, error) {
	const id = "fenced-lease-renew-v1"
	st, err := e.fencedHold(ctx, id, owner, counter, hold, ttl, millis(ttl))
	if err != nil {
		return FencedRenewResult{}, err
	}
	return FencedRenewResult{Status: FencedRenewStatus(st.status), ServerNowMillis: st.serverNow, FencedLeaseState: st.state}, nil
}

// FencedLeaseRelease deletes the held lease only while hold's owner holds
// it under hold's token; the counter is never touched. After a timeout,
// repeating it (ABSENT) or inspecting reconciles.
func (e *Executor) FencedLeaseRelease(ctx context.Context, owner, counter keys.Key, hold FencedLeaseHold) (FencedReleaseResult, error) {
	const id = "fenced-lease-release-v1"
	st, err := e.fencedHold(ctx, id, owner, counter, hold, 0)
	if err != nil {
		return FencedReleaseResult{}, err
	}
	return FencedReleaseResult{Status: FencedReleaseStatus(st.status), ServerNowMillis: st.serverNow, FencedLeaseState: st.state}, nil
}

type fencedHoldReply struct {
	status    uint8
	serverNow int64
	state     FencedLeaseState
}

// fencedHold runs renew (ttl > 0, one more argument) or release and checks
// the reply against hold.
func (e *Executor) fencedHold(ctx context.Context, id string, owner, counter keys.Key, hold FencedLeaseHold, ttl time.Duration, extra ...any) (fencedHoldReply, error) {
	if err := sameSlot(id, owner, counter); err != nil {
		return fencedHoldReply{}, err
	}
	reg := hold.Registration
	args := append([]any{strconv.FormatInt(reg.Epoch, 10), reg.Digest, hold.Owner, strconv.FormatInt(hold.Counter, 10)}, extra...)
	r, err := e.run(ctx, id, []keys.Key{owner, counter}, args...)
	if err != nil {
		return fencedHoldReply{}, err
	}
	out := fencedHoldReply{status: uint8(r.status), serverNow: r.serverNow, state: fencedState(&r)}
	return out, checkFencedHold(id, out, hold, ttl)
}

func checkFencedHold(id string, out fencedHoldReply, hold FencedLeaseHold, ttl time.Duration) error {
	status := FencedRenewStatus(out.status).String()
	if ttl == 0 {
		status = FencedReleaseStatus(out.status).String()
	}
	var shape fencedShape
	switch out.status {
	case holdApplied:
		shape = fencedShape{token: true, lo: ttl.Milliseconds(), hi: ttl.Milliseconds(), fence: fenceSameEpoch}
		if out.state.Token.Counter != hold.Counter {
			return fencedIncompatible(id, status, out.state, "another token than the hold's")
		}
	case holdAbsent, holdNotOwner, holdTokenMismatch, holdRegistrationConflict, holdRegression:
		shape = fencedShape{fence: fenceSameEpoch}
	case holdEpochMismatch:
		shape = fencedShape{fence: fenceOtherEpoch}
	}
	return shape.check(id, status, out.state, hold.Registration)
}

// fencedState decodes the common result fields {epoch, counter,
// pttlMillis, fenceEpoch, fenceCounter}.
func fencedState(r *reply) FencedLeaseState {
	return FencedLeaseState{
		Token: FencingToken{Epoch: r.int(0), Counter: r.int(1)},
		PTTL:  time.Duration(r.int(2)) * time.Millisecond,
		Fence: FencingToken{Epoch: r.int(3), Counter: r.int(4)},
	}
}

// Fence expectations of a status.
const (
	fenceNone       = iota // counter not read: zero
	fenceSameEpoch         // the counter carries the registration's epoch
	fenceOtherEpoch        // the counter carries another epoch
)

// fencedShape is what a status admits in the common result fields; the
// zero shape (no token, PTTL 0, no counter) is that of
// FENCE_COUNTER_MISSING, WRONG_TYPE and INVALID.
type fencedShape struct {
	token  bool  // a token of the registration's epoch, counter 1..fence counter
	lo, hi int64 // PTTL bounds, ms
	fence  int
}

func (s fencedShape) check(id string, status any, st FencedLeaseState, reg FenceRegistration) error {
	pttl := st.PTTL.Milliseconds()
	var problem string
	switch {
	case pttl < s.lo || pttl > s.hi:
		problem = fmt.Sprintf("pttl outside %d..%d", s.lo, s.hi)
	case s.token && (st.Token.Epoch != reg.Epoch || st.Token.Counter < 1 || st.Token.Counter > st.Fence.Counter):
		problem = "a token outside the registration's epoch or above the counter"
	case !s.token && !st.Token.IsZero():
		problem = "a token on a status that has none"
	case s.fence == fenceNone && !st.Fence.IsZero():
		problem = "a counter on a status that read none"
	case s.fence == fenceSameEpoch && st.Fence.Epoch != reg.Epoch:
		problem = "a counter of another epoch"
	case s.fence == fenceOtherEpoch && (st.Fence.Epoch < 1 || st.Fence.Epoch == reg.Epoch):
		problem = "no other epoch on EPOCH_MISMATCH"
	case st.Fence.Counter < 0 || st.Fence.Counter > MaxFenceInteger:
		problem = "a counter out of range"
	}
	if problem != "" {
		return fencedIncompatible(id, status, st, problem)
	}
	return nil
}

func fencedIncompatible(id string, status any, st FencedLeaseState, problem string) error {
	return &CompatibilityError{Program: id, Reason: fmt.Sprintf("%s with token %s, pttl %d, fence %s: %s",
		status, st.Token, st.PTTL.Milliseconds(), st.Fence, problem)}
}

// sameSlot refuses, before anything is sent, two keys of one program call
// that are in different Cluster slots (on standalone too, so a key layout
// bug shows before it meets a Cluster).
func sameSlot(id string, a, b keys.Key) error {
	if !a.IsZero() && !b.IsZero() && a.Slot() != b.Slot() {
		return &Error{Program: id, Err: ErrCrossSlot}
	}
	return nil
}
