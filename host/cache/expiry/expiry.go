// Package expiry owns when a cache entry ends: deterministic TTL jitter
// keyed on the region's policy revision and the entry's key, the absolute
// soft and hard expiries written into the envelope, and the physical Redis
// TTL (PX) that matches them. It is a leaf (stdlib only); host/cache calls
// it on every record with the host's injected clock.
//
// # Jitter
//
// Entries written together must not expire together (a stampede at the
// TTL boundary). Jitter shortens a configured TTL to a value spread
// uniformly over whole milliseconds in [ttl − ⌊ttl×spread⌋, ttl] (spread
// taken to six decimals), never below the policy's hard minimum: draws that
// would fall below it are held at it. It only ever shortens: the configured TTL
// stays an upper bound on staleness, so jitter never delays an expiry a
// policy promised (the reference's symmetric ±jitter would).
//
// The sample is deterministic: the first 8 bytes of SHA-256 over a domain
// tag, the length-prefixed policy revision and the length-prefixed key.
// The same revision and key give the same TTL in every process, on every
// architecture and across restarts (no map hashing, no math/rand state), so
// replicas agree and tests pin exact values; a new policy revision reshuffles
// every key. The arithmetic is integer-only (the spread is taken in parts
// per million): Go may fuse floating-point operations differently per
// architecture, integers it may not. Strategy names this algorithm for the
// policy revision.
//
// # Physical TTL
//
// The envelope's hard expiry is the judge (envelope.State); the Redis key's
// TTL only cleans up. Rule: PX = (hard expiry − written-at) + Grace(hard
// TTL), in whole milliseconds, where Grace is one second plus 200 ppm of the
// hard TTL. PX is relative, so the Redis server's wall-clock offset does not
// matter; the key is removed no earlier than the grace after the envelope's
// hard expiry as long as the server's clock rate is within 200 ppm of the
// host's (and the host clock is not stepped back), so the last
// stale-if-error window is never cut short; and it outlives the hard expiry
// by at most the grace plus the write's latency, during which a read sees
// Expired, a miss.
//
// What may change here: the grace (a longer one only costs memory).
// What must not without a new Strategy: the sample derivation and the
// spread arithmetic (replicas on two versions would disagree).
package expiry

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/bits"
	"time"

	"github.com/caphost/caphost/runtime/keys"
)

// Strategy identifies the jitter algorithm; a policy compiler folds it into
// the region's policy revision.
const Strategy = "downward-uniform/sha256-revision-key/ppm/v1"

// Bounds on inputs.
const (
	// MaxTTL bounds any TTL (a typo guard and headroom for the envelope's
	// 2^53 ms times).
	MaxTTL = 100 * 365 * 24 * time.Hour
	// MaxRevisionBytes bounds the policy revision.
	MaxRevisionBytes = 256
	// GraceFloor and DriftPPM define Grace.
	GraceFloor = time.Second
	DriftPPM   = 200
	// maxMillis is the envelope's time bound.
	maxMillis = 1<<53 - 1
)

const domain = "caphost/cache/expiry/jitter/v1\x00"

// Policy is a region's frozen expiry policy.
type Policy struct {
	// Revision is the region policy's revision (non-empty, bounded).
	Revision string
	// Spread is the jitter fraction in [0, 1): a TTL shrinks by at most
	// ⌊ttl × Spread⌋ (resolved to parts per million).
	Spread float64
	// Min is the hard minimum for every jittered TTL (≥ 1 ms, whole ms).
	Min time.Duration
}

// Validate reports the first problem with p as an *Error.
func (p Policy) Validate() error {
	switch {
	case p.Revision == "":
		return fail(EmptyRevision)
	case len(p.Revision) > MaxRevisionBytes:
		return fail(RevisionTooLong)
	case !(p.Spread >= 0 && p.Spread < 1): // also rejects NaN
		return fail(SpreadOutOfRange)
	case p.Min < time.Millisecond:
		return fail(MinimumNotPositive)
	case p.Min%time.Millisecond != 0:
		return fail(NotWholeMillis)
	case p.Min > MaxTTL:
		return fail(TTLTooLong)
	}
	return nil
}

func (p Policy) checkTTL(ttl time.Duration) error {
	switch {
	case ttl%time.Millisecond != 0:
		return fail(NotWholeMillis)
	case ttl < p.Min:
		return fail(TTLBelowMinimum)
	case ttl > MaxTTL:
		return fail(TTLTooLong)
	}
	return nil
}

