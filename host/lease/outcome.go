package lease

import (
	"errors"
	"time"

	"github.com/caphost/caphost/host/internal/hold"

	"github.com/caphost/caphost/runtime/certainty"
)

// Errors. Outages are outcomes (Unavailable, Indeterminate), never errors:
// an error is a caller mistake, a closed client, corrupt state or ctx's.
var (
	// ErrInvalidRequest: a request out of bounds (purpose, resource, TTL,
	// wait, a zero attempt); nothing was sent.
	ErrInvalidRequest = errors.New("lease: invalid request")
	// ErrNotActive: Renew on a handle that is no longer ACTIVE (or whose
	// validity ran out); nothing was sent.
	ErrNotActive = errors.New("lease: handle not active")
	// ErrCorrupt: the lease key holds something that is not a lease
	// (another Redis type, or a value no lease program wrote).
	ErrCorrupt = errors.New("lease: lease key holds no lease")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("lease: client closed")
	// ErrValidityExpired is a handle's cause when its local validity ran
	// out before a renew extended it.
	ErrValidityExpired = errors.New("lease: validity expired")
	// ErrLost is a handle's cause when Redis answered that the attempt no
	// longer holds the lease.
	ErrLost = errors.New("lease: lost to expiry or another owner")
)

// AcquireKind is what an acquire (or an inspect) found.
type AcquireKind uint8

// Acquire outcomes.
const (
	// Acquired: the lease was free and is now held by the attempt.
	Acquired AcquireKind = iota + 1
	// ReplayedSameOperation: the attempt already held the lease (a repeat
	// after a lost reply); validity counts from the server's remaining TTL.
	ReplayedSameOperation
	// Contended: another owner holds it; RetryAfter is its remaining TTL.
	Contended
	// OwnerOperationConflict: the same owner holds it for another
	// operation id; waiting does not help.
	OwnerOperationConflict
	// Absent (inspect only): nobody holds it.
	Absent
	// Unavailable: Redis refused or could not be reached before the
	// program ran (see Overloaded); nothing changed.
	Unavailable
	// Indeterminate: the program was sent and no reply came, also after one
	// reconciling repeat: the attempt may hold the lease. Inspect with the
	// same attempt (or acquire again with it) before concluding either way.
	Indeterminate
)

var acquireNames = [...]string{Acquired: "ACQUIRED", ReplayedSameOperation: "REPLAYED_SAME_OPERATION",
	Contended: "CONTENDED", OwnerOperationConflict: "OWNER_OPERATION_CONFLICT", Absent: "ABSENT",
	Unavailable: "UNAVAILABLE", Indeterminate: "INDETERMINATE"}

func (k AcquireKind) String() string { return enumName(acquireNames[:], int(k)) }

// Held reports whether the outcome carries a handle.
func (k AcquireKind) Held() bool { return k == Acquired || k == ReplayedSameOperation }

// Acquisition is the outcome of Acquire and Inspect.
type Acquisition struct {
	Kind AcquireKind
	// Handle is the held lease (Acquired, ReplayedSameOperation; an
	// inspect that finds the attempt holding it answers
	// ReplayedSameOperation).
	Handle *Handle
	// RetryAfter is the holder's remaining TTL (Contended,
	// OwnerOperationConflict).
	RetryAfter time.Duration
	// Overloaded: Unavailable because the host's admission or Redis
	// refused the call for load, not because Redis is down.
	Overloaded bool
	// Certainty is the certainty of the last call made.
	Certainty certainty.Outcome
	// Attempts is how many acquire calls were sent (a bounded wait retries).
	Attempts int
	// Cause is the runtime's error (Unavailable, Indeterminate).
	Cause error
}

// State is a handle's state. ACTIVE is the only state a lease can be used
// in; LOST, RELEASED and UNKNOWN are terminal.
type State = hold.State

// Handle states.
const (
	// Active: held, and the local validity has not run out.
	Active = hold.Active
	// Lost: Redis answered that another attempt holds it or nobody does, or
	// the validity ran out before a renew extended it.
	Lost = hold.Lost
	// Released: released by its holder.
	Released = hold.Released
	// Unknown: a renew or release was sent and no reply came. The lease may
	// still be held by this attempt until its TTL runs out; work must treat
	// it as lost.
	Unknown = hold.Unknown
)

// RenewKind is what a renew did.
type RenewKind uint8

// Renew outcomes.
const (
	// Renewed: the lease's TTL is the handle's TTL again, from the send.
	Renewed RenewKind = iota + 1
	// RenewLost: the attempt no longer holds the lease (the handle is LOST).
	RenewLost
	// RenewUnavailable: not sent or refused before it ran; the handle stays
	// ACTIVE until its validity runs out.
	RenewUnavailable
	// RenewIndeterminate: sent, no reply (the handle is UNKNOWN).
	RenewIndeterminate
)

var renewNames = [...]string{Renewed: "RENEWED", RenewLost: "LOST", RenewUnavailable: "UNAVAILABLE",
	RenewIndeterminate: "INDETERMINATE"}

func (k RenewKind) String() string { return enumName(renewNames[:], int(k)) }

// RenewResult is the outcome of Client.Renew (and, internally, of every
// renew).
type RenewResult struct {
	Kind RenewKind
	// Validity is the validity left after a renew that applied (Client.Renew
	// only; a Handle keeps its own).
	Validity time.Duration
	// Certainty is the certainty of the renew call.
	Certainty certainty.Outcome
	// Overloaded: RenewUnavailable because the host's admission or Redis
	// refused the call for load.
	Overloaded bool
	// Cause is the runtime's error (RenewUnavailable, RenewIndeterminate).
	Cause error
}

// ReleaseResult is the outcome of Client.Release (and, internally, of
// every release).
type ReleaseResult struct {
	Kind ReleaseKind
	// Certainty is the certainty of the last release call.
	Certainty certainty.Outcome
	// Overloaded: ReleaseUnavailable because the host's admission or Redis
	// refused the call for load.
	Overloaded bool
	// Cause is the runtime's error (ReleaseUnavailable, ReleaseIndeterminate).
	Cause error
}

// ReleaseKind is what a release did.
type ReleaseKind uint8

// Release outcomes.
const (
	// ReleaseDone: the lease was this attempt's and is deleted.
	ReleaseDone ReleaseKind = iota + 1
	// ReleaseAlreadyAbsent: nobody held it (it expired); the desired
	// absence holds.
	ReleaseAlreadyAbsent
	// ReleaseNotOwner: another attempt holds it and keeps it.
	ReleaseNotOwner
	// ReleaseAlreadyReleased: this handle was released before; nothing was
	// sent.
	ReleaseAlreadyReleased
	// ReleaseUnavailable: not sent or refused before it ran.
	ReleaseUnavailable
	// ReleaseIndeterminate: sent, no reply (also after one repeat).
	ReleaseIndeterminate
)

var releaseNames = [...]string{ReleaseDone: "RELEASED", ReleaseAlreadyAbsent: "ALREADY_ABSENT",
	ReleaseNotOwner: "NOT_OWNER", ReleaseAlreadyReleased: "ALREADY_RELEASED", ReleaseUnavailable: "UNAVAILABLE",
	ReleaseIndeterminate: "INDETERMINATE"}

func (k ReleaseKind) String() string { return enumName(releaseNames[:], int(k)) }

func enumName(names []string, i int) string {
	if i <= 0 || i >= len(names) || names[i] == "" {
		return "INVALID"
	}
	return names[i]
}
