package abi

import (
	"errors"
	"fmt"
)

// ABI version implemented by this package. A host accepts a guest whose major
// equals Major and whose minor is at most Minor: a minor adds exports,
// messages or optional describe fields, and a host that predates one cannot
// honour what a guest built for it declares (its strict describe decoder
// would refuse the unknown field anyway), so it says so by version.
//
// Minor history (ABI.md §1): 1 added TemplateDecl.ParamSpecs.
const (
	Major uint16 = 1
	Minor uint16 = 1
)

// ErrUnsupportedMajor is matched (errors.Is) by a *VersionError whose guest
// major differs from Major.
var ErrUnsupportedMajor = errors.New("abi: unsupported ABI major version")

// ErrNewerMinor is matched (errors.Is) by a *VersionError whose guest speaks
// this major with a minor newer than Minor.
var ErrNewerMinor = errors.New("abi: guest needs a newer ABI minor version")

// VersionError reports a guest built against an ABI this host does not
// speak: another major, or a newer minor of this one.
type VersionError struct {
	GuestMajor, GuestMinor uint16
}

// Error implements error.
func (e *VersionError) Error() string {
	if e.GuestMajor == Major {
		return fmt.Sprintf("abi: guest speaks ABI %d.%d, host speaks %d.%d: upgrade caphost, or rebuild the guest against caphost ABI %d.%d or older",
			e.GuestMajor, e.GuestMinor, Major, Minor, Major, Minor)
	}
	return fmt.Sprintf("abi: guest speaks ABI %d.%d, host speaks %d.%d: rebuild the guest against caphost ABI major %d",
		e.GuestMajor, e.GuestMinor, Major, Minor, Major)
}

// Is makes errors.Is(err, ErrUnsupportedMajor) true for another major and
// errors.Is(err, ErrNewerMinor) for a newer minor.
func (e *VersionError) Is(target error) bool {
	switch target {
	case ErrUnsupportedMajor:
		return e.GuestMajor != Major
	case ErrNewerMinor:
		return e.GuestMajor == Major && e.GuestMinor > Minor
	}
	return false
}

// PackVersion packs a version into the u32 returned by the caphost_abi_version export.
func PackVersion(major, minor uint16) uint32 { return uint32(major)<<16 | uint32(minor) }

// UnpackVersion is the inverse of PackVersion.
func UnpackVersion(v uint32) (major, minor uint16) { return uint16(v >> 16), uint16(v) }

// CheckVersion returns nil when a guest declaring major.minor can be served
// by this host, else a *VersionError.
func CheckVersion(major, minor uint16) error {
	if major != Major || minor > Minor {
		return &VersionError{GuestMajor: major, GuestMinor: minor}
	}
	return nil
}
