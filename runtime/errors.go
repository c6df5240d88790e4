package runtime

import (
	"errors"
	"fmt"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

var (
	// ErrConfig is matched by every error New returns for an invalid model.
	ErrConfig = errors.New("invalid redis runtime config")
	// ErrRoleNotSelected is matched by *RoleError.
	ErrRoleNotSelected = errors.New("redis role not selected")
	// ErrLaneClosed is matched by admission refusals of a draining or closed runtime.
	ErrLaneClosed = errors.New("redis lane is not open")
	// ErrOverloaded is matched by admission refusals of a full lane.
	ErrOverloaded = errors.New("redis lane in-flight limit reached")
	// ErrDrainTimeout is returned by Close when in-flight calls outlived the
	// drain budget (the clients were closed anyway).
	ErrDrainTimeout = errors.New("redis runtime drain timed out")
)

// RoleError reports a role that the configuration does not select.
type RoleError struct {
	Role policy.Role
}

func (e *RoleError) Error() string { return fmt.Sprintf("redis role %q is not selected", e.Role) }

// Is matches ErrRoleNotSelected.
func (e *RoleError) Is(target error) bool { return target == ErrRoleNotSelected }

// AdmissionError is a refusal by the runtime's admission hook. The call
// never reached go-redis, so it was never sent.
type AdmissionError struct {
	Deployment string
	Lane       policy.Lane
	// Outcome is UnavailableBeforeSend (lane draining/closed) or
	// OverloadedBeforeSend (in-flight limit, waited Timeouts.Acquire).
	Outcome certainty.Outcome
}

func (e *AdmissionError) Error() string {
	if e.Outcome == certainty.OverloadedBeforeSend {
		return fmt.Sprintf("redis %s/%s: in-flight limit reached", e.Deployment, e.Lane)
	}
	return fmt.Sprintf("redis %s/%s: lane is not open", e.Deployment, e.Lane)
}

// CertaintyOutcome implements certainty.Outcomer.
func (e *AdmissionError) CertaintyOutcome() certainty.Outcome { return e.Outcome }

// Is matches ErrOverloaded or ErrLaneClosed.
func (e *AdmissionError) Is(target error) bool {
	if e.Outcome == certainty.OverloadedBeforeSend {
		return target == ErrOverloaded
	}
	return target == ErrLaneClosed
}

// beforeSendError marks a failure the admission hook proved happened before
// the command was written: a dial failure (wrapped by the dial hook), a
// failed connection handshake, or a wait for a pool turn or a dial that the
// caller's context ended. It keeps the cause for errors.As.
type beforeSendError struct {
	reason string
	cause  error
}

func (e *beforeSendError) Error() string { return "redis " + e.reason + ": " + e.cause.Error() }
func (e *beforeSendError) Unwrap() error { return e.cause }

// CertaintyOutcome implements certainty.Outcomer.
func (e *beforeSendError) CertaintyOutcome() certainty.Outcome {
	return certainty.UnavailableBeforeSend
}
