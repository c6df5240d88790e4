package cache

import (
	"errors"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
)

// LookupKind is the closed set of lookup outcomes. A miss and an outage are
// never the same outcome, and a schema, codec or programming error is never
// a miss (those are errors, see ErrCorrupt and *CodecError).
type LookupKind uint8

// The lookup outcomes.
const (
	// Hit: a readable entry, Fresh or Stale (Freshness).
	Hit LookupKind = iota + 1
	// NegativeHit: a cached authoritative absence.
	NegativeHit
	// Miss: no usable entry (MissReason).
	Miss
	// IncompatibleSchema: an entry this host cannot read (SchemaCategory);
	// with the fail-fast policy it is neither deleted nor overwritten.
	IncompatibleSchema
	// Unavailable: Redis did not answer (UnavailableCategory, Certainty).
	Unavailable
)

var lookupKindNames = [...]string{Hit: "HIT", NegativeHit: "NEGATIVE_HIT", Miss: "MISS",
	IncompatibleSchema: "INCOMPATIBLE_SCHEMA", Unavailable: "UNAVAILABLE"}

func (k LookupKind) String() string { return enumName(lookupKindNames[:], int(k)) }

// Freshness of a hit.
type Freshness uint8

// Freshness values.
const (
	// Fresh: before the entry's soft expiry.
	Fresh Freshness = iota + 1
	// Stale: between soft and hard expiry: served only where the region and
	// the caller allow stale data.
	Stale
)

var freshnessNames = [...]string{Fresh: "FRESH", Stale: "STALE"}

func (f Freshness) String() string { return enumName(freshnessNames[:], int(f)) }

// MissReason says why a lookup missed.
type MissReason uint8

// Miss reasons.
const (
	// Absent: no entry in the region's current generation.
	Absent MissReason = iota + 1
	// Expired: the entry's own hard expiry has passed (whatever the Redis
	// key's TTL says).
	Expired
	// Invalidated: the entry was invalidated: a per-key invalidation's
	// tombstone, or the region generation this host saw was replaced and the
	// new one holds no entry.
	Invalidated
)

var missNames = [...]string{Absent: "ABSENT", Expired: "EXPIRED", Invalidated: "INVALIDATED"}

func (r MissReason) String() string { return enumName(missNames[:], int(r)) }

// SchemaCategory says why an entry is unreadable.
type SchemaCategory uint8

// Schema categories.
const (
	// FutureVersion: a newer writer's envelope or payload version.
	FutureVersion SchemaCategory = iota + 1
	// RetiredVersion: an older version than the codec still reads.
	RetiredVersion
	// UnknownEnvelope: not an envelope of this cache, or another codec's.
	UnknownEnvelope
	// TooLarge: the stored value exceeds the region's bound; it was typed by
	// its length and never loaded whole.
	TooLarge
)

var schemaNames = [...]string{FutureVersion: "FUTURE_VERSION", RetiredVersion: "RETIRED_VERSION",
	UnknownEnvelope: "UNKNOWN_ENVELOPE", TooLarge: "TOO_LARGE"}

func (c SchemaCategory) String() string { return enumName(schemaNames[:], int(c)) }

// UnavailableCategory says why Redis did not answer.
type UnavailableCategory uint8

// Unavailable categories.
const (
	// Down: the deployment did not answer (before or after sending).
	Down UnavailableCategory = iota + 1
	// Overloaded: a local bound refused the call before sending.
	Overloaded
)

var unavailableNames = [...]string{Down: "UNAVAILABLE", Overloaded: "OVERLOADED"}

func (c UnavailableCategory) String() string { return enumName(unavailableNames[:], int(c)) }

// Lookup is the outcome of Region.Lookup. Kind says which fields apply.
type Lookup struct {
	Kind LookupKind
	// Hit and NegativeHit.
	Value          []byte // the decoded value (Hit); the caller's own copy
	Freshness      Freshness
	SourceRevision Revision
	WrittenAt      time.Time
	SoftExpiresAt  time.Time // zero: no stale window
	HardExpiresAt  time.Time
	// FromL1 reports a hit served by the in-process L1.
	FromL1 bool
	// Miss.
	MissReason MissReason
	// IncompatibleSchema.
	Schema       SchemaCategory
	SchemaPolicy string // the region's policy: fail-fast or quarantine-and-reload
	// Unavailable.
	Unavailable UnavailableCategory
	Certainty   certainty.Outcome
}

// RecordOutcome is the outcome of a write (Record, RecordAbsent, and the
// write GetOrLoad makes after a load).
type RecordOutcome uint8

// Record outcomes.
const (
	// Recorded: the entry was stored.
	Recorded RecordOutcome = iota + 1
	// NotRecordedCondition: a condition refused the write: the generation
	// moved since the lookup, the entry changed since it was observed, or
	// the stored entry's source revision is not older.
	NotRecordedCondition
	// NotRecordedProviderPolicy: the region's policy refused the value
	// (too large, not admitted, negative caching off); the caller's result
	// is unaffected.
	NotRecordedProviderPolicy
	// DegradedUnavailable: Redis did not take the write; nothing was stored.
	DegradedUnavailable
	// Indeterminate: the write may or may not have been stored (a timeout
	// after sending). Never retried blindly; the entry's hard expiry bounds
	// it.
	Indeterminate
)

