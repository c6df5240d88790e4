// Status enums of the catalog programs. Each maps 1:1 (name, code,
// outcome) to program-set.json; TestFacadeStatusesMatchManifest fails on
// any drift.

package programs

import "github.com/caphost/caphost/runtime/certainty"

// CachePutStatus is the status enum of cache-put-v2.
type CachePutStatus uint8

// Statuses of cache-put-v2 (codes as in the manifest).
const (
	// CachePutStored is STORED (code 1, APPLIED).
	CachePutStored CachePutStatus = iota + 1
	// CachePutGenerationMissing is GENERATION_MISSING (code 2, NOT_APPLIED):
	// the shard generation key does not exist (never read as a default);
	// nothing was written.
	CachePutGenerationMissing
	// CachePutGenerationMoved is GENERATION_MOVED (code 3, CONFLICT): the
	// shard was invalidated after the generation was captured; nothing was
	// written and the result carries the current generation.
	CachePutGenerationMoved
	// CachePutNotNewer is NOT_NEWER (code 4, CONFLICT): under
	// newer-source-revision the stored entry's source revision is >= the
	// new one; nothing was written.
	CachePutNotNewer
	// CachePutObservationChanged is OBSERVATION_CHANGED (code 5, CONFLICT):
	// the entry is no longer what the lookup observed (an invalidation's
	// tombstone or another writer came in between); nothing was written.
	CachePutObservationChanged
	// CachePutStoredUnreadable is STORED_UNREADABLE (code 6, REJECTED): under
	// newer-source-revision the stored value is neither a readable envelope
	// nor a tombstone, so no order can be established; nothing was written.
	CachePutStoredUnreadable
	// CachePutWrongType is WRONG_TYPE (code 7, REJECTED): a key holds
	// another Redis type, or the generation key a string that is no
	// generation (outside 16..128 bytes).
	CachePutWrongType
	// CachePutInvalid is INVALID (code 8, REJECTED).
	CachePutInvalid
)

