// Package hint owns the bytes of an L1 invalidation hint: the layout, its
// authentication and its freshness window. When a host invalidates a key or
// a whole region it publishes a hint on Redis Pub/Sub so the other hosts
// drop their L1 copies; this package seals and opens those messages. It has
// no Redis and no Pub/Sub in it: host/cache publishes, subscribes, ignores
// its own Sender and flushes every L1 when the subscription drops (Pub/Sub
// is best effort: a hint lost while disconnected is never replayed).
//
// # Layout v1 (big-endian, no padding)
//
//	field          size    notes
//	magic          4       0xC5 'H' 'N' 'T' (0xC5 'H' is never valid UTF-8)
//	version        1       1
//	kind           1       1 KeyInvalidated, 2 RegionInvalidated
//	sender         16      the sending host instance, never all zero
//	issued-at      8       milliseconds since 1970 (UTC), < 2^63
//	region length  1       1..64
//	region         n       [a-z0-9][a-z0-9._-]*
//	location       32      KeyInvalidated only: the entry's location digest, not all zero
//	scope length   1       KeyInvalidated only: 1..128
//	scope          m       KeyInvalidated only: the region generation
//	tag            32      HMAC-SHA-256(K, every byte before the tag)
//
// A hint is MinBytes (64) to MaxBytes (288) bytes. The fields of the other
// kind are absent, not zeroed: a RegionInvalidated hint ends with its
// region. Decoding is strict: exact lengths, no trailing bytes, a valid
// region slug, the scope bounds, a known kind; whatever Open accepts, Seal
// writes again byte for byte.
//
// # Authentication
//
// K = HMAC-SHA-256(secret, "caphost/cache/hint/v1 mac key"). Deriving the
// key puts the tags in a domain of their own whatever else the configured
// secret keys (host/cache derives other keys from it with other labels),
// and the Codec keeps only K, never the secret. The tag is the full 256
// bits, not truncated: 32 bytes on a message of at most 288 cost nothing
// and leave no truncation argument to make. It covers the whole frame,
// magic and version included, so a tag of one version never verifies as
// another's.
//
// Open reads only the magic, the version and the total length before it
// checks the tag (with hmac.Equal, in constant time); every other field is
// interpreted only once the hint is known to come from a holder of the
// secret. Anyone who can publish on the channel but lacks the secret can
// therefore make a receiver do nothing but count an ErrForged. The version
// is read first on purpose: during a rolling deploy a hint of another
// version is reported as ErrUnknownVersion, not as a forgery.
//
// # The freshness window
//
// Open accepts a hint issued at most the window before or after its
// clock's now, edges included (MinWindow..MaxWindow, host/cache defaults
// to 30 s). The tag proves who sent a hint, not when it was delivered:
// anyone on the channel can record a genuine hint and publish it again.
// The window bounds that replay. A replayed hint can only make a host drop
// an L1 entry or flush a region's L1 that it would otherwise have kept:
// the safe direction, costing a Redis read, never serving a stale value.
// It cannot resurrect anything, since hints only remove, and it works only
// within the window of its issue. Receivers do not remember the hints they
// have seen: exact deduplication would need per-sender state, and a
// duplicate drop is harmless. The window's other side refuses hints from
// the future: without it, a hint stamped by a host whose clock runs far
// ahead would stay replayable until that far time; with it, a receiver
// accepts any one hint during at most twice the window. It is as wide as
// the past side because hosts' clocks skew both ways. The window must
// cover that skew plus the delivery delay.
//
// A host with a secret shared across deployments (not recommended) would
// accept another deployment's hints for a region of the same id: again
// only extra drops.
//
// # Errors
//
// Every failure is an *Error whose Category is one of a closed set:
// ErrMalformed, ErrUnknownVersion, ErrForged, ErrStale, ErrFuture (which
// also matches ErrStale) and ErrInvalid. Match them with errors.Is. Error
// text carries the category and a fixed reason, never a byte of the hint,
// the region or the secret.
//
// # What may change here
//
// New kinds and fields come with a new version (receivers first, as for
// the envelope); the window's bounds. What must not: the v1 layout, the
// key derivation and the tag (hosts of two releases share one channel),
// verification before interpretation, and the category names (metrics
// switch on them).
package hint