// sample is the key's deterministic 64-bit draw under p.Revision.
func (p Policy) sample(key []byte) uint64 {
	h := sha256.New()
	var n [4]byte
	h.Write([]byte(domain))
	binary.BigEndian.PutUint32(n[:], uint32(len(p.Revision)))
	h.Write(n[:])
	h.Write([]byte(p.Revision))
	binary.BigEndian.PutUint32(n[:], uint32(len(key)))
	h.Write(n[:])
	h.Write(key)
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

func (p Policy) ppm() uint64 {
	v := uint64(math.Round(p.Spread * 1e6))
	return min(v, 999_999)
}

// apply shortens ttlMs by the draw: offset = ⌊u × (span+1)⌋ with u = draw/2^64
// and span = ⌊ttl × ppm / 10^6⌋, so offset is uniform over [0, span]. It is
// non-decreasing in ttlMs, so a soft TTL ≤ hard TTL stays ≤ after jitter.
func (p Policy) apply(draw uint64, ttlMs uint64) uint64 {
	span := ttlMs * p.ppm() / 1e6 // ttlMs < 2^42, ppm < 2^20: no overflow
	offset, _ := bits.Mul64(draw, span+1)
	return max(ttlMs-offset, uint64(p.Min/time.Millisecond))
}

// Jitter returns key's jittered ttl under p: deterministic, in
// [max(ttl − ⌊ttl×Spread⌋, Min), ttl], whole milliseconds. The draw is
// over the entry's rendered Redis key, which carries the region generation,
// so one logical key is jittered afresh in every generation.
func (p Policy) Jitter(key keys.Key, ttl time.Duration) (time.Duration, error) {
	return p.jitter([]byte(key.Redis()), ttl)
}

func (p Policy) jitter(key []byte, ttl time.Duration) (time.Duration, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	if err := p.checkTTL(ttl); err != nil {
		return 0, err
	}
	return time.Duration(p.apply(p.sample(key), uint64(ttl/time.Millisecond))) * time.Millisecond, nil
}

// Plan is what one record writes: the envelope's times and the key's PX.
type Plan struct {
	// WrittenAt is the injected clock's instant, truncated to milliseconds.
	WrittenAt time.Time
	// SoftExpiresAt is zero when the region has no soft TTL.
	SoftExpiresAt time.Time
	HardExpiresAt time.Time
	// PhysicalTTL is the key's PX: HardExpiresAt − WrittenAt + Grace, whole ms.
	PhysicalTTL time.Duration
}

// Plan computes the expiries of key written at writtenAt with the region's
// soft TTL (0: none) and hard TTL. One draw jitters both, so soft ≤ hard
// holds after jitter; both obey Min.
func (p Policy) Plan(key keys.Key, writtenAt time.Time, soft, hard time.Duration) (Plan, error) {
	return p.plan([]byte(key.Redis()), writtenAt, soft, hard)
}

func (p Policy) plan(key []byte, writtenAt time.Time, soft, hard time.Duration) (Plan, error) {
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	if err := p.checkTTL(hard); err != nil {
		return Plan{}, err
	}
	if soft != 0 {
		if err := p.checkTTL(soft); err != nil {
			return Plan{}, err
		}
		if soft > hard {
			return Plan{}, fail(SoftAfterHard)
		}
	}
	w := writtenAt.UnixMilli()
	if w < 0 || uint64(w)+uint64((hard+Grace(hard))/time.Millisecond) > maxMillis {
		return Plan{}, fail(WrittenAtOutOfRange)
	}
	draw := p.sample(key)
	at := time.UnixMilli(w).UTC()
	hardMs := p.apply(draw, uint64(hard/time.Millisecond))
	hardTTL := time.Duration(hardMs) * time.Millisecond
	pl := Plan{
		WrittenAt:     at,
		HardExpiresAt: at.Add(hardTTL),
		PhysicalTTL:   hardTTL + Grace(hardTTL),
	}
	if soft != 0 {
		softMs := min(p.apply(draw, uint64(soft/time.Millisecond)), hardMs)
		pl.SoftExpiresAt = at.Add(time.Duration(softMs) * time.Millisecond)
	}
	return pl, nil
}

// Grace is how long the Redis key outlives an envelope whose remaining
// life is ttl: GraceFloor plus DriftPPM of ttl, rounded up to whole ms.
func Grace(ttl time.Duration) time.Duration {
	ttl = min(max(ttl, 0), MaxTTL)
	ms := uint64((ttl + time.Millisecond - 1) / time.Millisecond)
	drift := (ms*DriftPPM + 1e6 - 1) / 1e6 // whole ms, rounded up
	return GraceFloor + time.Duration(drift)*time.Millisecond
}

// PhysicalTTL is the PX for rewriting an existing envelope at now (an N-1
// migration rewrite, a conditional re-put): the remaining life to
// hardExpiresAt (at most MaxTTL), rounded up to whole ms, plus its Grace.
// It reports false when the envelope has already expired: such an entry is
// not rewritten.
func PhysicalTTL(hardExpiresAt, now time.Time) (time.Duration, bool) {
	left := hardExpiresAt.Sub(now)
	if left <= 0 {
		return 0, false
	}
	left = (min(left, MaxTTL) + time.Millisecond - 1).Truncate(time.Millisecond)
	return left + Grace(left), true
}