func cachePutStatuses() []statusDef {
	return []statusDef{
		{"STORED", certainty.Applied},
		{"GENERATION_MISSING", certainty.NotApplied},
		{"GENERATION_MOVED", certainty.Conflict},
		{"NOT_NEWER", certainty.Conflict},
		{"OBSERVATION_CHANGED", certainty.Conflict},
		{"STORED_UNREADABLE", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s CachePutStatus) String() string { return statusName(cachePutStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s CachePutStatus) Outcome() certainty.Outcome {
	return statusOutcome(cachePutStatuses(), uint8(s))
}

// RefreshClaimStatus is the status enum of cache-refresh-claim-v1.
type RefreshClaimStatus uint8

// Statuses of cache-refresh-claim-v1 (codes as in the manifest).
const (
	// RefreshClaimAcquired is ACQUIRED (code 1, APPLIED).
	RefreshClaimAcquired RefreshClaimStatus = iota + 1
	// RefreshClaimContended is CONTENDED (code 2, CONFLICT).
	RefreshClaimContended
	// RefreshClaimAlreadyOwned is ALREADY_OWNED (code 3, APPLIED).
	RefreshClaimAlreadyOwned
	// RefreshClaimWrongType is WRONG_TYPE (code 4, REJECTED).
	RefreshClaimWrongType
	// RefreshClaimInvalid is INVALID (code 5, REJECTED).
	RefreshClaimInvalid
)

func refreshClaimStatuses() []statusDef {
	return []statusDef{
		{"ACQUIRED", certainty.Applied},
		{"CONTENDED", certainty.Conflict},
		{"ALREADY_OWNED", certainty.Applied},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s RefreshClaimStatus) String() string { return statusName(refreshClaimStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s RefreshClaimStatus) Outcome() certainty.Outcome {
	return statusOutcome(refreshClaimStatuses(), uint8(s))
}

// RefreshReleaseStatus is the status enum of cache-refresh-release-v1.
type RefreshReleaseStatus uint8

// Statuses of cache-refresh-release-v1 (codes as in the manifest).
const (
	// RefreshReleaseReleased is RELEASED (code 1, APPLIED).
	RefreshReleaseReleased RefreshReleaseStatus = iota + 1
	// RefreshReleaseAbsent is ABSENT (code 2, NOT_APPLIED).
	RefreshReleaseAbsent
	// RefreshReleaseNotOwner is NOT_OWNER (code 3, CONFLICT).
	RefreshReleaseNotOwner
	// RefreshReleaseWrongType is WRONG_TYPE (code 4, REJECTED).
	RefreshReleaseWrongType
	// RefreshReleaseInvalid is INVALID (code 5, REJECTED).
	RefreshReleaseInvalid
)

func refreshReleaseStatuses() []statusDef {
	return []statusDef{
		{"RELEASED", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s RefreshReleaseStatus) String() string { return statusName(refreshReleaseStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s RefreshReleaseStatus) Outcome() certainty.Outcome {
	return statusOutcome(refreshReleaseStatuses(), uint8(s))
}

// CompareAndDeleteStatus is the status enum of compare-and-delete-v1.
type CompareAndDeleteStatus uint8

// Statuses of compare-and-delete-v1 (codes as in the manifest).
const (
	// CompareAndDeleteDeleted is DELETED (code 1, APPLIED).
	CompareAndDeleteDeleted CompareAndDeleteStatus = iota + 1
	// CompareAndDeleteAbsent is ABSENT (code 2, NOT_APPLIED).
	CompareAndDeleteAbsent
	// CompareAndDeleteNotOwner is NOT_OWNER (code 3, CONFLICT).
	CompareAndDeleteNotOwner
	// CompareAndDeleteWrongType is WRONG_TYPE (code 4, REJECTED).
	CompareAndDeleteWrongType
	// CompareAndDeleteInvalid is INVALID (code 5, REJECTED).
	CompareAndDeleteInvalid
)

func compareAndDeleteStatuses() []statusDef {
	return []statusDef{
		{"DELETED", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s CompareAndDeleteStatus) String() string {
	return statusName(compareAndDeleteStatuses(), uint8(s))
}

// Outcome returns the certainty the status reports.
func (s CompareAndDeleteStatus) Outcome() certainty.Outcome {
	return statusOutcome(compareAndDeleteStatuses(), uint8(s))
}

// CompareAndExpireStatus is the status enum of compare-and-expire-v1.
type CompareAndExpireStatus uint8

// Statuses of compare-and-expire-v1 (codes as in the manifest).
const (
	// CompareAndExpireRenewed is RENEWED (code 1, APPLIED).
	CompareAndExpireRenewed CompareAndExpireStatus = iota + 1
	// CompareAndExpireAbsent is ABSENT (code 2, NOT_APPLIED).
	CompareAndExpireAbsent
	// CompareAndExpireNotOwner is NOT_OWNER (code 3, CONFLICT).
	CompareAndExpireNotOwner
	// CompareAndExpireWrongType is WRONG_TYPE (code 4, REJECTED).
	CompareAndExpireWrongType
	// CompareAndExpireInvalid is INVALID (code 5, REJECTED).
	CompareAndExpireInvalid
)

func compareAndExpireStatuses() []statusDef {
	return []statusDef{
		{"RENEWED", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"NOT_OWNER", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s CompareAndExpireStatus) String() string {
	return statusName(compareAndExpireStatuses(), uint8(s))
}

// Outcome returns the certainty the status reports.
func (s CompareAndExpireStatus) Outcome() certainty.Outcome {
	return statusOutcome(compareAndExpireStatuses(), uint8(s))
}

// CompareAndSetStatus is the status enum of compare-and-set-with-ttl-v1.
type CompareAndSetStatus uint8

// Statuses of compare-and-set-with-ttl-v1 (codes as in the manifest).
const (
	// CompareAndSetStored is STORED (code 1, APPLIED).
	CompareAndSetStored CompareAndSetStatus = iota + 1
	// CompareAndSetAbsent is ABSENT (code 2, NOT_APPLIED).
	CompareAndSetAbsent
	// CompareAndSetRevisionConflict is REVISION_CONFLICT (code 3, CONFLICT).
	CompareAndSetRevisionConflict
	// CompareAndSetWrongType is WRONG_TYPE (code 4, REJECTED).
	CompareAndSetWrongType
	// CompareAndSetInvalid is INVALID (code 5, REJECTED).
	CompareAndSetInvalid
)

func compareAndSetStatuses() []statusDef {
	return []statusDef{
		{"STORED", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"REVISION_CONFLICT", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s CompareAndSetStatus) String() string { return statusName(compareAndSetStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s CompareAndSetStatus) Outcome() certainty.Outcome {
	return statusOutcome(compareAndSetStatuses(), uint8(s))
}

// IncrementStatus is the status enum of increment-with-initial-ttl-v1.
type IncrementStatus uint8

// Statuses of increment-with-initial-ttl-v1 (codes as in the manifest).
const (
	// IncrementIncremented is INCREMENTED (code 1, APPLIED).
	IncrementIncremented IncrementStatus = iota + 1
	// IncrementLimitExceeded is LIMIT_EXCEEDED (code 2, NOT_APPLIED).
	IncrementLimitExceeded
	// IncrementOverflow is OVERFLOW (code 3, REJECTED).
	IncrementOverflow
	// IncrementWrongType is WRONG_TYPE (code 4, REJECTED).
	IncrementWrongType
	// IncrementInvalid is INVALID (code 5, REJECTED).
	IncrementInvalid
)

func incrementStatuses() []statusDef {
	return []statusDef{
		{"INCREMENTED", certainty.Applied},
		{"LIMIT_EXCEEDED", certainty.NotApplied},
		{"OVERFLOW", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s IncrementStatus) String() string { return statusName(incrementStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s IncrementStatus) Outcome() certainty.Outcome {
	return statusOutcome(incrementStatuses(), uint8(s))
}

// GenerationBumpStatus is the status enum of region-generation-bump-v1.
type GenerationBumpStatus uint8

// Statuses of region-generation-bump-v1 (codes as in the manifest).
const (
	// GenerationBumpBumped is BUMPED (code 1, APPLIED).
	GenerationBumpBumped GenerationBumpStatus = iota + 1
	// GenerationBumpAlreadyApplied is ALREADY_APPLIED (code 2, APPLIED).
	GenerationBumpAlreadyApplied
	// GenerationBumpWrongType is WRONG_TYPE (code 3, REJECTED).
	GenerationBumpWrongType
	// GenerationBumpInvalid is INVALID (code 4, REJECTED).
	GenerationBumpInvalid
)

func generationBumpStatuses() []statusDef {
	return []statusDef{
		{"BUMPED", certainty.Applied},
		{"ALREADY_APPLIED", certainty.Applied},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s GenerationBumpStatus) String() string { return statusName(generationBumpStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s GenerationBumpStatus) Outcome() certainty.Outcome {
	return statusOutcome(generationBumpStatuses(), uint8(s))
}

// GenerationInitStatus is the status enum of region-generation-init-v1.
type GenerationInitStatus uint8

// Statuses of region-generation-init-v1 (codes as in the manifest).
const (
	// GenerationInitInitialized is INITIALIZED (code 1, APPLIED).
	GenerationInitInitialized GenerationInitStatus = iota + 1
	// GenerationInitExisting is EXISTING (code 2, NOT_APPLIED).
	GenerationInitExisting
	// GenerationInitWrongType is WRONG_TYPE (code 3, REJECTED).
	GenerationInitWrongType
	// GenerationInitInvalid is INVALID (code 4, REJECTED).
	GenerationInitInvalid
)

func generationInitStatuses() []statusDef {
	return []statusDef{
		{"INITIALIZED", certainty.Applied},
		{"EXISTING", certainty.NotApplied},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s GenerationInitStatus) String() string { return statusName(generationInitStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s GenerationInitStatus) Outcome() certainty.Outcome {
	return statusOutcome(generationInitStatuses(), uint8(s))
}

// SetIfAbsentStatus is the status enum of set-if-absent-with-ttl-v1.
type SetIfAbsentStatus uint8

// Statuses of set-if-absent-with-ttl-v1 (codes as in the manifest).
const (
	// SetIfAbsentSet is SET (code 1, APPLIED).
	SetIfAbsentSet SetIfAbsentStatus = iota + 1
	// SetIfAbsentExists is EXISTS (code 2, NOT_APPLIED).
	SetIfAbsentExists
	// SetIfAbsentWrongType is WRONG_TYPE (code 3, REJECTED).
	SetIfAbsentWrongType
	// SetIfAbsentInvalid is INVALID (code 4, REJECTED).
	SetIfAbsentInvalid
)

func setIfAbsentStatuses() []statusDef {
	return []statusDef{
		{"SET", certainty.Applied},
		{"EXISTS", certainty.NotApplied},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s SetIfAbsentStatus) String() string { return statusName(setIfAbsentStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s SetIfAbsentStatus) Outcome() certainty.Outcome {
	return statusOutcome(setIfAbsentStatuses(), uint8(s))
}

// facadeStatuses returns the Go status table of a program, nil when the
// program has no facade.
func facadeStatuses(id string) []statusDef {
	switch id {
	case "cache-put-v2":
		return cachePutStatuses()
	case "cache-refresh-claim-v1":
		return refreshClaimStatuses()
	case "cache-refresh-release-v1":
		return refreshReleaseStatuses()
	case "compare-and-delete-v1":
		return compareAndDeleteStatuses()
	case "compare-and-expire-v1":
		return compareAndExpireStatuses()
	case "compare-and-set-with-ttl-v1":
		return compareAndSetStatuses()
	case "increment-with-initial-ttl-v1":
		return incrementStatuses()
	case "region-generation-bump-v1":
		return generationBumpStatuses()
	case "region-generation-init-v1":
		return generationInitStatuses()
	case "set-if-absent-with-ttl-v1":
		return setIfAbsentStatuses()
	case "fenced-counter-provision-v1":
		return fenceProvisionStatuses()
	case "fenced-lease-acquire-v1":
		return fencedAcquireStatuses()
	case "fenced-lease-inspect-v1":
		return fencedInspectStatuses()
	case "fenced-lease-renew-v1":
		return fencedHoldStatuses("RENEWED")
	case "fenced-lease-release-v1":
		return fencedHoldStatuses("RELEASED")
	case "idempotency-claim-v1":
		return idemClaimStatuses()
	case "idempotency-inspect-v1":
		return idemInspectStatuses()
	case "idempotency-start-v1":
		return idemStartStatuses()
	case "idempotency-renew-v1":
		return idemRenewStatuses()
	case "idempotency-complete-v1":
		return idemCompleteStatuses()
	case "idempotency-fail-v1":
		return idemFailStatuses()
	case "idempotency-release-v1":
		return idemReleaseStatuses()
	case "lease-acquire-v1", "lease-acquire-v2", "lease-acquire-v3":
		return leaseAcquireStatuses()
	case "lease-inspect-v1":
		return leaseInspectStatuses()
	case "lease-renew-v1":
		return leaseRenewStatuses()
	case "lease-release-v1", "lease-release-v2", "lease-release-v3":
		return leaseReleaseStatuses()
	case "rate-concurrency-acquire-v1", "rate-concurrency-acquire-v2", "rate-concurrency-acquire-v3":
		return permitAcquireStatuses()
	case "rate-concurrency-renew-v1", "rate-concurrency-renew-v2", "rate-concurrency-renew-v3":
		return permitRenewStatuses()
	case "rate-concurrency-release-v1", "rate-concurrency-release-v2", "rate-concurrency-release-v3":
		return permitReleaseStatuses()
	case "rate-fixed-window-v1", "rate-fixed-window-v2", "rate-fixed-window-v3", "rate-sliding-counter-v1", "rate-sliding-counter-v2",
		"rate-token-bucket-v1", "rate-token-bucket-v2", "rate-gcra-v1", "rate-gcra-v2", "rate-sliding-log-v1", "rate-sliding-log-v2", "rate-sliding-log-v3":
		return rateStatuses()
	}
	return notifyStatuses(id)
}

// RateStatus is the status enum shared by rate-fixed-window-v1 and -v2,
// rate-sliding-counter-v1 and -v2, rate-token-bucket-v1 and -v2,
// rate-gcra-v1 and -v2 and rate-sliding-log-v1 and -v2.
type RateStatus uint8

// Statuses of the rate programs (codes as in the manifest).
const (
	// RateAllowed is ALLOWED (code 1, APPLIED): the cost was consumed.
	RateAllowed RateStatus = iota + 1
	// RateDenied is DENIED (code 2, NOT_APPLIED): nothing was consumed.
	RateDenied
	// RateDedupReplay is DEDUP_REPLAY (code 3, APPLIED): the evaluation id
	// was already decided; the result carries the original decision and
	// nothing was consumed again.
	RateDedupReplay
	// RateClockUnsafe is CLOCK_UNSAFE (code 4, REJECTED): the server clock is
	// behind the stored last observation by more than the allowed step.
	RateClockUnsafe
	// RateWrongType is WRONG_TYPE (code 5, REJECTED): the state or dedup key
	// holds another type, another schema or another policy revision.
	RateWrongType
	// RateInvalid is INVALID (code 6, REJECTED).
	RateInvalid
)

func rateStatuses() []statusDef {
	return []statusDef{
		{"ALLOWED", certainty.Applied},
		{"DENIED", certainty.NotApplied},
		{"DEDUP_REPLAY", certainty.Applied},
		{"CLOCK_UNSAFE", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s RateStatus) String() string { return statusName(rateStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s RateStatus) Outcome() certainty.Outcome { return statusOutcome(rateStatuses(), uint8(s)) }

// PermitAcquireStatus is the status enum of rate-concurrency-acquire-v1.
type PermitAcquireStatus uint8

// Statuses of rate-concurrency-acquire-v1 (codes as in the manifest).
const (
	// PermitAcquired is ACQUIRED (code 1, APPLIED).
	PermitAcquired PermitAcquireStatus = iota + 1
	// PermitAlreadyHeld is ALREADY_HELD (code 2, APPLIED): the owner holds a
	// live permit (a repeat after a timeout lands here); it was not extended.
	PermitAlreadyHeld
	// PermitContended is CONTENDED (code 3, CONFLICT): all permits are held.
	PermitContended
	// PermitAcquireClockUnsafe is CLOCK_UNSAFE (code 4, REJECTED).
	PermitAcquireClockUnsafe
	// PermitAcquireWrongType is WRONG_TYPE (code 5, REJECTED).
	PermitAcquireWrongType
	// PermitAcquireInvalid is INVALID (code 6, REJECTED).
	PermitAcquireInvalid
)

func permitAcquireStatuses() []statusDef {
	return []statusDef{
		{"ACQUIRED", certainty.Applied},
		{"ALREADY_HELD", certainty.Applied},
		{"CONTENDED", certainty.Conflict},
		{"CLOCK_UNSAFE", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s PermitAcquireStatus) String() string { return statusName(permitAcquireStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s PermitAcquireStatus) Outcome() certainty.Outcome {
	return statusOutcome(permitAcquireStatuses(), uint8(s))
}

// PermitRenewStatus is the status enum of rate-concurrency-renew-v1.
type PermitRenewStatus uint8

// Statuses of rate-concurrency-renew-v1 (codes as in the manifest).
const (
	// PermitRenewed is RENEWED (code 1, APPLIED).
	PermitRenewed PermitRenewStatus = iota + 1
	// PermitRenewNotHeld is NOT_HELD (code 2, NOT_APPLIED): the owner holds
	// no live permit (never acquired, expired or released); acquire again.
	PermitRenewNotHeld
	// PermitRenewClockUnsafe is CLOCK_UNSAFE (code 3, REJECTED).
	PermitRenewClockUnsafe
	// PermitRenewWrongType is WRONG_TYPE (code 4, REJECTED).
	PermitRenewWrongType
	// PermitRenewInvalid is INVALID (code 5, REJECTED).
	PermitRenewInvalid
)

func permitRenewStatuses() []statusDef {
	return []statusDef{
		{"RENEWED", certainty.Applied},
		{"NOT_HELD", certainty.NotApplied},
		{"CLOCK_UNSAFE", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s PermitRenewStatus) String() string { return statusName(permitRenewStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s PermitRenewStatus) Outcome() certainty.Outcome {
	return statusOutcome(permitRenewStatuses(), uint8(s))
}

// PermitReleaseStatus is the status enum of rate-concurrency-release-v1.
type PermitReleaseStatus uint8

// Statuses of rate-concurrency-release-v1 (codes as in the manifest).
const (
	// PermitReleased is RELEASED (code 1, APPLIED).
	PermitReleased PermitReleaseStatus = iota + 1
	// PermitReleaseNotHeld is NOT_HELD (code 2, NOT_APPLIED): the desired
	// absence holds (a repeat after a timeout lands here).
	PermitReleaseNotHeld
	// PermitReleaseClockUnsafe is CLOCK_UNSAFE (code 3, REJECTED).
	PermitReleaseClockUnsafe
	// PermitReleaseWrongType is WRONG_TYPE (code 4, REJECTED).
	PermitReleaseWrongType
	// PermitReleaseInvalid is INVALID (code 5, REJECTED).
	PermitReleaseInvalid
)

func permitReleaseStatuses() []statusDef {
	return []statusDef{
		{"RELEASED", certainty.Applied},
		{"NOT_HELD", certainty.NotApplied},
		{"CLOCK_UNSAFE", certainty.Rejected},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s PermitReleaseStatus) String() string { return statusName(permitReleaseStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s PermitReleaseStatus) Outcome() certainty.Outcome {
	return statusOutcome(permitReleaseStatuses(), uint8(s))
}
