package plugins

import (
	"fmt"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/internal/guestio"
)

// Class classifies a guest failure. The set is closed so it can label
// metrics. A Class is an error value: errors.Is(err, plugins.ClassDeadline).
type Class string

// Failure classes.
const (
	// ClassTrap: the guest trapped or exited (includes a Go panic in the guest).
	ClassTrap Class = "trap"
	// ClassDeadline: the call exceeded its deadline and the instance was stopped.
	ClassDeadline Class = "deadline"
	// ClassCanceled: the caller's context was canceled during the call.
	ClassCanceled Class = "canceled"
	// ClassMemory: the guest ran into its memory limit (or declares more than it).
	ClassMemory Class = "memory"
	// ClassOutputTooLarge: the response exceeded the module's output cap.
	ClassOutputTooLarge Class = "output-too-large"
	// ClassMalformedOutput: the response violated the ABI encoding or its bounds.
	ClassMalformedOutput Class = "malformed-output"
	// ClassInputTooLarge: the request exceeded the module's input cap (not sent).
	ClassInputTooLarge Class = "input-too-large"
	// ClassHostCallLimit: the guest made more host calls in one invocation than allowed.
	ClassHostCallLimit Class = "host-call-limit"
	// ClassBadHostCall: the guest passed a host function an out-of-bounds region.
	ClassBadHostCall Class = "bad-host-call"
	// ClassABIMismatch: unsupported ABI major, or an export with the wrong signature.
	ClassABIMismatch Class = "abi-mismatch"
	// ClassForbiddenImport: the module imports something outside the allowlist.
	ClassForbiddenImport Class = "forbidden-import"
	// ClassInvalidModule: not a loadable wasm module, or a required export is missing.
	ClassInvalidModule Class = "invalid-module"
	// ClassInvalidDescription: describe output failed validation.
	ClassInvalidDescription Class = "invalid-description"
	// ClassNotDeclared: the host called an export whose kind the module does not declare (not sent).
	ClassNotDeclared Class = "not-declared"
	// ClassPoolTimeout: no instance became free before the caller's context ended (not sent).
	ClassPoolTimeout Class = "pool-timeout"
	// ClassClosed: the module was closed (not sent, or interrupted by Close).
	ClassClosed Class = "closed"
)

// Error implements error so a Class can be an errors.Is target.
func (c Class) Error() string { return "guest failure class " + string(c) }

// GuestError is the only failure type the engine returns for a guest. The
// instance involved (if any) has been discarded; the module keeps serving.
type GuestError struct {
	Module string
	Export string
	Class  Class
	// Detail is bounded, sanitised text for operators (never request data).
	Detail string
	// Err is the underlying cause, if any (context errors, *abi.VersionError, ...).
	Err error
}

// Error implements error.
func (e *GuestError) Error() string {
	s := fmt.Sprintf("guest %s", e.Module)
	if e.Export != "" {
		s += " export " + e.Export
	}
	s += ": " + string(e.Class)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches the failure class.
func (e *GuestError) Is(target error) bool {
	c, ok := target.(Class)
	return ok && c == e.Class
}

// Unwrap returns the cause.
func (e *GuestError) Unwrap() error { return e.Err }

// NotSent reports whether the request never reached guest code, so a caller
// may try again elsewhere without the guest having seen it.
func (e *GuestError) NotSent() bool {
	switch e.Class {
	case ClassInputTooLarge, ClassNotDeclared, ClassPoolTimeout:
		return true
	}
	return false
}

func guestErr(module string, e abi.Export, c Class, detail string, cause error) *GuestError {
	return &GuestError{Module: module, Export: e.Name(), Class: c, Detail: guestio.Sanitize([]byte(detail), 512), Err: cause}
}
