package programs

import (
	"bytes"
	"context"
	"crypto/sha1" //nolint:gosec // the observation digest is what the program compares with redis.sha1hex
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// MaxCacheValueBytes bounds what cache-put-v2 stores: 1 MiB, the catalog's
// value cap.
const MaxCacheValueBytes = 1 << 20

// CacheObservedPrefixBytes is how much of an observed entry an observation
// digests: the first min(length, 384) bytes. Every envelope header,
// including its 128-bit digest over the payload, fits in 384 bytes, so an
// equal prefix and an equal length mean the same envelope; a tombstone is
// 21 bytes, digested whole.
const CacheObservedPrefixBytes = 384

// CacheCondition is the revision condition of cache-put-v2 (ARGV[4]). The
// captured generation is always checked; the zero value is no condition
// and the program refuses it (INVALID).
type CacheCondition string

// Conditions of cache-put-v2.
const (
	// CacheConditionAny stores whatever revision the entry holds.
	CacheConditionAny CacheCondition = "any"
	// CacheConditionNewerSourceRevision (ONLY_IF_SOURCE_REVISION_NEWER)
	// stores only when no readable stored envelope carries a source
	// revision >= the new value's; the new value must be a v2 envelope with
	// a source revision. A stored tombstone, v1 envelope or v2 envelope
	// without a revision is older than any revision.
	CacheConditionNewerSourceRevision CacheCondition = "newer-source-revision"
)

// observationMode is ARGV[5] of cache-put-v2.
type observationMode uint8

const (
	observeNone observationMode = iota
	observeAbsent
	observeValue
	observeTombstone
)

func (m observationMode) wire() string {
	switch m {
	case observeAbsent:
		return "absent"
	case observeValue:
		return "value"
	case observeTombstone:
		return "tombstone"
	}
	return "none"
}

// CacheObservation is what a lookup saw at the entry key, so that a write
// based on it (the cache-aside fill, a quarantine) applies only while the
// entry is still that: a per-key invalidation's tombstone or another
// writer in between turns the write into OBSERVATION_CHANGED. The zero
// value is NoObservation.
type CacheObservation struct {
	mode   observationMode
	length int64
	// digest is the lower-hex SHA-1 of the observed prefix, or "" when the
	// prefix given was too short (the program answers INVALID).
	digest string
}

// NoObservation writes whatever the entry holds (an explicit write, a
// per-key invalidation's tombstone).
func NoObservation() CacheObservation { return CacheObservation{} }

// ObservedAbsent requires the entry key not to exist.
func ObservedAbsent() CacheObservation { return CacheObservation{mode: observeAbsent} }

// ObservedValue requires the entry to hold exactly length bytes whose first
// min(length, CacheObservedPrefixBytes) bytes are prefix's (prefix may be
// the whole value: only that many bytes are digested). The digest is
// computed here and compared by the program; a prefix shorter than that or
// a length outside 1..MaxCacheValueBytes makes the call INVALID.
func ObservedValue(length int64, prefix []byte) CacheObservation {
	return CacheObservation{mode: observeValue, length: length, digest: prefixDigest(length, prefix)}
}

// ObservedTombstone is ObservedValue for an observed tombstone, with one
// more admitted state: the entry is absent (the tombstone expired; a newer
// invalidation would have written a new tombstone, which differs).
func ObservedTombstone(length int64, prefix []byte) CacheObservation {
	return CacheObservation{mode: observeTombstone, length: length, digest: prefixDigest(length, prefix)}
}

// ObservedValueDigest is ObservedValue for a caller that kept only the
// SHA-1 of the observed prefix (for example inside a refresh token).
func ObservedValueDigest(length int64, digest [sha1.Size]byte) CacheObservation {
	return CacheObservation{mode: observeValue, length: length, digest: hex.EncodeToString(digest[:])}
}

// ObservedTombstoneDigest is ObservedTombstone from the prefix's SHA-1.
func ObservedTombstoneDigest(length int64, digest [sha1.Size]byte) CacheObservation {
	return CacheObservation{mode: observeTombstone, length: length, digest: hex.EncodeToString(digest[:])}
}

// prefixDigest returns the lower-hex SHA-1 (what redis.sha1hex computes) of
// the first min(length, CacheObservedPrefixBytes) bytes of prefix, or ""
// when prefix cannot be that observation.
func prefixDigest(length int64, prefix []byte) string {
	n := min(length, CacheObservedPrefixBytes)
	if n < 1 || int64(len(prefix)) < n {
		return ""
	}
	sum := sha1.Sum(prefix[:n]) //nolint:gosec // see the import
	return hex.EncodeToString(sum[:])
}

// CachePutRequest is one cache-put-v2 call.
type CachePutRequest struct {
	// Captured is the shard generation the value belongs to (16..128
	// bytes): the one read when the value's load began, under which the
	// entry key was built.
	Captured []byte
	// Value is an envelope (host/cache/envelope, v1 or v2) or a tombstone,
	// 1..MaxCacheValueBytes bytes.
	Value []byte
	// TTL is the entry's PX TTL, 1 ms..30 days (whole milliseconds).
	TTL time.Duration
	// Condition is the revision condition.
	Condition CacheCondition
	// Observation is what the entry must still be; the zero value observes
	// nothing.
	Observation CacheObservation
}

// CachePrevious is what the entry key held before a cache-put-v2 call.
type CachePrevious uint8

// Previous states. The program reports them (as 0..3) only once the
// generation check passed; before that the entry was not examined.
const (
	// CachePreviousUnknown: the call stopped before examining the entry
	// (GENERATION_MISSING, GENERATION_MOVED, WRONG_TYPE, INVALID).
	CachePreviousUnknown CachePrevious = iota
	// CachePreviousAbsent: the entry key did not exist.
	CachePreviousAbsent
	// CachePreviousEnvelope: it held an envelope (magic and version 1 or 2;
	// the rest of the header is not checked).
	CachePreviousEnvelope
	// CachePreviousTombstone: it held a tombstone.
	CachePreviousTombstone
	// CachePreviousOther: it held any other string.
	CachePreviousOther
)

// String returns the state's name.
func (p CachePrevious) String() string {
	switch p {
	case CachePreviousAbsent:
		return "ABSENT"
	case CachePreviousEnvelope:
		return "ENVELOPE"
	case CachePreviousTombstone:
		return "TOMBSTONE"
	case CachePreviousOther:
		return "OTHER"
	}
	return "UNKNOWN"
}

// CachePutResult is the result of cache-put-v2.
type CachePutResult struct {
	Status CachePutStatus
	// ServerNowMillis is 0: the program reads no clock.
	ServerNowMillis int64
	// PTTL is the TTL set on STORED, else 0.
	PTTL time.Duration
	// SameValue reports that the entry holds exactly the sent bytes: true
	// on STORED; otherwise it identifies a repeat whose first attempt
	// applied (NOT_NEWER or OBSERVATION_CHANGED with SameValue).
	SameValue bool
	// Previous is what the entry held before the call (CachePreviousUnknown
	// when the call stopped before examining it). An invalidation tells
	// INVALIDATED (an envelope was replaced) from ALREADY_ABSENT by it.
	Previous CachePrevious
	// Generation is the shard's current generation on GENERATION_MOVED,
	// else nil.
	Generation []byte
}

// Outcome returns the certainty of the call.
func (r CachePutResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// CachePut stores req.Value at entry with req.TTL only while the shard
// generation key (the anchor) holds exactly req.Captured, the entry is
// still what req.Observation describes and, under
// CacheConditionNewerSourceRevision, the stored entry is not at least as
// new. The checks and the write are one program invocation. generation and
// entry must share a Cluster slot (ErrCrossSlot otherwise, before anything
// is sent). A reply that contradicts itself (a generation on any status but
// GENERATION_MOVED, a STORED without the TTL sent, ...) is ErrIncompatible,
// never a success.
func (e *Executor) CachePut(ctx context.Context, generation, entry keys.Key, req CachePutRequest) (CachePutResult, error) {
	const id = "cache-put-v2"
	if err := sameSlot(id, generation, entry); err != nil {
		return CachePutResult{}, err
	}
	obs := req.Observation
	r, err := e.run(ctx, id, []keys.Key{generation, entry}, req.Captured, req.Value, millis(req.TTL),
		string(req.Condition), obs.mode.wire(), strconv.FormatInt(obs.length, 10), obs.digest)
	if err != nil {
		return CachePutResult{}, err
	}
	return cachePutResult(id, &r, req)
}

// cachePutResult decodes r and checks that it agrees with itself and with
// the request.
func cachePutResult(id string, r *reply, req CachePutRequest) (CachePutResult, error) {
	pttl, same, prev, gen := r.int(0), r.int(1), r.int(2), r.bytes(3)
	res := CachePutResult{Status: CachePutStatus(r.status), ServerNowMillis: r.serverNow, SameValue: same == 1}
	var problem string
	examined := true
	switch res.Status {
	case CachePutStored:
		if pttl < 1 || pttl != req.TTL.Milliseconds() || same != 1 {
			problem = fmt.Sprintf("pttl %d (sent %d), sameValue %d", pttl, req.TTL.Milliseconds(), same)
		}
		res.PTTL = time.Duration(pttl) * time.Millisecond
	case CachePutNotNewer:
		// Only a stored envelope with a revision is at least as new.
		if pttl != 0 || prev != 1 {
			problem = fmt.Sprintf("pttl %d, previous %d", pttl, prev)
		}
	case CachePutObservationChanged:
		if pttl != 0 || (same == 1 && prev == 0) {
			problem = fmt.Sprintf("pttl %d, sameValue %d, previous %d", pttl, same, prev)
		}
	case CachePutStoredUnreadable:
		// Only a stored value that is neither tombstone nor readable
		// envelope is unreadable, and it cannot equal a valid new value.
		if pttl != 0 || same != 0 || (prev != 1 && prev != 3) {
			problem = fmt.Sprintf("pttl %d, sameValue %d, previous %d", pttl, same, prev)
		}
	case CachePutGenerationMoved:
		examined = false
		if len(gen) < 16 || len(gen) > 128 || bytes.Equal(gen, req.Captured) {
			problem = fmt.Sprintf("a %d-byte generation equal to the captured one: %t", len(gen), bytes.Equal(gen, req.Captured))
		}
		res.Generation = gen
	default: // GENERATION_MISSING, WRONG_TYPE, INVALID: nothing examined
		examined = false
	}
	switch {
	case problem != "":
	case same != 0 && same != 1:
		problem = fmt.Sprintf("sameValue %d", same)
	case prev < 0 || prev > 3 || (!examined && prev != 0):
		problem = fmt.Sprintf("previous %d", prev)
	case !examined && (pttl != 0 || same != 0):
		problem = fmt.Sprintf("pttl %d, sameValue %d", pttl, same)
	case res.Status != CachePutGenerationMoved && len(gen) != 0:
		problem = fmt.Sprintf("a %d-byte generation", len(gen))
	}
	if problem != "" {
		return CachePutResult{}, &CompatibilityError{Program: id, Reason: res.Status.String() + " with " + problem}
	}
	if examined {
		res.Previous = CachePrevious(prev + 1)
	}
	return res, nil
}
