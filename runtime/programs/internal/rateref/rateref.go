// Package rateref is the pure-Go reference implementation of caphost's
// rate-limit catalog programs (rate-fixed-window-v1, -v2 and -v3,
// rate-sliding-counter-v1 and -v2, rate-token-bucket-v1 and -v2,
// rate-gcra-v1 and -v2, rate-sliding-log-v1 and the rate-concurrency-*
// permit programs): the same state model,
// fixed-point arithmetic, clock clamp and evaluation-id dedup as the Lua
// sources, written from the formulas of the design (§20) so property tests
// can drive identical request streams through both and compare every
// decision. It is test support for runtime/programs only.
//
// What may change here: it must change together with the Lua sources (a new
// program id means a new reference function, unless, as for the v2 rate
// programs, only the encoding of the state changed); the formulas
// themselves are normative and are not tuned here.
//
// Time is an input: every function takes the server time the program read
// (Redis TIME, in milliseconds) so a caller can replay exactly the clock a
// real server reported.
package rateref

import (
	"errors"
	"fmt"
)

// Scale is the fixed-point scale of the token bucket and of the sliding
// counter's previous-window weight.
const Scale = 1_000_000

// Bounds shared with the Lua sources; every intermediate stays below 2^53 so
// Lua numbers (doubles) are exact.
const (
	MaxSafeInteger     = 1<<53 - 1
	MaxWindowMillis    = 2_592_000_000 // 30 days, the catalog's maxTtlMillis
	MaxLimit           = 1_000_000_000
	MaxClockStepMillis = 86_400_000
	MaxGraceMillis     = 86_400_000
	MaxDedupTTLMillis  = 86_400_000
	MaxDedupEntries    = 4096
	MaxBucketProduct   = 1 << 52 // capacityScaled * periodMillis bound
	MaxScaledCapacity  = 1 << 52
	MaxEvaluationIDLen = 128
	MaxRevisionLen     = 64
)

// MaxFixedWindowV3Millis is rate-fixed-window-v3's longest window: 366 days
// (a leap year), so that a year as envoyproxy/ratelimit counts it (365 days)
// is one window. Its intermediates stay below 2^53 too: the effective time
// is at most the server time + MaxClockStepMillis, the window end at most
// that + the window.
const MaxFixedWindowV3Millis = 31_622_400_000

// Status is a program status; codes equal the manifest codes.
type Status uint8

// Statuses shared by the three rate programs.
const (
	Allowed     Status = 1
	Denied      Status = 2
	DedupReplay Status = 3
	ClockUnsafe Status = 4
	WrongType   Status = 5
	Invalid     Status = 6
)

// ErrInvalid reports parameters the programs answer with INVALID.
var ErrInvalid = errors.New("rateref: invalid parameters")

// Decision is one evaluation's result.
type Decision struct {
	Status           Status
	Allowed          bool
	Limit            int64
	Remaining        int64
	RetryAfterMillis int64
	ResetAtMillis    int64
	// StateTTLMillis is the TTL the program set on the state key (0 when it
	// wrote no state).
	StateTTLMillis int64
}

// Common carries the clock and dedup parameters every rate program takes.
type Common struct {
	MaxClockStepMillis int64
	CleanupGraceMillis int64
	// DedupTTLMillis 0 disables evaluation dedup.
	DedupTTLMillis  int64
	DedupMaxEntries int64
	EvaluationID    string
}

func (c Common) validate() error {
	switch {
	case c.MaxClockStepMillis < 0 || c.MaxClockStepMillis > MaxClockStepMillis:
		return fmt.Errorf("%w: max clock step %d", ErrInvalid, c.MaxClockStepMillis)
	case c.CleanupGraceMillis < 0 || c.CleanupGraceMillis > MaxGraceMillis:
		return fmt.Errorf("%w: cleanup grace %d", ErrInvalid, c.CleanupGraceMillis)
	case c.DedupTTLMillis < 0 || c.DedupTTLMillis > MaxDedupTTLMillis:
		return fmt.Errorf("%w: dedup ttl %d", ErrInvalid, c.DedupTTLMillis)
	case c.DedupMaxEntries < 1 || c.DedupMaxEntries > MaxDedupEntries:
		return fmt.Errorf("%w: dedup max entries %d", ErrInvalid, c.DedupMaxEntries)
	case len(c.EvaluationID) < 1 || len(c.EvaluationID) > MaxEvaluationIDLen:
		return fmt.Errorf("%w: evaluation id length %d", ErrInvalid, len(c.EvaluationID))
	}
	return nil
}

// DedupRecord is one remembered decision.
type DedupRecord struct {
	Decision   Decision
	RecordedAt int64
}

// Dedup models the dedup hash (evaluation id -> decision). Eviction when
// full is random in Redis, so the reference refuses to model it: Record
// reports false when an eviction would be needed.
type Dedup struct {
	Entries map[string]DedupRecord
}

// lookup returns the remembered decision of id when it is younger than ttl.
func (d *Dedup) lookup(id string, now, ttl int64) (Decision, bool) {
	r, ok := d.Entries[id]
	if !ok || now-r.RecordedAt >= ttl {
		return Decision{}, false
	}
	out := r.Decision
	out.Status = DedupReplay
	out.StateTTLMillis = 0
	return out, true
}

// ErrEviction reports that the Lua program would evict a random dedup
// record, which the reference cannot predict.
var ErrEviction = errors.New("rateref: dedup eviction is not modelled")

func (d *Dedup) record(id string, dec Decision, now, maxEntries int64) error {
	if d.Entries == nil {
		d.Entries = map[string]DedupRecord{}
	}
	if _, ok := d.Entries[id]; !ok && int64(len(d.Entries)) >= maxEntries {
		return ErrEviction
	}
	d.Entries[id] = DedupRecord{Decision: dec, RecordedAt: now}
	return nil
}

// clamp applies the §20.1 clock rule: time never goes backwards in state,
// and a server clock further behind the last observation than maxStep is
// unsafe.
func clamp(present bool, observed, now, maxStep int64) (eff int64, unsafe bool) {
	if present && observed > now {
		if observed-now > maxStep {
			return 0, true
		}
		return observed, false
	}
	return now, false
}

// ceilDiv is ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// evaluate wraps an algorithm step with the shared dedup and clock rules.
func evaluate(now int64, c Common, d *Dedup, present bool, observed int64, step func(eff int64) Decision) (Decision, error) {
	if c.DedupTTLMillis > 0 {
		if dec, ok := d.lookup(c.EvaluationID, now, c.DedupTTLMillis); ok {
			return dec, nil
		}
	}
	eff, unsafe := clamp(present, observed, now, c.MaxClockStepMillis)
	if unsafe {
		return Decision{Status: ClockUnsafe}, nil
	}
	dec := step(eff)
	if c.DedupTTLMillis > 0 {
		if err := d.record(c.EvaluationID, dec, now, c.DedupMaxEntries); err != nil {
			return dec, err
		}
	}
	return dec, nil
}
