// Package cache owns caphost's cache capability: cache regions on Redis
// with the reference design's guarantees, as a host module
// (capabilities.cache) and as a Go API.
//
// A region is declared by configuration or by a cache-region guest and
// compiled with the operator's bounds and defaults into a frozen policy
// (policy.CacheRegionPolicy: revision and digest). Its values pass through
// a codec — the built-in identity codec or a codec guest, which also
// upgrades payloads of older schema versions on read — into an envelope
// (host/cache/envelope) and are stored under keys from the sharded key
// layout (runtime/keys): a region is split into shards, each with a random
// 128-bit generation, and every entry key is built under its shard's
// generation, so invalidating a region is replacing its generations.
//
// Reads: a lookup reads the shard's generation and the entry in one round
// trip with a bounded read (never more than the region's largest value + 1
// byte) — or, while the hint subscription is up and a read confirmed the
// generation less than the region's generation trust ago, only the entry
// (a region invalidation's hint ends the trust; strict regions never
// trust) — checks the envelope (magic, versions, length, digest, expiries)
// and the codec's versions, and answers one of a closed set of outcomes:
// Hit (FRESH or STALE), NegativeHit, Miss (ABSENT, EXPIRED, INVALIDATED),
// IncompatibleSchema, Unavailable. A corrupt entry or a codec failure is an
// error — never a miss; a corrupt entry, or one the codec guest crashed on,
// is quarantined. A guest that runs into its deadline fails the lookup
// closed too, and the entry goes to a background verifier (one at a time
// per Cache, verify.go) that decodes it again measuring the guest
// thread's CPU time: only a second deadline with the call timeout spent
// on CPU (the bytes need more than the budget) quarantines it; a deadline
// without the CPU is a slow or overloaded host and leaves it in place. Regions that allow it
// keep an in-process L1 (host/cache/l1) kept coherent by authenticated
// invalidation hints on Pub/Sub (host/cache/hint); while the hint
// subscription is down, L1 is flushed and not used.
//
// Writes: every write goes through cache-put-v2, which checks, atomically,
// that the shard's generation is the one the writer captured, optionally
// that the entry is still what the writer's lookup observed, and
// optionally that the stored source revision is older. Per-key
// invalidation writes a short-lived tombstone for the same reason: a load
// that began before an invalidation can never store its older result
// after it. TTLs are jittered deterministically per key and policy
// revision, never below the region's minimum (host/cache/expiry).
//
// GetOrLoad is cache-aside with the reference's stampede layers: bounded
// local single-flight, the distributed refresh soft lease, a source
// bulkhead, stale-while-revalidate and stale-if-error before the hard
// expiry, negative caching only of authoritative absence, and a degraded
// source read while Redis is unavailable. A caller that finds another
// host refreshing waits for that host's write, which it learns of from the
// hint channel (or its poll). Sidecar serves the same to
// non-Go services over HTTP, with refresh tokens so one caller of many
// loads a missing key.
//
// What may change here: metrics, HTTP details, defaults. What must not:
// the outcome sets and their meaning (a miss is never an outage, a guest
// failure never a miss), the storage protocol (generation capture,
// observed-entry writes, tombstones) and the sidecar's codes and headers.
package cache
