package programs

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrIncompatible marks a reply the catalog does not understand: an
	// unknown result schema, an unknown status code or a malformed tuple. It
	// is a programming/compatibility failure, never a miss.
	ErrIncompatible = errors.New("programs: incompatible program reply")
	// ErrZeroKey rejects a facade call with an unbuilt keys.Key before
	// anything is sent.
	ErrZeroKey = errors.New("programs: zero key")
	// ErrCrossSlot rejects a call whose keys must share one Cluster slot
	// (cache-put-v2's generation and entry, a fenced lease's owner record
	// and fence counter) but do not, before anything is
	// sent, on standalone as well as on Cluster.
	ErrCrossSlot = errors.New("programs: keys of one program call are in different slots")
	// ErrResponseTooLarge rejects an idempotency completion whose response
	// payload exceeds the configured bound, before anything is sent (the
	// program refuses it too, before any write: RESPONSE_TOO_LARGE).
	ErrResponseTooLarge = errors.New("programs: idempotency response exceeds the configured bound")
	// ErrSHAMismatch reports that SCRIPT LOAD returned a script id different
	// from the manifest's sha1; the program is not retried.
	ErrSHAMismatch = errors.New("programs: SCRIPT LOAD returned an unexpected sha1")
	// ErrMode rejects an unknown or unsupported policy.ProgramMode.
	ErrMode = errors.New("programs: unsupported program mode")
	// ErrNotDeployed reports that Verify found the program set missing or
	// different on at least one primary.
	ErrNotDeployed = errors.New("programs: program set not deployed as expected")
	// ErrUnsupportedClient rejects a client type the catalog cannot fan out
	// over (for example a Ring).
	ErrUnsupportedClient = errors.New("programs: unsupported redis client type")
)

// Error wraps a transport or server error of one program call. Err is the
// go-redis error (or a wrapped sentinel) so the runtime's certainty
// classifier can inspect it; this package invents no certainty for it.
type Error struct {
	// Program is the program id, or an operation such as "deploy".
	Program string
	// Err is the underlying error.
	Err error
}

// Error implements error.
func (e *Error) Error() string { return "programs: " + e.Program + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// CompatibilityError describes an incompatible reply. It matches
// ErrIncompatible.
type CompatibilityError struct {
	Program string
	Reason  string
}

// Error implements error.
func (e *CompatibilityError) Error() string {
	return fmt.Sprintf("programs: %s: incompatible reply: %s", e.Program, e.Reason)
}

// Is makes errors.Is(err, ErrIncompatible) true.
func (e *CompatibilityError) Is(target error) bool { return target == ErrIncompatible }
