package programs

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// MaxCacheValueBytes bounds what cache-put-v1 stores and what
// cache-read-bounded-v1 returns: 1 MiB, the catalog's value cap.
const MaxCacheValueBytes = 1 << 20

// CacheReadResult is the result of cache-read-bounded-v1.
type CacheReadResult struct {
	Status CacheReadStatus
	// ServerNowMillis is 0: the program reads no clock.
	ServerNowMillis int64
	// Value is the whole stored value on FOUND (at most the requested
	// maximum), else nil.
	Value []byte
	// Length is the stored value's length on FOUND and TOO_LARGE, else 0.
	Length int64
}

// Outcome returns the certainty of the call.
func (r CacheReadResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// TooLarge reports a stored value longer than the requested maximum: it was
// typed by its length, and not a byte of it crossed the network.
func (r CacheReadResult) TooLarge() bool { return r.Status == CacheReadTooLarge }

// CacheReadBounded reads a cache entry only when it is at most maxBytes
// (1..MaxCacheValueBytes) long; a longer value is TOO_LARGE with its length
// and no bytes. The reply can never exceed maxBytes+1 value bytes: the
// program reads with GETRANGE 0 maxBytes. A reply that contradicts its own
// length or the bound is ErrIncompatible, never a hit.
func (e *Executor) CacheReadBounded(ctx context.Context, entry keys.Key, maxBytes int) (CacheReadResult, error) {
	const id = "cache-read-bounded-v1"
	r, err := e.run(ctx, id, []keys.Key{entry}, strconv.Itoa(maxBytes))
	if err != nil {
		return CacheReadResult{}, err
	}
	res := CacheReadResult{Status: CacheReadStatus(r.status), ServerNowMillis: r.serverNow, Length: r.int(1)}
	value := r.bytes(0)
	switch res.Status {
	case CacheReadFound:
		if int64(len(value)) != res.Length || len(value) > maxBytes {
			return CacheReadResult{}, incompatible(id, "FOUND with %d value bytes, length %d, max %d", len(value), res.Length, maxBytes)
		}
		res.Value = value
	case CacheReadTooLarge:
		if len(value) != 0 || res.Length <= int64(maxBytes) {
			return CacheReadResult{}, incompatible(id, "TOO_LARGE with %d value bytes, length %d, max %d", len(value), res.Length, maxBytes)
		}
	default:
		if len(value) != 0 || res.Length != 0 {
			return CacheReadResult{}, incompatible(id, "%s carries a value", res.Status)
		}
	}
	return res, nil
}

// CacheCondition is the write condition of cache-put-v1 beyond the
// captured generation, which is always checked.
type CacheCondition string

// Conditions of cache-put-v1 (ARGV[4]).
const (
	// CacheConditionAny stores whatever entry is there.
	CacheConditionAny CacheCondition = "any"
	// CacheConditionNewerSourceRevision (ONLY_IF_SOURCE_REVISION_NEWER)
	// stores only when no readable stored envelope carries a source
	// revision >= the new envelope's; the new envelope must be v2 with a
	// source revision.
	CacheConditionNewerSourceRevision CacheCondition = "newer-source-revision"
)

// CachePutResult is the result of cache-put-v1.
type CachePutResult struct {
	Status CachePutStatus
	// ServerNowMillis is 0: the program reads no clock.
	ServerNowMillis int64
	// PTTL is the TTL set on STORED, else 0.
	PTTL time.Duration
	// SameValue reports that the stored bytes equal the sent envelope: true
	// on STORED; on NOT_NEWER it identifies a repeat whose first attempt
	// applied (same envelope, so same revision).
	SameValue bool
}

// Outcome returns the certainty of the call.
func (r CachePutResult) Outcome() certainty.Outcome { return r.Status.Outcome() }

// CachePut stores envelope at entry with ttl only while the region
// generation key holds exactly captured (the generation read when the
// value's load began) and, under CacheConditionNewerSourceRevision, only
// while the stored entry is not at least as new. Both checks and the write
// are one program invocation. generation and entry must share a Cluster
// slot (ErrCrossSlot otherwise, before anything is sent).
func (e *Executor) CachePut(ctx context.Context, generation, entry keys.Key, captured, envelope []byte, ttl time.Duration, cond CacheCondition) (CachePutResult, error) {
	const id = "cache-put-v1"
	if !generation.IsZero() && !entry.IsZero() && generation.Slot() != entry.Slot() {
		return CachePutResult{}, &Error{Program: id, Err: ErrCrossSlot}
	}
	r, err := e.run(ctx, id, []keys.Key{generation, entry}, captured, envelope, millis(ttl), string(cond))
	if err != nil {
		return CachePutResult{}, err
	}
	return CachePutResult{
		Status: CachePutStatus(r.status), ServerNowMillis: r.serverNow,
		PTTL: time.Duration(r.int(0)) * time.Millisecond, SameValue: r.int(1) == 1,
	}, nil
}

func incompatible(id, format string, a ...any) error {
	return &CompatibilityError{Program: id, Reason: fmt.Sprintf(format, a...)}
}
