package programs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// MaxLeaseTTL is the longest TTL the lease programs accept (the catalog's
// maxTtlMillis, 30 days).
const MaxLeaseTTL = 2_592_000_000 * time.Millisecond

// LeaseAttempt identifies one acquisition attempt of an efficiency or a
// fenced lease: the owner token and the operation id. The caller mints both
// before the first send (the owner token from a secure random source) and
// reuses them to repeat, inspect, renew and release; a retry after a lost
// reply with a new token would contend with itself. The stored lease names
// the attempt, so a repeat of the same attempt is told apart from the same
// owner under another operation.
type LeaseAttempt struct {
	// Owner is the owner token, 1..128 bytes.
	Owner []byte
	// OperationID is the operation the lease is for, 1..128 bytes.
	OperationID []byte
}

// LeaseAcquireStatus is the status enum of lease-acquire-v1.
type LeaseAcquireStatus uint8

// Statuses of lease-acquire-v1 (codes as in the manifest).
const (
	// LeaseAcquired is ACQUIRED (code 1, APPLIED): the lease was free and
	// is now held by the attempt for the TTL sent.
	LeaseAcquired LeaseAcquireStatus = iota + 1
	// LeaseReplayedSameOperation is REPLAYED_SAME_OPERATION (code 2,
	// APPLIED): the attempt already holds the lease (a repeat after a lost
	// reply); the TTL was not extended and PTTL is what remains of it.
	LeaseReplayedSameOperation
	// LeaseContended is CONTENDED (code 3, CONFLICT): another owner holds
	// the lease; PTTL (RetryAfter) is what remains of it.
	LeaseContended
	// LeaseOwnerOperationConflict is OWNER_OPERATION_CONFLICT (code 4,
	// CONFLICT): the same owner holds the lease for another operation.
	LeaseOwnerOperationConflict
	// LeaseAcquireWrongType is WRONG_TYPE (code 5, REJECTED): the key holds
	// another type, a string that is no lease envelope, or an envelope
	// without a TTL.
	LeaseAcquireWrongType
	// LeaseAcquireInvalid is INVALID (code 6, REJECTED).
	LeaseAcquireInvalid
)

