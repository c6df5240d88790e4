package programs

import (
	"context"
	"crypto/sha1" //nolint:gosec // the revision of compare-and-set is the Redis-side sha1hex of the value
	"encoding/hex"
	"strconv"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// statusDef is one row of a facade's status table; the row index + 1 is
// the manifest code.
type statusDef struct {
	name    string
	outcome certainty.Outcome
}

func statusName(defs []statusDef, code uint8) string {
	if code >= 1 && int(code) <= len(defs) {
		return defs[code-1].name
	}
	return "UNKNOWN(" + strconv.Itoa(int(code)) + ")"
}

// statusOutcome returns the zero (invalid) Outcome for an unknown code so a
// forged status can never read as success.
func statusOutcome(defs []statusDef, code uint8) certainty.Outcome {
	if code >= 1 && int(code) <= len(defs) {
		return defs[code-1].outcome
	}
	return 0
}

// millis renders a TTL as integer milliseconds. Sub-millisecond and
// non-positive TTLs are sent as they are and rejected by the program
// (INVALID), so the bounds live in one place: the Lua source.
func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Revision returns the revision compare-and-set-with-ttl-v1 compares: the
// lower-case hex SHA-1 of the stored bytes (what Redis's redis.sha1hex
// computes), so a caller derives it from the bytes it read.
func Revision(stored []byte) string {
	sum := sha1.Sum(stored) //nolint:gosec // revision id, not a security digest
	return hex.EncodeToString(sum[:])
}

// SetIfAbsentResult is the result of set-if-absent-with-ttl-v1.
type SetIfAbsentResult struct {
	Status SetIfAbsentStatus
	// ServerNowMillis is 0: the program reads no clock.
	ServerNowMillis int64
	// PTTL is the TTL set (SET) or the remaining TTL of the existing value (EXISTS).
	PTTL time.Duration
	// SameValue reports that the stored value equals the requested one
	// (always true for SET): on a repeat after a timeout it tells whether
	// the earlier call applied.
	SameValue bool
}

// Outcome returns the certainty of the call.
func (r SetIfAbsentResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// SetIfAbsentWithTTL stores value at target with ttl only when target is
// absent. operationID (1..128 bytes) identifies the attempt.
func (e *Executor) SetIfAbsentWithTTL(ctx context.Context, target keys.Key, value []byte, ttl time.Duration, operationID []byte) (SetIfAbsentResult, error) {
	r, err := e.run(ctx, "set-if-absent-with-ttl-v1", []keys.Key{target}, value, millis(ttl), operationID)
	if err != nil {
		return SetIfAbsentResult{}, err
	}
	return SetIfAbsentResult{
		Status: SetIfAbsentStatus(r.status), ServerNowMillis: r.serverNow,
		PTTL: time.Duration(r.int(0)) * time.Millisecond, SameValue: r.int(1) == 1,
	}, nil
}

// CompareAndDeleteResult is the result of compare-and-delete-v1.
type CompareAndDeleteResult struct {
	Status          CompareAndDeleteStatus
	ServerNowMillis int64
	// Deleted is the number of keys removed (1 for DELETED, else 0).
	Deleted int64
}

// Outcome returns the certainty of the call.
func (r CompareAndDeleteResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// CompareAndDelete deletes owner only while it holds expectedOwner.
func (e *Executor) CompareAndDelete(ctx context.Context, owner keys.Key, expectedOwner []byte) (CompareAndDeleteResult, error) {
	r, err := e.run(ctx, "compare-and-delete-v1", []keys.Key{owner}, expectedOwner)
	if err != nil {
		return CompareAndDeleteResult{}, err
	}
	return CompareAndDeleteResult{Status: CompareAndDeleteStatus(r.status), ServerNowMillis: r.serverNow, Deleted: r.int(0)}, nil
}

// CompareAndExpireResult is the result of compare-and-expire-v1.
type CompareAndExpireResult struct {
	Status          CompareAndExpireStatus
	ServerNowMillis int64
	// PTTL is the TTL set on RENEWED, else 0.
	PTTL time.Duration
}

// Outcome returns the certainty of the call.
func (r CompareAndExpireResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// CompareAndExpire sets ttl on owner only while it holds expectedOwner.
func (e *Executor) CompareAndExpire(ctx context.Context, owner keys.Key, expectedOwner []byte, ttl time.Duration) (CompareAndExpireResult, error) {
	r, err := e.run(ctx, "compare-and-expire-v1", []keys.Key{owner}, expectedOwner, millis(ttl))
	if err != nil {
		return CompareAndExpireResult{}, err
	}
	return CompareAndExpireResult{
		Status: CompareAndExpireStatus(r.status), ServerNowMillis: r.serverNow,
		PTTL: time.Duration(r.int(0)) * time.Millisecond,
	}, nil
}

// CompareAndSetResult is the result of compare-and-set-with-ttl-v1.
type CompareAndSetResult struct {
	Status          CompareAndSetStatus
	ServerNowMillis int64
	// PTTL is the TTL set on STORED, else 0.
	PTTL time.Duration
	// SameValue reports that the stored bytes equal the requested value
	// (true on STORED; on REVISION_CONFLICT it identifies a repeat whose
	// first attempt applied).
	SameValue bool
}

// Outcome returns the certainty of the call.
func (r CompareAndSetResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// CompareAndSetWithTTL replaces entry with value and ttl only while the
// stored bytes have revision expectedRevision (see Revision).
func (e *Executor) CompareAndSetWithTTL(ctx context.Context, entry keys.Key, expectedRevision string, value []byte, ttl time.Duration) (CompareAndSetResult, error) {
	r, err := e.run(ctx, "compare-and-set-with-ttl-v1", []keys.Key{entry}, expectedRevision, value, millis(ttl))
	if err != nil {
		return CompareAndSetResult{}, err
	}
	return CompareAndSetResult{
		Status: CompareAndSetStatus(r.status), ServerNowMillis: r.serverNow,
		PTTL: time.Duration(r.int(0)) * time.Millisecond, SameValue: r.int(1) == 1,
	}, nil
}

// IncrementResult is the result of increment-with-initial-ttl-v1.
type IncrementResult struct {
	Status          IncrementStatus
	ServerNowMillis int64
	// Value is the counter after INCREMENTED, or the unchanged current
	// value on LIMIT_EXCEEDED/OVERFLOW (0 when absent).
	Value int64
	// PTTL is the counter's remaining TTL after INCREMENTED, else 0.
	PTTL time.Duration
}

// Outcome returns the certainty of the call.
func (r IncrementResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// IncrementWithInitialTTL adds delta (>= 1) to counter unless the result
// would exceed limit; the first increment sets ttl. A denial changes nothing.
// It is not retry-safe: a repeat increments again.
func (e *Executor) IncrementWithInitialTTL(ctx context.Context, counter keys.Key, delta, limit int64, ttl time.Duration) (IncrementResult, error) {
	r, err := e.run(ctx, "increment-with-initial-ttl-v1", []keys.Key{counter},
		strconv.FormatInt(delta, 10), strconv.FormatInt(limit, 10), millis(ttl))
	if err != nil {
		return IncrementResult{}, err
	}
	return IncrementResult{
		Status: IncrementStatus(r.status), ServerNowMillis: r.serverNow,
		Value: r.int(0), PTTL: time.Duration(r.int(1)) * time.Millisecond,
	}, nil
}

// GenerationInitResult is the result of region-generation-init-v1.
type GenerationInitResult struct {
	Status          GenerationInitStatus
	ServerNowMillis int64
	// Generation is the region's generation after the call (empty on
	// WRONG_TYPE/INVALID).
	Generation []byte
}

// Outcome returns the certainty of the call.
func (r GenerationInitResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// RegionGenerationInit stores generation (16..128 random bytes) as the
// region's first generation unless one exists; either way it returns the
// current generation.
func (e *Executor) RegionGenerationInit(ctx context.Context, key keys.Key, generation []byte) (GenerationInitResult, error) {
	r, err := e.run(ctx, "region-generation-init-v1", []keys.Key{key}, generation)
	if err != nil {
		return GenerationInitResult{}, err
	}
	return GenerationInitResult{Status: GenerationInitStatus(r.status), ServerNowMillis: r.serverNow, Generation: r.bytes(0)}, nil
}

// GenerationBumpResult is the result of region-generation-bump-v1.
type GenerationBumpResult struct {
	Status          GenerationBumpStatus
	ServerNowMillis int64
	// Generation is the region's generation after the call.
	Generation []byte
}

// Outcome returns the certainty of the call.
func (r GenerationBumpResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// RegionGenerationBump replaces the region generation with a fresh random
// generation, invalidating every entry of the old one. Repeating the same
// call reports ALREADY_APPLIED.
func (e *Executor) RegionGenerationBump(ctx context.Context, key keys.Key, generation, operationID []byte) (GenerationBumpResult, error) {
	r, err := e.run(ctx, "region-generation-bump-v1", []keys.Key{key}, generation, operationID)
	if err != nil {
		return GenerationBumpResult{}, err
	}
	return GenerationBumpResult{Status: GenerationBumpStatus(r.status), ServerNowMillis: r.serverNow, Generation: r.bytes(0)}, nil
}

// RefreshClaimResult is the result of cache-refresh-claim-v1.
type RefreshClaimResult struct {
	Status          RefreshClaimStatus
	ServerNowMillis int64
	// PTTL is the lease's remaining TTL (the TTL set on ACQUIRED).
	PTTL time.Duration
}

// Outcome returns the certainty of the call.
func (r RefreshClaimResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// CacheRefreshClaim claims the soft refresh lease of a cache entry for owner.
func (e *Executor) CacheRefreshClaim(ctx context.Context, lease keys.Key, owner []byte, ttl time.Duration, operationID []byte) (RefreshClaimResult, error) {
	r, err := e.run(ctx, "cache-refresh-claim-v1", []keys.Key{lease}, owner, millis(ttl), operationID)
	if err != nil {
		return RefreshClaimResult{}, err
	}
	return RefreshClaimResult{
		Status: RefreshClaimStatus(r.status), ServerNowMillis: r.serverNow,
		PTTL: time.Duration(r.int(0)) * time.Millisecond,
	}, nil
}

// RefreshReleaseResult is the result of cache-refresh-release-v1.
type RefreshReleaseResult struct {
	Status          RefreshReleaseStatus
	ServerNowMillis int64
	// Deleted is 1 on RELEASED, else 0.
	Deleted int64
}

// Outcome returns the certainty of the call.
func (r RefreshReleaseResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// CacheRefreshRelease releases the soft refresh lease only while owner holds it.
func (e *Executor) CacheRefreshRelease(ctx context.Context, lease keys.Key, owner []byte) (RefreshReleaseResult, error) {
	r, err := e.run(ctx, "cache-refresh-release-v1", []keys.Key{lease}, owner)
	if err != nil {
		return RefreshReleaseResult{}, err
	}
	return RefreshReleaseResult{Status: RefreshReleaseStatus(r.status), ServerNowMillis: r.serverNow, Deleted: r.int(0)}, nil
}
