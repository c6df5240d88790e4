package fence

import (
	"errors"
	"fmt"
	"strconv"
)

// Outcome is the result of presenting a token to a Guard or a Store.
type Outcome uint8

const (
	// Admitted: the token is above the high watermark of the registered
	// epoch; the watermark advanced to it.
	Admitted Outcome = iota + 1
	// Readmitted: the token equals the high watermark — the current holder
	// writing again (Repeatable mode only). The watermark is unchanged.
	Readmitted
	// Stale: the token's counter is below the watermark (or equal to it in
	// Strict mode): a newer holder has written. Error: ErrStaleToken.
	Stale
	// EpochRetired: the token's epoch is lower than the registered epoch;
	// its registration was retired. Error: ErrEpochRetired.
	EpochRetired
	// EpochUnregistered: the token's epoch is higher than the registered
	// epoch. A token never raises the epoch; only a registration does.
	// Error: ErrEpochUnregistered.
	EpochUnregistered
	// NotActive: the resource is PENDING or RETIRED. Error:
	// ErrResourceNotActive.
	NotActive
	// UnknownResource: the Store has no registration for the resource.
	// Error: ErrUnknownResource.
	UnknownResource
	// Invalid: the token is out of range (see Token.Validate). Error:
	// ErrRange.
	Invalid
)

var outcomeNames = [...]string{
	Admitted:          "ADMITTED",
	Readmitted:        "READMITTED",
	Stale:             "STALE",
	EpochRetired:      "EPOCH_RETIRED",
	EpochUnregistered: "EPOCH_UNREGISTERED",
	NotActive:         "NOT_ACTIVE",
	UnknownResource:   "UNKNOWN_RESOURCE",
	Invalid:           "INVALID",
}

// String returns the outcome's upper-case name, e.g. "STALE"; a bounded
// set, fit for a metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// OK reports whether the token was admitted (Admitted or Readmitted).
func (o Outcome) OK() bool { return o == Admitted || o == Readmitted }

// Err returns the sentinel error of a rejecting outcome and nil for
// Admitted and Readmitted.
func (o Outcome) Err() error {
	switch o {
	case Admitted, Readmitted:
		return nil
	case Stale:
		return ErrStaleToken
	case EpochRetired:
		return ErrEpochRetired
	case EpochUnregistered:
		return ErrEpochUnregistered
	case NotActive:
		return ErrResourceNotActive
	case UnknownResource:
		return ErrUnknownResource
	case Invalid:
		return ErrRange
	}
	return errUnknownOutcome
}

var errUnknownOutcome = errors.New("fence: unknown outcome")

// Rejection sentinels. A rejected write returns a *RejectError that
// errors.Is matches against exactly one of these (or ErrRange).
var (
	// ErrStaleToken: a newer holder has written; this holder lost the lease
	// and must stop.
	ErrStaleToken = errors.New("fence: stale token")
	// ErrEpochRetired: the token belongs to a retired registration.
	ErrEpochRetired = errors.New("fence: token epoch retired")
	// ErrEpochUnregistered: the token's epoch is above the registered one;
	// the resource has not been (re-)registered at that epoch.
	ErrEpochUnregistered = errors.New("fence: token epoch not registered")
	// ErrResourceNotActive: the registration is PENDING or RETIRED.
	ErrResourceNotActive = errors.New("fence: resource not active")
	// ErrUnknownResource: no registration exists for the resource.
	ErrUnknownResource = errors.New("fence: unknown resource")
)

// Registration-lifecycle errors.
var (
	// ErrRegistrationConflict: a lifecycle step (Register, Activate, Retire,
	// Reregister, Abandon) does not match the durable registration: the
	// resource exists already, or its state, epoch or digest differ.
	ErrRegistrationConflict = errors.New("fence: registration conflict")
	// ErrEpochExhausted: no larger epoch is left for a re-registration.
	ErrEpochExhausted = errors.New("fence: epoch space exhausted")
)

// RejectError describes a rejected token. errors.Is(err, Outcome.Err())
// holds for its Outcome.
type RejectError struct {
	// Resource is the resource id ("" for a Guard).
	Resource string
	// Token is the presented token.
	Token Token
	// Outcome is the rejecting outcome (never Admitted or Readmitted).
	Outcome Outcome
	// State and Watermark describe the registration as seen when the token
	// was rejected: its state, and its epoch with the high watermark
	// counter (counter 0: nothing admitted yet). Both are zero for
	// UnknownResource.
	State     State
	Watermark Token
}

// Error implements error.
func (e *RejectError) Error() string {
	res := ""
	if e.Resource != "" {
		res = " for resource " + strconv.Quote(e.Resource)
	}
	return fmt.Sprintf("%v: token %v rejected%s (%v, registration %v at %v)",
		e.Outcome.Err(), e.Token, res, e.Outcome, e.State, e.Watermark)
}

// Is matches the outcome's sentinel error.
func (e *RejectError) Is(target error) bool { return target == e.Outcome.Err() }

// OutcomeOf returns the Outcome carried by a *RejectError in err's chain,
// and 0 when there is none.
func OutcomeOf(err error) Outcome {
	var r *RejectError
	if errors.As(err, &r) {
		return r.Outcome
	}
	return 0
}