func leaseAcquireStatuses() []statusDef {
	return []statusDef{
		{"ACQUIRED", certainty.Applied},
		{"REPLAYED_SAME_OPERATION", certainty.Applied},
		{"CONTENDED", certainty.Conflict},
		{"OWNER_OPERATION_CONFLICT", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s LeaseAcquireStatus) String() string { return statusName(leaseAcquireStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s LeaseAcquireStatus) Outcome() certainty.Outcome {
	return statusOutcome(leaseAcquireStatuses(), uint8(s))
}

// LeaseInspectStatus is the status enum of lease-inspect-v1.
type LeaseInspectStatus uint8

// Statuses of lease-inspect-v1 (codes as in the manifest).
const (
	// LeaseOwned is OWNED (code 1, APPLIED): the attempt holds the lease.
	LeaseOwned LeaseInspectStatus = iota + 1
	// LeaseInspectAbsent is ABSENT (code 2, NOT_APPLIED): nobody holds it.
	LeaseInspectAbsent
	// LeaseInspectNotOwner is NOT_OWNER (code 3, CONFLICT): another owner
	// holds it.
	LeaseInspectNotOwner
	// LeaseInspectOwnerOperationConflict is OWNER_OPERATION_CONFLICT (code
	// 4, CONFLICT): the same owner holds it for another operation.
	LeaseInspectOwnerOperationConflict
	// LeaseInspectWrongType is WRONG_TYPE (code 5, REJECTED).
	LeaseInspectWrongType
	// LeaseInspectInvalid is INVALID (code 6, REJECTED).
	LeaseInspectInvalid
)

func leaseInspectStatuses() []statusDef {
	return []statusDef{
		{"OWNED", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"OWNER_OPERATION_CONFLICT", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s LeaseInspectStatus) String() string { return statusName(leaseInspectStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s LeaseInspectStatus) Outcome() certainty.Outcome {
	return statusOutcome(leaseInspectStatuses(), uint8(s))
}

// LeaseRenewStatus is the status enum of lease-renew-v1.
type LeaseRenewStatus uint8

// Statuses of lease-renew-v1 (codes as in the manifest).
const (
	// LeaseRenewed is RENEWED (code 1, APPLIED): the lease's TTL is now the
	// TTL sent.
	LeaseRenewed LeaseRenewStatus = iota + 1
	// LeaseRenewAbsent is ABSENT (code 2, NOT_APPLIED): the lease expired
	// or was released; the attempt has lost it.
	LeaseRenewAbsent
	// LeaseRenewNotOwner is NOT_OWNER (code 3, CONFLICT): another attempt
	// (another owner, or the same owner under another operation) holds it;
	// the attempt has lost it.
	LeaseRenewNotOwner
	// LeaseRenewWrongType is WRONG_TYPE (code 4, REJECTED).
	LeaseRenewWrongType
	// LeaseRenewInvalid is INVALID (code 5, REJECTED).
	LeaseRenewInvalid
)

func leaseRenewStatuses() []statusDef {
	return []statusDef{
		{"RENEWED", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s LeaseRenewStatus) String() string { return statusName(leaseRenewStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s LeaseRenewStatus) Outcome() certainty.Outcome {
	return statusOutcome(leaseRenewStatuses(), uint8(s))
}

// LeaseReleaseStatus is the status enum of lease-release-v1.
type LeaseReleaseStatus uint8

// Statuses of lease-release-v1 (codes as in the manifest).
const (
	// LeaseReleased is RELEASED (code 1, APPLIED).
	LeaseReleased LeaseReleaseStatus = iota + 1
	// LeaseReleaseAbsent is ABSENT (code 2, NOT_APPLIED): already gone (the
	// desired absence holds).
	LeaseReleaseAbsent
	// LeaseReleaseNotOwner is NOT_OWNER (code 3, CONFLICT): another attempt
	// holds the lease, which stays.
	LeaseReleaseNotOwner
	// LeaseReleaseWrongType is WRONG_TYPE (code 4, REJECTED).
	LeaseReleaseWrongType
	// LeaseReleaseInvalid is INVALID (code 5, REJECTED).
	LeaseReleaseInvalid
)

func leaseReleaseStatuses() []statusDef {
	return []statusDef{
		{"RELEASED", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s LeaseReleaseStatus) String() string { return statusName(leaseReleaseStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s LeaseReleaseStatus) Outcome() certainty.Outcome {
	return statusOutcome(leaseReleaseStatuses(), uint8(s))
}

// LeaseAcquireResult is the result of lease-acquire-v1.
type LeaseAcquireResult struct {
	Status LeaseAcquireStatus
	// ServerNowMillis is 0: the program reads no clock.
	ServerNowMillis int64
	// PTTL is the lease's remaining TTL on the server: the TTL sent on
	// ACQUIRED, what is left of it on REPLAYED_SAME_OPERATION (a replay
	// does not extend it, so validity must be computed from this, not from
	// the TTL of the first attempt), the holder's remaining TTL on
	// CONTENDED and OWNER_OPERATION_CONFLICT; 0 otherwise.
	PTTL time.Duration
}

// Outcome returns the certainty of the call.
func (r LeaseAcquireResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// RetryAfter is the wait until the contended lease expires (the holder's
// PTTL) on CONTENDED, else 0.
func (r LeaseAcquireResult) RetryAfter() time.Duration {
	if r.Status == LeaseContended {
		return r.PTTL
	}
	return 0
}

// LeaseAcquire acquires the efficiency lease for attempt with ttl, or
// reports who holds it. It never waits: a bounded wait is the caller's
// backoff on RetryAfter. Repeating the same attempt after a timeout is safe
// (REPLAYED_SAME_OPERATION with the remaining PTTL).
func (e *Executor) LeaseAcquire(ctx context.Context, lease keys.Key, attempt LeaseAttempt, ttl time.Duration) (LeaseAcquireResult, error) {
	const id = "lease-acquire-v1"
	r, err := e.run(ctx, id, []keys.Key{lease}, attempt.Owner, millis(ttl), attempt.OperationID)
	if err != nil {
		return LeaseAcquireResult{}, err
	}
	return leaseAcquireResult(id, &r, ttl)
}

// LeaseAcquireV2 is LeaseAcquire with lease-acquire-v2: the same
// arguments, envelope, statuses and result in fewer Redis calls (a free
// lease is one SET NX PX). v1 and v2 callers may share a lease key, so a
// rolling upgrade mixes them safely.
func (e *Executor) LeaseAcquireV2(ctx context.Context, lease keys.Key, attempt LeaseAttempt, ttl time.Duration) (LeaseAcquireResult, error) {
	return leaseAcquireV2Call(ctx, e, lease, attempt, ttl)
}

// LeaseAcquire is Executor.LeaseAcquireV2, batched: acquires that arrive
// while the Batcher's sends are in flight leave together as one pipeline,
// each still its own atomic call with its own status and certainty.
func (b *Batcher) LeaseAcquire(ctx context.Context, lease keys.Key, attempt LeaseAttempt, ttl time.Duration) (LeaseAcquireResult, error) {
	return leaseAcquireV2Call(ctx, b, lease, attempt, ttl)
}

// The v2 lease programs run on the integer-only path (their results are
// one integer each).
const (
	leaseAcquireV2 = "lease-acquire-v2"
	leaseReleaseV2 = "lease-release-v2"
)

func leaseAcquireV2Call(ctx context.Context, s intsSender, lease keys.Key, attempt LeaseAttempt, ttl time.Duration) (LeaseAcquireResult, error) {
	r, err := sendFast(ctx, s, s.executor().leaseAcquireV2, leaseAcquireV2, []keys.Key{lease}, attempt.Owner, ttl.Milliseconds(), attempt.OperationID)
	if err != nil {
		return LeaseAcquireResult{}, err
	}
	return leaseAcquireResult(leaseAcquireV2, &r, ttl)
}

// The v3 lease programs take the envelope the host built and answer their
// fast path (ACQUIRED, RELEASED) with the bare integer 1.
const (
	leaseAcquireV3 = "lease-acquire-v3"
	leaseReleaseV3 = "lease-release-v3"
	// maxLeaseIDBytes bounds the owner and operation ids (the manifest's
	// maxBytes of v1 and v2; v3's envelope bound follows from it).
	maxLeaseIDBytes = 128
)

// LeaseAcquireV3 is LeaseAcquireV2 with lease-acquire-v3: the same key,
// stored envelope, statuses and result, but the host validates the attempt
// and the TTL and builds the envelope (an invalid one is INVALID without a
// send), and a free lease is answered by one SET NX PX and an integer
// reply. v1, v2 and v3 callers may share a lease key.
func (e *Executor) LeaseAcquireV3(ctx context.Context, lease keys.Key, attempt LeaseAttempt, ttl time.Duration) (LeaseAcquireResult, error) {
	return leaseAcquireV3Call(ctx, e, lease, attempt, ttl)
}

// LeaseAcquireV3 is Executor.LeaseAcquireV3, batched (see
// Batcher.LeaseAcquire).
func (b *Batcher) LeaseAcquireV3(ctx context.Context, lease keys.Key, attempt LeaseAttempt, ttl time.Duration) (LeaseAcquireResult, error) {
	return leaseAcquireV3Call(ctx, b, lease, attempt, ttl)
}

func leaseAcquireV3Call(ctx context.Context, s intsSender, lease keys.Key, attempt LeaseAttempt, ttl time.Duration) (LeaseAcquireResult, error) {
	env, ok := leaseEnvelope(attempt)
	ms := ttl.Milliseconds()
	if !ok || ms < 1 || ms > MaxLeaseTTL.Milliseconds() {
		// What v1 and v2 answer after sending: rejected, nothing written.
		return LeaseAcquireResult{Status: LeaseAcquireInvalid}, nil
	}
	r, err := sendFast(ctx, s, s.executor().leaseAcquireV3, leaseAcquireV3, []keys.Key{lease}, env, ms)
	if err != nil {
		return LeaseAcquireResult{}, err
	}
	if r.short {
		return LeaseAcquireResult{Status: LeaseAcquired, PTTL: time.Duration(ms) * time.Millisecond}, nil
	}
	return leaseAcquireResult(leaseAcquireV3, &r, ttl)
}

// leaseEnvelope builds the value every lease program version stores for
// the attempt, 'L1:' .. #owner .. ':' .. owner .. ':' .. operationId, or
// reports that the attempt's ids are outside 1..128 bytes. The v3 programs
// store and compare it as sent, so it is checked here, before any send.
func leaseEnvelope(a LeaseAttempt) ([]byte, bool) {
	no, nop := len(a.Owner), len(a.OperationID)
	if no < 1 || no > maxLeaseIDBytes || nop < 1 || nop > maxLeaseIDBytes {
		return nil, false
	}
	b := make([]byte, 0, len("L1:128::")+no+nop)
	b = append(b, "L1:"...)
	b = strconv.AppendInt(b, int64(no), 10)
	b = append(b, ':')
	b = append(b, a.Owner...)
	b = append(b, ':')
	return append(b, a.OperationID...), true
}

// leaseAcquireResult decodes r and checks its PTTL against the status and
// the TTL sent.
func leaseAcquireResult(id string, r *reply, ttl time.Duration) (LeaseAcquireResult, error) {
	var err error
	res := LeaseAcquireResult{Status: LeaseAcquireStatus(r.status), ServerNowMillis: r.serverNow}
	pttl := r.int(0)
	switch res.Status {
	case LeaseAcquired:
		err = wantPTTL(id, res.Status, pttl, ttl.Milliseconds(), ttl.Milliseconds())
	case LeaseReplayedSameOperation, LeaseContended, LeaseOwnerOperationConflict:
		err = wantPTTL(id, res.Status, pttl, 0, MaxLeaseTTL.Milliseconds())
	default:
		err = wantPTTL(id, res.Status, pttl, 0, 0)
	}
	if err != nil {
		return LeaseAcquireResult{}, err
	}
	res.PTTL = time.Duration(pttl) * time.Millisecond
	return res, nil
}

// LeaseInspectResult is the result of lease-inspect-v1.
type LeaseInspectResult struct {
	Status          LeaseInspectStatus
	ServerNowMillis int64
	// PTTL is the lease's remaining TTL on OWNED, else 0 (nothing about
	// another owner's lease is reported).
	PTTL time.Duration
}

// Outcome returns the certainty of the call.
func (r LeaseInspectResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// LeaseInspect reports whether attempt holds the efficiency lease, and its
// remaining TTL when it does: how a caller whose acquire timed out recovers
// the handle. It writes nothing (FCALL_RO in functions-provisioned mode).
func (e *Executor) LeaseInspect(ctx context.Context, lease keys.Key, attempt LeaseAttempt) (LeaseInspectResult, error) {
	const id = "lease-inspect-v1"
	r, err := e.run(ctx, id, []keys.Key{lease}, attempt.Owner, attempt.OperationID)
	if err != nil {
		return LeaseInspectResult{}, err
	}
	return leaseInspectResult(id, &r)
}

func leaseInspectResult(id string, r *reply) (LeaseInspectResult, error) {
	var err error
	res := LeaseInspectResult{Status: LeaseInspectStatus(r.status), ServerNowMillis: r.serverNow}
	pttl := r.int(0)
	if res.Status == LeaseOwned {
		err = wantPTTL(id, res.Status, pttl, 0, MaxLeaseTTL.Milliseconds())
	} else {
		err = wantPTTL(id, res.Status, pttl, 0, 0)
	}
	if err != nil {
		return LeaseInspectResult{}, err
	}
	res.PTTL = time.Duration(pttl) * time.Millisecond
	return res, nil
}

// LeaseRenewResult is the result of lease-renew-v1.
type LeaseRenewResult struct {
	Status          LeaseRenewStatus
	ServerNowMillis int64
	// PTTL is the lease's new remaining TTL on RENEWED (the TTL sent), else 0.
	PTTL time.Duration
}

// Outcome returns the certainty of the call.
func (r LeaseRenewResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// LeaseRenew sets the efficiency lease's TTL to ttl only while attempt
// holds it. ABSENT and NOT_OWNER mean the lease is lost; a timeout leaves it
// UNKNOWN (the caller stops protected work and does not resend blindly).
func (e *Executor) LeaseRenew(ctx context.Context, lease keys.Key, attempt LeaseAttempt, ttl time.Duration) (LeaseRenewResult, error) {
	const id = "lease-renew-v1"
	r, err := e.run(ctx, id, []keys.Key{lease}, attempt.Owner, attempt.OperationID, millis(ttl))
	if err != nil {
		return LeaseRenewResult{}, err
	}
	return leaseRenewResult(id, &r, ttl)
}

func leaseRenewResult(id string, r *reply, ttl time.Duration) (LeaseRenewResult, error) {
	var err error
	res := LeaseRenewResult{Status: LeaseRenewStatus(r.status), ServerNowMillis: r.serverNow}
	pttl := r.int(0)
	if res.Status == LeaseRenewed {
		err = wantPTTL(id, res.Status, pttl, ttl.Milliseconds(), ttl.Milliseconds())
	} else {
		err = wantPTTL(id, res.Status, pttl, 0, 0)
	}
	if err != nil {
		return LeaseRenewResult{}, err
	}
	res.PTTL = time.Duration(pttl) * time.Millisecond
	return res, nil
}

// LeaseReleaseResult is the result of lease-release-v1.
type LeaseReleaseResult struct {
	Status          LeaseReleaseStatus
	ServerNowMillis int64
	// Deleted is 1 on RELEASED, else 0.
	Deleted int64
}

// Outcome returns the certainty of the call.
func (r LeaseReleaseResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// LeaseRelease deletes the efficiency lease only while attempt holds it;
// after a timeout, repeating it (ABSENT: the desired absence holds) or
// inspecting reconciles.
func (e *Executor) LeaseRelease(ctx context.Context, lease keys.Key, attempt LeaseAttempt) (LeaseReleaseResult, error) {
	const id = "lease-release-v1"
	r, err := e.run(ctx, id, []keys.Key{lease}, attempt.Owner, attempt.OperationID)
	if err != nil {
		return LeaseReleaseResult{}, err
	}
	return leaseReleaseResult(id, &r)
}

// LeaseReleaseV2 is LeaseRelease with lease-release-v2: the same
// arguments, statuses and result in fewer Redis calls (GET doubles as the
// type check, the envelope is compared whole). v1 and v2 callers may
// share a lease key.
func (e *Executor) LeaseReleaseV2(ctx context.Context, lease keys.Key, attempt LeaseAttempt) (LeaseReleaseResult, error) {
	return leaseReleaseV2Call(ctx, e, lease, attempt)
}

// LeaseRelease is Executor.LeaseReleaseV2, batched (see
// Batcher.LeaseAcquire).
func (b *Batcher) LeaseRelease(ctx context.Context, lease keys.Key, attempt LeaseAttempt) (LeaseReleaseResult, error) {
	return leaseReleaseV2Call(ctx, b, lease, attempt)
}

func leaseReleaseV2Call(ctx context.Context, s intsSender, lease keys.Key, attempt LeaseAttempt) (LeaseReleaseResult, error) {
	r, err := sendFast(ctx, s, s.executor().leaseReleaseV2, leaseReleaseV2, []keys.Key{lease}, attempt.Owner, attempt.OperationID)
	if err != nil {
		return LeaseReleaseResult{}, err
	}
	return leaseReleaseResult(leaseReleaseV2, &r)
}

// LeaseReleaseV3 is LeaseReleaseV2 with lease-release-v3: the same key,
// statuses and result, but the host validates the attempt and builds the
// envelope (an invalid one is INVALID without a send), and releasing the
// caller's own live lease is answered by an integer reply. v1, v2 and v3
// callers may share a lease key.
func (e *Executor) LeaseReleaseV3(ctx context.Context, lease keys.Key, attempt LeaseAttempt) (LeaseReleaseResult, error) {
	return leaseReleaseV3Call(ctx, e, lease, attempt)
}

// LeaseReleaseV3 is Executor.LeaseReleaseV3, batched (see
// Batcher.LeaseAcquire).
func (b *Batcher) LeaseReleaseV3(ctx context.Context, lease keys.Key, attempt LeaseAttempt) (LeaseReleaseResult, error) {
	return leaseReleaseV3Call(ctx, b, lease, attempt)
}

func leaseReleaseV3Call(ctx context.Context, s intsSender, lease keys.Key, attempt LeaseAttempt) (LeaseReleaseResult, error) {
	env, ok := leaseEnvelope(attempt)
	if !ok {
		return LeaseReleaseResult{Status: LeaseReleaseInvalid}, nil
	}
	r, err := sendFast(ctx, s, s.executor().leaseReleaseV3, leaseReleaseV3, []keys.Key{lease}, env)
	if err != nil {
		return LeaseReleaseResult{}, err
	}
	if r.short {
		return LeaseReleaseResult{Status: LeaseReleased, Deleted: 1}, nil
	}
	return leaseReleaseResult(leaseReleaseV3, &r)
}

func leaseReleaseResult(id string, r *reply) (LeaseReleaseResult, error) {
	res := LeaseReleaseResult{Status: LeaseReleaseStatus(r.status), ServerNowMillis: r.serverNow, Deleted: r.int(0)}
	if want := b2int(res.Status == LeaseReleased); res.Deleted != want {
		return LeaseReleaseResult{}, &CompatibilityError{Program: id, Reason: fmt.Sprintf("%s with deleted %d", res.Status, res.Deleted)}
	}
	return res, nil
}

// wantPTTL refuses a reply whose PTTL field lies outside lo..hi for its
// status: a reply that contradicts the request is ErrIncompatible, never a
// success.
func wantPTTL(id string, status fmt.Stringer, pttl, lo, hi int64) error {
	if pttl < lo || pttl > hi {
		return &CompatibilityError{Program: id, Reason: fmt.Sprintf("%s with pttl %d, want %d..%d", status, pttl, lo, hi)}
	}
	return nil
}

func b2int(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
