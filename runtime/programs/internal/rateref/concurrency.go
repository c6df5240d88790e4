package rateref

import (
	"fmt"
	"strings"
)

// MaxPermits bounds the concurrency limiter's owner set (and so its prune).
const MaxPermits = 10_000

// Concurrency program statuses (codes equal the manifest codes).
const (
	// acquire
	PermitAcquired    Status = 1
	PermitAlreadyHeld Status = 2
	PermitContended   Status = 3
	PermitClockUnsafe Status = 4
	// renew and release
	PermitRenewed          Status = 1
	PermitReleased         Status = 1
	PermitNotHeld          Status = 2
	PermitClockUnsafeOwner Status = 3
)

// ConcurrencyState mirrors the rate-concurrency-* ZSET: owner -> expiry ms,
// plus the sentinel "!v1:<revision>" scored minus the last effective time.
type ConcurrencyState struct {
	Present  bool
	Owners   map[string]int64
	Observed int64
}

// PermitDecision is the result of a concurrency program.
type PermitDecision struct {
	Status           Status
	InUse            int64
	MaxPermits       int64
	ExpiresAtMillis  int64
	RetryAfterMillis int64
}

// prune applies the clamp and removes owners whose expiry is <= effective
// time (the bounded prune every call performs). ok is false on CLOCK_UNSAFE.
func (s *ConcurrencyState) prune(now, maxStep int64) (eff int64, ok bool) {
	eff, unsafe := clamp(s.Present, s.Observed, now, maxStep)
	if unsafe {
		return 0, false
	}
	for o, exp := range s.Owners {
		if exp <= eff {
			delete(s.Owners, o)
		}
	}
	return eff, true
}

func validOwner(owner string) bool {
	return len(owner) >= 1 && len(owner) <= 128 && !strings.HasPrefix(owner, "!")
}

func validPermitTTL(ttl, maxStep int64) bool {
	return ttl >= 1 && ttl <= MaxWindowMillis && maxStep >= 0 && maxStep <= MaxClockStepMillis
}

// ConcurrencyAcquire takes a permit for owner until now+ttl when fewer than
// maxPermits live owners hold one. A live owner gets ALREADY_HELD (not
// extended); a full set gets CONTENDED with the wait until the earliest
// expiry. Expired owners are pruned first, even when refused.
func ConcurrencyAcquire(st *ConcurrencyState, now int64, maxPermits int64, owner string, ttl, maxStep int64) (PermitDecision, error) {
	if maxPermits < 1 || maxPermits > MaxPermits || !validOwner(owner) || !validPermitTTL(ttl, maxStep) {
		return PermitDecision{Status: 6}, fmt.Errorf("%w: acquire", ErrInvalid)
	}
	eff, ok := st.prune(now, maxStep)
	if !ok {
		return PermitDecision{Status: PermitClockUnsafe}, nil
	}
	if exp, held := st.Owners[owner]; held {
		return PermitDecision{Status: PermitAlreadyHeld, InUse: int64(len(st.Owners)), MaxPermits: maxPermits, ExpiresAtMillis: exp}, nil
	}
	if int64(len(st.Owners)) >= maxPermits {
		earliest := int64(-1)
		for _, exp := range st.Owners {
			if earliest < 0 || exp < earliest {
				earliest = exp
			}
		}
		return PermitDecision{Status: PermitContended, InUse: int64(len(st.Owners)), MaxPermits: maxPermits, RetryAfterMillis: max(1, earliest-eff)}, nil
	}
	if st.Owners == nil {
		st.Owners = map[string]int64{}
	}
	st.Owners[owner] = eff + ttl
	st.Present, st.Observed = true, eff
	return PermitDecision{Status: PermitAcquired, InUse: int64(len(st.Owners)), MaxPermits: maxPermits, ExpiresAtMillis: eff + ttl}, nil
}

// ConcurrencyRenew extends a live owner's permit to now+ttl.
func ConcurrencyRenew(st *ConcurrencyState, now int64, owner string, ttl, maxStep int64) (PermitDecision, error) {
	if !validOwner(owner) || !validPermitTTL(ttl, maxStep) {
		return PermitDecision{Status: 5}, fmt.Errorf("%w: renew", ErrInvalid)
	}
	eff, ok := st.prune(now, maxStep)
	if !ok {
		return PermitDecision{Status: PermitClockUnsafeOwner}, nil
	}
	if _, held := st.Owners[owner]; !held {
		return PermitDecision{Status: PermitNotHeld, InUse: int64(len(st.Owners))}, nil
	}
	st.Owners[owner] = eff + ttl
	st.Observed = eff
	return PermitDecision{Status: PermitRenewed, InUse: int64(len(st.Owners)), ExpiresAtMillis: eff + ttl}, nil
}

// ConcurrencyRelease returns a live owner's permit; only the owner can.
func ConcurrencyRelease(st *ConcurrencyState, now int64, owner string, maxStep int64) (PermitDecision, error) {
	if !validOwner(owner) || maxStep < 0 || maxStep > MaxClockStepMillis {
		return PermitDecision{Status: 5}, fmt.Errorf("%w: release", ErrInvalid)
	}
	eff, ok := st.prune(now, maxStep)
	if !ok {
		return PermitDecision{Status: PermitClockUnsafeOwner}, nil
	}
	if _, held := st.Owners[owner]; !held {
		return PermitDecision{Status: PermitNotHeld, InUse: int64(len(st.Owners))}, nil
	}
	delete(st.Owners, owner)
	st.Observed = eff
	return PermitDecision{Status: PermitReleased, InUse: int64(len(st.Owners))}, nil
}
