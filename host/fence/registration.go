package fence

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"unicode/utf8"
)

// State is a registration's fencing status.
type State uint8

const (
	// Pending: registered in the resource's durable store but the Redis
	// counter is not provisioned (or not yet verified). Every token is
	// rejected; fenced acquires fail closed.
	Pending State = iota + 1
	// Active: the counter is provisioned at this epoch; tokens of this
	// epoch at or above the high watermark are admitted.
	Active
	// Retired: a durable tombstone. Every token is rejected; the epoch is
	// never reused, and a re-registration takes a strictly larger one.
	Retired
)

var stateNames = [...]string{Pending: "PENDING", Active: "ACTIVE", Retired: "RETIRED"}

// String returns "PENDING", "ACTIVE" or "RETIRED" — the values stored in
// the state column.
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

func parseState(s string) (State, bool) {
	for i, n := range stateNames {
		if n != "" && n == s {
			return State(i), true
		}
	}
	return 0, false
}

// Mode chooses what an equal token means.
type Mode uint8

const (
	// Strict (the zero Mode) admits every token at most once: an equal
	// token is stale, the reference's rule verbatim. It is the safe choice
	// when a failover can make the Redis counter issue a counter value
	// again before the operator reprovisions it: the second holder of that
	// value is refused.
	Strict Mode = iota
	// Repeatable admits a token equal to the high watermark, so the current
	// holder may write several times under one lease. Choose it only where
	// a re-issued counter cannot happen (a counter on a deployment that
	// cannot lose acknowledged increments) or a second holder of the same
	// value is acceptable.
	Repeatable
)

// Digest is a registration digest: 32 random bytes minted with the
// registration and written, with the epoch, into the Redis counter
// envelope by fenced-counter-provision-v1. It binds a provisioned counter
// to exactly one durable registration. Its text form is 64 lower-case hex
// digits.
type Digest [32]byte

// NewDigest returns a random Digest.
func NewDigest() Digest {
	var d Digest
	_, _ = rand.Read(d[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return d
}

// String returns the 64 lower-case hex digits.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// IsZero reports whether d is all zero bytes (no digest).
func (d Digest) IsZero() bool { return d == Digest{} }

// MarshalText returns the 64 lower-case hex digits.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses exactly 64 lower-case hex digits (ErrSyntax
// otherwise).
func (d *Digest) UnmarshalText(text []byte) error {
	v, err := parseDigest(text)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ParseDigest parses exactly 64 lower-case hex digits; the error wraps
// ErrSyntax.
func ParseDigest(s string) (Digest, error) { return parseDigest([]byte(s)) }

func parseDigest(text []byte) (Digest, error) {
	var d Digest
	if len(text) != 2*len(d) {
		return d, parseErr(text, ErrSyntax)
	}
	for _, c := range text {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return d, parseErr(text, ErrSyntax)
		}
	}
	_, _ = hex.Decode(d[:], text)
	return d, nil
}

// Registration is a resource's durable fencing registration — the row the
// protected side owns (reference §23.3.1 "Counter registration and
// restore").
type Registration struct {
	// Resource is the resource id: 1..MaxResourceLen bytes of UTF-8.
	Resource string
	// Epoch is the registration's resource epoch, never 0.
	Epoch uint64
	// Digest is the registration digest.
	Digest Digest
	// State is PENDING, ACTIVE or RETIRED.
	State State
	// HighWatermark is the largest counter admitted in Epoch (0: none).
	// After a Redis counter loss the operator reprovisions the counter at
	// or above it, never below.
	HighWatermark int64
}

// Watermark returns the registration's epoch and high watermark as a
// Token (with Counter 0 before the first admission).
func (r Registration) Watermark() Token { return Token{Epoch: r.Epoch, Counter: r.HighWatermark} }

// MaxResourceLen bounds a resource id in bytes.
const MaxResourceLen = 255

func validResource(resource string) bool {
	return resource != "" && len(resource) <= MaxResourceLen && utf8.ValidString(resource)
}

// MaxEpoch is the largest epoch this package mints: 2^53−1, the bound the
// Redis side's fenced programs accept (their integers stay exact as Lua
// numbers). A token's text form may carry any 64-bit epoch, but a
// registration never does, so every registered epoch can be provisioned.
const MaxEpoch uint64 = 1<<53 - 1

// Epochs minted here start below 2^48 and grow by at most 2^20 per
// re-registration, so at least 2^32 re-registrations fit below MaxEpoch.
const (
	firstEpochBits = 48
	epochStepBits  = 20
)

func randUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// firstEpoch returns a random epoch in 1..2^48: a resource id that is
// deleted and created again does not meet its old epoch in practice.
func firstEpoch() uint64 { return randUint64()>>(64-firstEpochBits) + 1 }

// nextEpoch returns a random epoch strictly above prev (prev+1 ..
// prev+2^20) and at most MaxEpoch, or false when none is left.
func nextEpoch(prev uint64) (uint64, bool) {
	step := randUint64()>>(64-epochStepBits) + 1
	if prev >= MaxEpoch {
		return 0, false
	}
	return min(prev+step, MaxEpoch), true
}

// decide is the admission rule that Guard and Store share.
func decide(st State, epoch uint64, hwm int64, tok Token, mode Mode) Outcome {
	switch {
	case tok.Validate() != nil:
		return Invalid
	case st != Active:
		return NotActive
	case tok.Epoch < epoch:
		return EpochRetired
	case tok.Epoch > epoch:
		return EpochUnregistered
	case tok.Counter > hwm:
		return Admitted
	case tok.Counter == hwm && mode == Repeatable:
		return Readmitted
	}
	return Stale
}
