// Status enums of the notify programs. Each maps 1:1 (name, code,
// outcome) to program-set.json; TestFacadeStatusesMatchManifest fails on
// any drift.

package programs

import "github.com/caphost/caphost/runtime/certainty"

// NotifySubmitStatus is the status enum of notify-submit-v1, -v2 and -v3.
type NotifySubmitStatus uint8

// Statuses of notify-submit-v1, -v2 and -v3 (codes as in the manifest).
const (
	// NotifySubmitted is SUBMITTED (code 1, APPLIED).
	NotifySubmitted NotifySubmitStatus = iota + 1
	// NotifyDuplicate is DUPLICATE (code 2, APPLIED).
	NotifyDuplicate
	// NotifyDuplicateOtherPlan is DUPLICATE_OTHER_PLAN (code 3, CONFLICT).
	NotifyDuplicateOtherPlan
	// NotifySubmitWrongType is WRONG_TYPE (code 4, REJECTED).
	NotifySubmitWrongType
	// NotifySubmitInvalid is INVALID (code 5, REJECTED).
	NotifySubmitInvalid
)

func notifySubmitStatuses() []statusDef {
	return []statusDef{
		{"SUBMITTED", certainty.Applied},
		{"DUPLICATE", certainty.Applied},
		{"DUPLICATE_OTHER_PLAN", certainty.Conflict},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s NotifySubmitStatus) String() string { return statusName(notifySubmitStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s NotifySubmitStatus) Outcome() certainty.Outcome {
	return statusOutcome(notifySubmitStatuses(), uint8(s))
}

// NotifyClaimStatus is the status enum of notify-claim-v1 and -v2 (v2
// adds IN_DOUBT, code 7).
type NotifyClaimStatus uint8

// Statuses of notify-claim-v1 and -v2 (codes as in the manifest).
const (
	// NotifyClaimed is CLAIMED (code 1, APPLIED).
	NotifyClaimed NotifyClaimStatus = iota + 1
	// NotifyClaimAlreadyFinal is ALREADY_FINAL (code 2, NOT_APPLIED).
	NotifyClaimAlreadyFinal
	// NotifyClaimExhausted is EXHAUSTED (code 3, APPLIED).
	NotifyClaimExhausted
	// NotifyClaimAbsent is ABSENT (code 4, NOT_APPLIED).
	NotifyClaimAbsent
	// NotifyClaimWrongType is WRONG_TYPE (code 5, REJECTED).
	NotifyClaimWrongType
	// NotifyClaimInvalid is INVALID (code 6, REJECTED).
	NotifyClaimInvalid
	// NotifyClaimInDoubt is IN_DOUBT (code 7, APPLIED; notify-claim-v2
	// only): the record was DELIVERING — an earlier attempt began and was
	// never finalized, so its send may have happened. The record became
	// INDETERMINATE and the entry was acknowledged; nothing may be sent.
	NotifyClaimInDoubt
)

// notifyClaimStatuses is notify-claim-v1's table.
func notifyClaimStatuses() []statusDef {
	return []statusDef{
		{"CLAIMED", certainty.Applied},
		{"ALREADY_FINAL", certainty.NotApplied},
		{"EXHAUSTED", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// notifyClaimV2Statuses is notify-claim-v2's table: v1's and IN_DOUBT.
func notifyClaimV2Statuses() []statusDef {
	return append(notifyClaimStatuses(), statusDef{"IN_DOUBT", certainty.Applied})
}

// String returns the manifest name of the status.
func (s NotifyClaimStatus) String() string { return statusName(notifyClaimV2Statuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s NotifyClaimStatus) Outcome() certainty.Outcome {
	return statusOutcome(notifyClaimV2Statuses(), uint8(s))
}

// NotifyFinalizeStatus is the status enum of notify-finalize-v1 and -v2
// (the same table).
type NotifyFinalizeStatus uint8

// Statuses of notify-finalize-v1 and -v2 (codes as in the manifest).
const (
	// NotifyFinalized is FINALIZED (code 1, APPLIED).
	NotifyFinalized NotifyFinalizeStatus = iota + 1
	// NotifyRecorded is RECORDED (code 2, APPLIED).
	NotifyRecorded
	// NotifyReconciled is RECONCILED (code 3, APPLIED).
	NotifyReconciled
	// NotifyFinalizeAlreadyFinal is ALREADY_FINAL (code 4, NOT_APPLIED).
	NotifyFinalizeAlreadyFinal
	// NotifyFinalizeStaleAttempt is STALE_ATTEMPT (code 5, CONFLICT).
	NotifyFinalizeStaleAttempt
	// NotifyFinalizeAbsent is ABSENT (code 6, NOT_APPLIED).
	NotifyFinalizeAbsent
	// NotifyFinalizeWrongType is WRONG_TYPE (code 7, REJECTED).
	NotifyFinalizeWrongType
	// NotifyFinalizeInvalid is INVALID (code 8, REJECTED).
	NotifyFinalizeInvalid
)

func notifyFinalizeStatuses() []statusDef {
	return []statusDef{
		{"FINALIZED", certainty.Applied},
		{"RECORDED", certainty.Applied},
		{"RECONCILED", certainty.Applied},
		{"ALREADY_FINAL", certainty.NotApplied},
		{"STALE_ATTEMPT", certainty.Conflict},
		{"ABSENT", certainty.NotApplied},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s NotifyFinalizeStatus) String() string { return statusName(notifyFinalizeStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s NotifyFinalizeStatus) Outcome() certainty.Outcome {
	return statusOutcome(notifyFinalizeStatuses(), uint8(s))
}

// NotifyQuarantineStatus is the status enum of notify-quarantine-v1.
type NotifyQuarantineStatus uint8

// Statuses of notify-quarantine-v1 (codes as in the manifest).
const (
	// NotifyQuarantinedStatus is QUARANTINED (code 1, APPLIED).
	NotifyQuarantinedStatus NotifyQuarantineStatus = iota + 1
	// NotifyQuarantineNotPending is NOT_PENDING (code 2, NOT_APPLIED).
	NotifyQuarantineNotPending
	// NotifyQuarantineWrongType is WRONG_TYPE (code 3, REJECTED).
	NotifyQuarantineWrongType
	// NotifyQuarantineInvalid is INVALID (code 4, REJECTED).
	NotifyQuarantineInvalid
)

func notifyQuarantineStatuses() []statusDef {
	return []statusDef{
		{"QUARANTINED", certainty.Applied},
		{"NOT_PENDING", certainty.NotApplied},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s NotifyQuarantineStatus) String() string {
	return statusName(notifyQuarantineStatuses(), uint8(s))
}

// Outcome returns the certainty the status reports.
func (s NotifyQuarantineStatus) Outcome() certainty.Outcome {
	return statusOutcome(notifyQuarantineStatuses(), uint8(s))
}

// NotifyInspectStatus is the status enum of notify-inspect-v1.
type NotifyInspectStatus uint8

// Statuses of notify-inspect-v1 (codes as in the manifest).
const (
	// NotifyFound is FOUND (code 1, APPLIED).
	NotifyFound NotifyInspectStatus = iota + 1
	// NotifyInspectAbsent is ABSENT (code 2, NOT_APPLIED).
	NotifyInspectAbsent
	// NotifyInspectWrongType is WRONG_TYPE (code 3, REJECTED).
	NotifyInspectWrongType
	// NotifyInspectInvalid is INVALID (code 4, REJECTED).
	NotifyInspectInvalid
)

func notifyInspectStatuses() []statusDef {
	return []statusDef{
		{"FOUND", certainty.Applied},
		{"ABSENT", certainty.NotApplied},
		{"WRONG_TYPE", certainty.Rejected},
		{"INVALID", certainty.Rejected},
	}
}

// String returns the manifest name of the status.
func (s NotifyInspectStatus) String() string { return statusName(notifyInspectStatuses(), uint8(s)) }

// Outcome returns the certainty the status reports.
func (s NotifyInspectStatus) Outcome() certainty.Outcome {
	return statusOutcome(notifyInspectStatuses(), uint8(s))
}

// notifyStatuses returns the status table of a notify program (nil for
// another id).
func notifyStatuses(id string) []statusDef {
	switch id {
	case "notify-submit-v1", "notify-submit-v2", "notify-submit-v3":
		return notifySubmitStatuses()
	case "notify-claim-v1":
		return notifyClaimStatuses()
	case "notify-claim-v2":
		return notifyClaimV2Statuses()
	case "notify-finalize-v1", "notify-finalize-v2":
		return notifyFinalizeStatuses()
	case "notify-quarantine-v1":
		return notifyQuarantineStatuses()
	case "notify-inspect-v1":
		return notifyInspectStatuses()
	}
	return nil
}
