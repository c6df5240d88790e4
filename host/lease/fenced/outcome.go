package fenced

import (
	"time"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/internal/hold"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/runtime/certainty"
)

// AcquireKind is what a fenced acquire (or inspect) found.
type AcquireKind uint8

// Acquire outcomes. The fence refusals (CounterMissing .. Exhausted) fail
// closed: nothing is granted and waiting does not help.
const (
	// Acquired: the counter went up by one; the handle carries the token.
	Acquired AcquireKind = iota + 1
	// ReplayedSameOperation: the attempt already held the lease (a repeat
	// after a lost reply): same token, no increment.
	ReplayedSameOperation
	// Contended: another owner holds it; RetryAfter is its remaining TTL.
	Contended
	// OwnerOperationConflict: the same owner holds it for another
	// operation.
	OwnerOperationConflict
	// Absent (inspect only): nobody holds it.
	Absent
	// CounterMissing: the resource has no counter (never provisioned, or
	// lost): it is not recreated on the request path.
	CounterMissing
	// EpochMismatch: the counter belongs to another epoch of the resource.
	EpochMismatch
	// RegistrationConflict: the counter belongs to another registration.
	RegistrationConflict
	// Regression: the counter is below a live token (a failover lost
	// increments): alert; the resource side's watermark keeps stale writes
	// out.
	Regression
	// Exhausted: the next counter would pass the hard-fail threshold.
	Exhausted
	// Unavailable: not sent, or refused before it ran; nothing changed.
	Unavailable
	// Indeterminate: sent and no reply, also after one reconciling repeat.
	// With a replication profile, also an acquire that applied but whose
	// WAIT did not answer (after the same one repeat).
	Indeterminate
	// NotReplicated (replication profile only): Redis granted the lease but
	// fewer replicas than capabilities.fenced-lease.replication.acks
	// acknowledged it within the timeout; Replicas says how many did (or
	// WAIT answered an error reply, in Cause: nothing was counted). The
	// grant was released best-effort (Release says how that went) and no
	// handle or token is handed out: a token only the primary knows is the
	// one a failover can hand out again. The counter keeps the increment
	// (it never goes down), and Certainty is the acquire's APPLIED (or
	// that of the replay that found the grant). Retry later (the grant is
	// gone, so any attempt acquires afresh); alert when it persists.
	NotReplicated
)

var acquireNames = [...]string{Acquired: "ACQUIRED", ReplayedSameOperation: "REPLAYED_SAME_OPERATION",
	Contended: "CONTENDED", OwnerOperationConflict: "OWNER_OPERATION_CONFLICT", Absent: "ABSENT",
	CounterMissing: "FENCE_COUNTER_MISSING", EpochMismatch: "EPOCH_MISMATCH", RegistrationConflict: "REGISTRATION_CONFLICT",
	Regression: "FENCE_REGRESSION", Exhausted: "FENCE_EXHAUSTED", Unavailable: "UNAVAILABLE", Indeterminate: "INDETERMINATE",
	NotReplicated: "NOT_REPLICATED"}

func (k AcquireKind) String() string { return enumName(acquireNames[:], int(k)) }

// Held reports whether the outcome carries a handle.
func (k AcquireKind) Held() bool { return k == Acquired || k == ReplayedSameOperation }

// Acquisition is the outcome of Acquire and Inspect.
type Acquisition struct {
	Kind AcquireKind
	// Handle is the held lease (Acquired, ReplayedSameOperation).
	Handle *Handle
	// RetryAfter is the holder's remaining TTL (Contended).
	RetryAfter time.Duration
	// Fence is the counter as the program read it, when it did: after the
	// increment on Acquired, the other epoch on EpochMismatch, the value
	// under a live token on Regression (for the alert).
	Fence fence.Token
	// Certainty is the certainty of the last call made.
	Certainty certainty.Outcome
	// Attempts is how many acquire calls were sent.
	Attempts int
	// Cause is the runtime's error (Unavailable, Indeterminate), or on
	// NotReplicated the error reply WAIT answered instead of a count
	// (NOPERM: the script lane's ACL lacks +wait).
	Cause error
	// Replicas (replication profile only) is how many replicas the WAIT
	// after the acquire reported: on Acquired and ReplayedSameOperation at
	// least the configured acks, on NotReplicated fewer; 0 otherwise.
	Replicas int
	// Release (NotReplicated only) is the outcome of the best-effort
	// release of the unreplicated grant: ReleaseDone when it is gone; any
	// other kind means it may stay held until its TTL runs out.
	Release lease.ReleaseKind
}

// State is a handle's state (ACTIVE, then LOST, RELEASED or UNKNOWN).
type State = hold.State

// Handle states.
const (
	Active   = hold.Active
	Lost     = hold.Lost
	Released = hold.Released
	Unknown  = hold.Unknown
)

// A renew and a release answer in the efficiency lease's vocabulary
// (lease.RenewKind, lease.ReleaseKind). A fence that no longer matches the
// token — a missing or regressed counter, another epoch or registration —
// is lease.RenewLost or lease.ReleaseNotOwner with the handle's cause
// ErrFenceBroken.

func enumName(names []string, i int) string {
	if i <= 0 || i >= len(names) || names[i] == "" {
		return "INVALID"
	}
	return names[i]
}
