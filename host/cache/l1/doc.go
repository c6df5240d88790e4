// Package l1 owns a cache region's in-process level: a bounded map of
// decoded entries in front of Redis (L2), its bounds, its expiry judge and
// its coherence mechanics (flush epoch, delete sequence). It knows nothing
// of Redis, envelopes, codecs or Pub/Sub (it imports nothing of caphost):
// host/cache decides what to store (the decoded value, its size, the last
// instant it may be served) and feeds invalidation hints to Delete and
// subscription drops to Flush.
//
// # Bounds
//
// Both bounds are mandatory. Every entry is charged KeySize + value +
// EntryOverhead bytes, where the value's size is the caller's account of
// the decoded value; an entry larger than MaxEntryBytes is refused. The
// library bounds one quantity, a weight, so each entry weighs max(charge,
// ⌈MaxBytes/MaxEntries⌉): the weights' sum stays ≤ MaxBytes, which keeps
// the charged bytes ≤ MaxBytes and the entry count ≤ MaxEntries at once.
// The price is that entries smaller than MaxBytes/MaxEntries use a whole
// slot: size MaxEntries for the region's typical entry. The bounds hold
// once maintenance has run, which it does on the writing goroutine after
// each write; while several writers race, the library may exceed its
// maximum by the writes not yet replayed (a bounded buffer).
//
// # Expiry
//
// An entry never outlives its L2 hard expiry. Set takes the last instant
// the entry may be served (at most its hard expiry; host/cache passes the
// soft expiry when there is one, since a stale entry is served from L2)
// and stores min(that, now + MaxAge) by the injected clock; every Get
// compares the clock with it and misses at or past it (and removes the
// entry), so a hit needs no other clock read. The library's own per-entry
// expiry is not used: it would read a second clock on every hit and keep a
// timer wheel and a goroutine, and it could only reclaim memory early,
// never serve less; an entry nobody reads any more ages out through the
// size policy, inside the bounds. MaxAge, the region's L1 TTL cap, can
// only shorten an entry's L1 life.
//
// # Coherence
//
// A Key is the L2 entry's identity: its location digest and the region
// generation the lookup captured. The map is keyed by a seeded 64-bit hash
// of the Key and each entry keeps its whole Key, so a collision costs a
// miss (or a Delete drops an unrelated entry), never another entry's
// value. A generation bump makes every older entry unreachable without
// touching L1 (they age out by MaxAge or size). Delete(key) removes one key (an
// invalidation hint); Flush() removes everything (the invalidation
// subscription dropped: hints may have been lost).
//
// A fill races with both: a caller reads L2, an invalidation lands, the
// hint deletes nothing, and the caller then stores the old value. So a
// caller takes a Ticket before its L2 read and passes it to Set. The
// Ticket holds the flush epoch and the delete sequence; Set keeps the entry
// only if neither moved, checking before and again after the store (a
// stored entry that lost the race removes itself, only if it is still the
// key's entry). An entry is served only once its Set's second check has
// passed, and only in the epoch it was stored in, so an entry that lost
// the race is never served, not even before it removes itself: once Delete
// or Flush returns, Get misses. The delete check
// is global, not per key: any Delete during the L2 read drops the fill. That
// is always safe and costs only fills (the rate of hints times the L2 read
// time); a per-key refinement can come later without an API change.
//
// The wiring (host/cache) must Flush when the subscription drops and again
// when it is re-established, so that fills made while hints could not
// arrive are dropped too.
//
// # Strict regions
//
// A region declared strict gets no L1: New refuses its Config with
// StrictRegion, and the wiring then runs the region with a nil *Cache,
// which is a valid disabled L1 (Get misses, Set reports
// NotStoredDisabled, the rest does nothing). A policy without L1 uses the
// nil *Cache the same way.
//
// # Library and goroutines
//
// The map is github.com/maypok86/otter/v2 (W-TinyLFU admission and
// eviction, weighted). Its maintenance runs on the calling goroutine (an
// inline executor) and it has no expiry configured, so it starts no
// goroutine at all; Close still stops and waits for any it had.
//
// # What may change here
//
// EntryOverhead (an accounting estimate), the default MaxEntryBytes, the
// library behind the map, a per-key delete check. What must not: an entry
// served at or past its hard expiry or MaxAge, a Set that survives a Flush
// or Delete that began after its Ticket, and the names of the Reasons and
// SetOutcomes (metrics and alerts switch on them).
package l1
