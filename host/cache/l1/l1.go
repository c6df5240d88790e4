package l1

import (
	"hash/maphash"
	"math"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// Bounds and accounting constants.
const (
	// EntryOverhead is charged per entry on top of its key and value bytes:
	// the item header and the library's node, rounded up.
	EntryOverhead = 128
	// KeySize is the bytes a Key takes (and is charged).
	KeySize = 48
	// MaxEntriesLimit, MaxBytesLimit and MaxAgeLimit are typo guards.
	MaxEntriesLimit = 1 << 30
	MaxBytesLimit   = 1 << 40
	MaxAgeLimit     = 24 * time.Hour
	// DefaultEntryBytesDivisor: without MaxEntryBytes, one entry may take
	// at most MaxBytes/DefaultEntryBytesDivisor.
	DefaultEntryBytesDivisor = 8
)

// Config is one region's L1. MaxEntries, MaxBytes, MaxAge and Clock are
// required; MaxEntryBytes defaults to MaxBytes/8 (at most MaxUint32).
type Config struct {
	// MaxEntries bounds the number of entries.
	MaxEntries int
	// MaxBytes bounds the bytes charged: key + value + EntryOverhead per
	// entry, each entry charged at least MaxBytes/MaxEntries (see the
	// package documentation).
	MaxBytes int64
	// MaxEntryBytes refuses larger entries (key + value + EntryOverhead).
	MaxEntryBytes int64
	// MaxAge is the region's L1 TTL cap: an entry lives in L1 at most this
	// long after its Set, and never past its L2 hard expiry.
	MaxAge time.Duration
	// Clock is the host's injected clock; every Get judges with it.
	Clock func() time.Time
	// Strict is the region's declared consistency intent: a strict region
	// gets no L1 and New refuses it with StrictRegion.
	Strict bool
}

// Validate reports the first problem with c as an *Error.
func (c Config) Validate() error {
	switch {
	case c.Strict:
		return fail(StrictRegion)
	case c.MaxEntries < 1 || c.MaxEntries > MaxEntriesLimit:
		return fail(EntriesOutOfRange)
	case c.MaxBytes <= EntryOverhead || c.MaxBytes > MaxBytesLimit:
		return fail(BytesOutOfRange)
	case (c.MaxBytes+int64(c.MaxEntries)-1)/int64(c.MaxEntries) > math.MaxUint32: // the slot is a uint32 weight
		return fail(EntriesOutOfRange)
	case c.MaxEntryBytes != 0 && (c.MaxEntryBytes <= EntryOverhead || c.MaxEntryBytes > min(c.MaxBytes, math.MaxUint32)):
		return fail(EntryBytesOutOfRange)
	case c.MaxAge < time.Millisecond || c.MaxAge > MaxAgeLimit:
		return fail(MaxAgeOutOfRange)
	case c.Clock == nil:
		return fail(NoClock)
	}
	return nil
}

func (c Config) maxEntryBytes() int64 {
	if c.MaxEntryBytes != 0 {
		return c.MaxEntryBytes
	}
	return max(min(c.MaxBytes/DefaultEntryBytesDivisor, math.MaxUint32), EntryOverhead+1)
}

// SetOutcome is what a Set did. The set is closed; the zero value is invalid.
type SetOutcome uint8

const (
	_ SetOutcome = iota
	// Stored: the entry is in L1.
	Stored
	// NotStoredRaced: a Flush or a Delete ran since the Ticket was taken,
	// so the value may predate an invalidation; it was not kept.
	NotStoredRaced
	// NotStoredTooLarge: key + value + EntryOverhead exceeds MaxEntryBytes,
	// or the value size is negative.
	NotStoredTooLarge
	// NotStoredExpired: the entry's hard expiry is not after now.
	NotStoredExpired
	// NotStoredClosed: the cache was closed.
	NotStoredClosed
	// NotStoredDisabled: the region has no L1 (a nil *Cache).
	NotStoredDisabled
	// NotStoredInvalidKey: the key is the zero Key.
	NotStoredInvalidKey
)

var setOutcomeNames = [...]string{
	Stored:              "STORED",
	NotStoredRaced:      "NOT_STORED_RACED",
	NotStoredTooLarge:   "NOT_STORED_TOO_LARGE",
	NotStoredExpired:    "NOT_STORED_EXPIRED",
	NotStoredClosed:     "NOT_STORED_CLOSED",
	NotStoredDisabled:   "NOT_STORED_DISABLED",
	NotStoredInvalidKey: "NOT_STORED_INVALID_KEY",
}

// String returns the canonical upper-case name.
func (o SetOutcome) String() string {
	if o >= Stored && o <= NotStoredInvalidKey {
		return setOutcomeNames[o]
	}
	return "INVALID_SET_OUTCOME"
}

// testHookAfterStore, when set by a test, runs between a Set's store and its
// second check, to place a Flush or Delete exactly there.
var testHookAfterStore func()

// Ticket is taken before the L2 read whose result a Set stores; see Set.
type Ticket struct{ epoch, deletes uint64 }

// Key names an entry by its L2 identity: the digest of the entry's
// location and the region generation the entry was read under (an L2
// entry key is a function of the two, so equal Keys name the same L2
// entry and a new generation names new entries). It is fixed-size so that
// a hit hashes and compares 48 bytes, not a rendered Redis key. The zero
// Key is invalid.
type Key struct {
	Location   [32]byte
	Generation [16]byte
}

type item[V any] struct {
	// key is the entry's full Key: the map is keyed by a seeded 64-bit
	// hash of it, and a Get whose Key differs (a hash collision) misses.
	key       Key
	value     V
	expiresAt int64 // unix nanos by the injected clock: min(hard expiry, set + MaxAge)
	epoch     uint64
	valid     atomic.Bool // set once the Set's check after the store passed
	charge    uint32      // key + value + EntryOverhead
	weight    uint32      // max(charge, slot)
}

// Cache is one region's L1. A nil *Cache is a disabled L1 (a strict region,
// or a policy without L1): Get misses, Set reports NotStoredDisabled, and
// every other method does nothing.
type Cache[V any] struct {
	c        *otter.Cache[uint64, *item[V]]
	seed     maphash.Seed
	clock    func() time.Time
	maxAge   time.Duration
	maxEntry int64
	slot     uint32

	// epoch starts at 1 so that a zero Ticket never matches.
	epoch   atomic.Uint64
	deletes atomic.Uint64
	closed  atomic.Bool

	// The counters change on every call: keep them off the cache line of
	// the read-mostly fields above.
	_ [64]byte

	hits, misses, expired               atomic.Uint64
	stored, raced, refused              atomic.Uint64
	evictedSize, evictedExpiry, flushes atomic.Uint64
	entries, bytes                      atomic.Int64
}

// New returns an L1 for one region, or an *Error for a bad Config (a
// strict region is refused with StrictRegion). Close it when done.
func New[V any](cfg Config) (*Cache[V], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Cache[V]{
		seed:     maphash.MakeSeed(),
		clock:    cfg.Clock,
		maxAge:   cfg.MaxAge,
		maxEntry: cfg.maxEntryBytes(),
		slot:     uint32((cfg.MaxBytes + int64(cfg.MaxEntries) - 1) / int64(cfg.MaxEntries)),
	}
	l.epoch.Store(1)
	// Keyed by a seeded hash of the Key, which the library mixes with a
	// multiply and a shift (a string or array key would cost a runtime hash
	// of the key, and an array key an allocation per call besides); the
	// item holds the Key, so a collision is a miss, never another entry's
	// value.
	oc, err := otter.New(&otter.Options[uint64, *item[V]]{
		MaximumWeight: uint64(cfg.MaxBytes),
		Weigher:       func(_ uint64, it *item[V]) uint32 { return it.weight },
		// No library expiry: the judge is the injected clock on every Get
		// (an entry found dead is removed then), and entries nobody reads
		// any more age out through the size policy within the bounds. The
		// library's expiry would read its own clock on every Get and add a
		// timer wheel and a clean-up goroutine (measured: +80 to +250 ns
		// per hit here).
		OnAtomicDeletion: l.onDeletion,
		// Maintenance runs on the calling goroutine: no goroutine per
		// write, nothing left running after Close, and bounds that hold
		// once a write returns (unless another writer is draining). What
		// the library runs under its locks (the weigher, the deletion
		// hook, the Compute callbacks here) never calls the cache.
		Executor:        func(fn func()) { fn() },
		InitialCapacity: min(cfg.MaxEntries, 1024),
	})
	if err != nil {
		return nil, err // unreachable: the options above are valid by construction
	}
	l.c = oc
	return l, nil
}

// Ticket captures the cache's flush epoch and delete sequence. Take it
// before the L2 read whose result you Set.
func (l *Cache[V]) Ticket() Ticket {
	if l == nil {
		return Ticket{}
	}
	return Ticket{epoch: l.epoch.Load(), deletes: l.deletes.Load()}
}

// hash is the map key of k.
func (l *Cache[V]) hash(k Key) uint64 {
	var b [KeySize]byte
	copy(b[:32], k.Location[:])
	copy(b[32:], k.Generation[:])
	return maphash.Bytes(l.seed, b[:])
}

// Get returns k's value when L1 holds it, it was stored in the current
// flush epoch and, by the injected clock, it is before both its Set's
// until (at most the L2 hard expiry) and its MaxAge. An entry judged
// expired is removed.
func (l *Cache[V]) Get(k Key) (V, bool) {
	var zero V
	if l == nil {
		return zero, false
	}
	key := l.hash(k)
	it, ok := l.c.GetIfPresent(key)
	if !ok || it.key != k || !it.valid.Load() || it.epoch != l.epoch.Load() || l.closed.Load() {
		l.misses.Add(1)
		return zero, false
	}
	if l.clock().UnixNano() >= it.expiresAt {
		l.misses.Add(1)
		l.expired.Add(1)
		l.remove(key, it, &l.evictedExpiry)
		return zero, false
	}
	l.hits.Add(1)
	return it.value, true
}

// Set stores value under k (with the captured region generation, so a
// generation bump makes the old entries unreachable).
// valueBytes is the value's size in bytes as the caller accounts it (the
// decoded payload); until is the last instant the entry may be served:
// its L2 hard expiry, or earlier (host/cache passes the soft expiry, after
// which a lookup goes to L2 anyway). The entry lives until min(until,
// now+MaxAge) by the injected clock.
//
// t must have been taken before the L2 read that produced value. If a
// Flush or any Delete ran since, the value may predate an invalidation and
// is not kept (NotStoredRaced); this holds also when the Flush or Delete
// runs concurrently with Set: the check is repeated after the store, and a
// stored entry that lost the race is removed again.
func (l *Cache[V]) Set(t Ticket, k Key, value V, valueBytes int, until time.Time) SetOutcome {
	if l == nil {
		return NotStoredDisabled
	}
	if k == (Key{}) {
		return l.refuse(NotStoredInvalidKey)
	}
	if l.closed.Load() {
		return l.refuse(NotStoredClosed)
	}
	if !l.current(t) {
		l.raced.Add(1)
		return NotStoredRaced
	}
	charge := int64(KeySize) + int64(valueBytes) + EntryOverhead
	if valueBytes < 0 || charge > l.maxEntry {
		return l.refuse(NotStoredTooLarge)
	}
	now := l.clock()
	life := min(until.Sub(now), l.maxAge)
	if life <= 0 {
		return l.refuse(NotStoredExpired)
	}
	it := &item[V]{
		key:       k,
		value:     value,
		expiresAt: now.UnixNano() + int64(life),
		epoch:     t.epoch,
		charge:    uint32(charge),
		weight:    max(uint32(charge), l.slot),
	}
	key := l.hash(k)
	l.entries.Add(1)
	l.bytes.Add(charge)
	l.c.Set(key, it)
	if testHookAfterStore != nil {
		testHookAfterStore()
	}
	if !l.current(t) {
		l.remove(key, it, nil)
		l.raced.Add(1)
		return NotStoredRaced
	}
	it.valid.Store(true)
	l.stored.Add(1)
	return Stored
}

// Delete removes k (an invalidation hint). Once it returns, Get misses k
// until a Set with a later Ticket; Sets whose Ticket predates it are
// not kept, and are never served while they remove themselves.
func (l *Cache[V]) Delete(k Key) {
	if l == nil || k == (Key{}) {
		return
	}
	l.deletes.Add(1)
	// A collision removes another key's entry too: a miss, never a wrong value.
	l.c.Invalidate(l.hash(k))
}

// Flush drops every entry (the invalidation subscription dropped). Once it
// returns, Get misses for every entry stored before it and for every Set
// whose Ticket was taken before it, including Sets still running.
func (l *Cache[V]) Flush() {
	if l == nil {
		return
	}
	l.epoch.Add(1)
	l.flushes.Add(1)
	l.c.InvalidateAll()
}

// Close drops every entry and stops the library's goroutines, waiting for
// them (with the options New uses there are none). Afterwards Get misses and Set reports
// NotStoredClosed. Close is idempotent and safe to call concurrently with
// other methods.
func (l *Cache[V]) Close() {
	if l == nil || l.closed.Swap(true) {
		return
	}
	l.epoch.Add(1)
	l.c.InvalidateAll()
	l.c.StopAllGoroutines()
}

// CleanUp runs the library's pending maintenance (replayed writes and
// evictions) now; tests and shutdown paths use it, the serving path need not.
func (l *Cache[V]) CleanUp() {
	if l != nil {
		l.c.CleanUp()
	}
}

// Stats is a snapshot of one region's L1 counters for metrics. Counters
// are monotonic; Entries and Bytes are current.
type Stats struct {
	Hits, Misses uint64
	// Expired counts Gets that found an entry past its hard expiry or
	// MaxAge (also counted in Misses).
	Expired uint64
	// Stored, Raced and Refused count Set outcomes: Stored; NotStoredRaced;
	// every other refusal but NotStoredDisabled.
	Stored, Raced, Refused uint64
	// EvictedSize counts entries the library evicted to keep the bounds;
	// EvictedExpiry counts entries a Get found dead and removed. Deletes,
	// flushes and replacements are neither.
	EvictedSize, EvictedExpiry uint64
	Flushes                    uint64
	// Entries and Bytes are what L1 holds now; Bytes counts key + value +
	// EntryOverhead per entry.
	Entries, Bytes int64
}

// Stats returns the counters. Each is read atomically; the snapshot as a
// whole is not (a metrics scrape needs no more).
func (l *Cache[V]) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	return Stats{
		Hits: l.hits.Load(), Misses: l.misses.Load(), Expired: l.expired.Load(),
		Stored: l.stored.Load(), Raced: l.raced.Load(), Refused: l.refused.Load(),
		EvictedSize: l.evictedSize.Load(), EvictedExpiry: l.evictedExpiry.Load(),
		Flushes: l.flushes.Load(),
		Entries: max(l.entries.Load(), 0), Bytes: max(l.bytes.Load(), 0),
	}
}

func (l *Cache[V]) current(t Ticket) bool {
	return t.epoch == l.epoch.Load() && t.deletes == l.deletes.Load()
}

func (l *Cache[V]) refuse(o SetOutcome) SetOutcome {
	l.refused.Add(1)
	return o
}

// remove deletes key only while it still maps to it (a newer entry stays),
// counting the removal in counter when non-nil.
func (l *Cache[V]) remove(key uint64, it *item[V], counter *atomic.Uint64) {
	l.c.ComputeIfPresent(key, func(old *item[V]) (*item[V], otter.ComputeOp) {
		if old != it {
			return old, otter.CancelOp
		}
		if counter != nil {
			counter.Add(1)
		}
		return nil, otter.InvalidateOp
	})
}

// onDeletion runs under the library's bucket lock for every entry that
// leaves (including replaced ones): it keeps Entries and Bytes and the
// eviction counters. It must not call the cache.
func (l *Cache[V]) onDeletion(e otter.DeletionEvent[uint64, *item[V]]) {
	l.entries.Add(-1)
	l.bytes.Add(-int64(e.Value.charge))
	switch e.Cause {
	case otter.CauseOverflow:
		l.evictedSize.Add(1)
	}
}
