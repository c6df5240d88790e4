package abi

import (
	"errors"
	"fmt"
)

// ABI version implemented by this package. A host accepts a guest whose major
// equals Major, whatever its minor: minors only add exports or messages, and
// the host discovers which ones a module has from describe.
const (
	Major uint16 = 1
	Minor uint16 = 0
)

// ErrUnsupportedMajor is matched (errors.Is) by a *VersionError.
var ErrUnsupportedMajor = errors.New("abi: unsupported ABI major version")

// VersionError reports a guest built against an ABI major this host does not speak.
type VersionError struct {
	GuestMajor, GuestMinor uint16
}

// Error implements error.
func (e *VersionError) Error() string {
	return fmt.Sprintf("abi: guest speaks ABI %d.%d, host speaks %d.%d: rebuild the guest against caphost ABI major %d",
		e.GuestMajor, e.GuestMinor, Major, Minor, Major)
}

// Is makes errors.Is(err, ErrUnsupportedMajor) true.
func (e *VersionError) Is(target error) bool { return target == ErrUnsupportedMajor }

// PackVersion packs a version into the u32 returned by the caphost_abi_version export.
func PackVersion(major, minor uint16) uint32 { return uint32(major)<<16 | uint32(minor) }

// UnpackVersion is the inverse of PackVersion.
func UnpackVersion(v uint32) (major, minor uint16) { return uint16(v >> 16), uint16(v) }

// CheckVersion returns nil when a guest declaring major.minor can be served by this host.
func CheckVersion(major, minor uint16) error {
	if major != Major {
		return &VersionError{GuestMajor: major, GuestMinor: minor}
	}
	return nil
}