var recordNames = [...]string{Recorded: "RECORDED", NotRecordedCondition: "NOT_RECORDED_CONDITION",
	NotRecordedProviderPolicy: "NOT_RECORDED_PROVIDER_POLICY", DegradedUnavailable: "DEGRADED_UNAVAILABLE",
	Indeterminate: "INDETERMINATE"}

func (o RecordOutcome) String() string { return enumName(recordNames[:], int(o)) }

// InvalidationOutcome is the outcome of Invalidate and InvalidateRegion.
type InvalidationOutcome uint8

// Invalidation outcomes.
const (
	// InvalidationDone (INVALIDATED): an entry was replaced by a tombstone,
	// or every shard of a region got a new generation.
	InvalidationDone InvalidationOutcome = iota + 1
	// AlreadyAbsent: there was no entry; a tombstone was written anyway so
	// that a load that began before the invalidation cannot store.
	AlreadyAbsent
	// InvalidationUnavailable: Redis did not take it (for a region: at
	// least one shard; the others were invalidated).
	InvalidationUnavailable
	// InvalidationIndeterminate: it may or may not have applied.
	InvalidationIndeterminate
)

var invalidationNames = [...]string{InvalidationDone: "INVALIDATED", AlreadyAbsent: "ALREADY_ABSENT",
	InvalidationUnavailable: "DEGRADED_UNAVAILABLE", InvalidationIndeterminate: "INDETERMINATE"}

func (o InvalidationOutcome) String() string { return enumName(invalidationNames[:], int(o)) }

// Revision is a source revision: an ordered version of the source's value
// (a row version, an LSN, a commit timestamp). The zero Revision is "none".
type Revision struct {
	v  uint64
	ok bool
}

// SourceRevision returns revision n.
func SourceRevision(n uint64) Revision { return Revision{v: n, ok: true} }

// Value returns the revision and whether there is one.
func (r Revision) Value() (uint64, bool) { return r.v, r.ok }

// Intent is a write's consistency intent.
type Intent uint8

// Write intents.
const (
	// Upsert stores the value (within the captured generation).
	Upsert Intent = iota
	// OnlyIfSourceRevisionNewer stores only when no stored entry carries a
	// source revision at least as new; the write needs a Revision.
	OnlyIfSourceRevisionNewer
)

// RecordMeta is what a caller says about a write: its source revision and
// intent. TTL, jitter, size bounds, codec and compression belong to the
// region's policy; there is no per-call override.
type RecordMeta struct {
	Revision Revision
	Intent   Intent
}

// Errors. Match with errors.Is; none of them is ever reported as a miss.
var (
	// ErrUnknownRegion: no region with that id in the current policy set.
	ErrUnknownRegion = errors.New("cache: unknown region")
	// ErrInvalidKey: the key is malformed for the region (parts or
	// attributes out of bounds, or a region's canonicaliser refused it).
	ErrInvalidKey = errors.New("cache: invalid key")
	// ErrValueRefused: the region's codec refused the value (encode said
	// invalid-request).
	ErrValueRefused = errors.New("cache: value refused by the region's codec")
	// ErrCorrupt: a stored entry failed its length, digest or layout checks,
	// or holds a Redis type other than a string. The entry is quarantined
	// (replaced by a tombstone if it is still the same bytes) and the
	// operation fails closed.
	ErrCorrupt = errors.New("cache: corrupt entry")
	// ErrNoRevision: OnlyIfSourceRevisionNewer without a Revision.
	ErrNoRevision = errors.New("cache: intent needs a source revision")
	// ErrClosed: the cache was closed.
	ErrClosed = errors.New("cache: closed")
)

// CodecError is a guest failure in the region's codec (encode, decode) or
// canonicaliser: a trap, a deadline, invalid output or an internal status.
// It is a programming error for that operation, which fails closed (never a
// miss, never a silent source load) and is counted
// (caphost_cache_guest_failures_total{op}); a decode on which the guest
// trapped, ran out of memory or broke the ABI also quarantines the entry (it
// would fail the same way on every read), while a deadline, a full pool or a
// closed module leaves the entry in place. A failing admission predicate
// is not an error: the value is not stored (NOT_RECORDED_PROVIDER_POLICY)
// and the failure is counted. Err is the *plugins.GuestError or
// *abi.StatusError.
type CodecError struct {
	Region string
	// Op is encode, decode, canonicalize or admit.
	Op  string
	Err error
}

func (e *CodecError) Error() string {
	return "cache: region " + e.Region + ": guest " + e.Op + " failed: " + e.Err.Error()
}

func (e *CodecError) Unwrap() error { return e.Err }

func enumName(names []string, i int) string {
	if i <= 0 || i >= len(names) || names[i] == "" {
		return "INVALID"
	}
	return names[i]
}
