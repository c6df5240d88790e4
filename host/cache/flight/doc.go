// Package flight owns the cache's stampede and source protection inside one
// process: a bounded single-flight (Group), so that concurrent misses of
// one key share one source load, and a source bulkhead (Bulkhead), so that
// the loads of one region never exceed a fixed concurrency and queue. It
// knows nothing of Redis, keys.Key or regions: host/cache keys a Group
// with the entry's key and calls Acquire inside the load.
//
// # Why not golang.org/x/sync/singleflight
//
// It has no bound on keys or waiters and no deadline, runs fn on the first
// caller's goroutine with the first caller's context (so one caller's
// cancellation fails everyone, and a caller cannot leave a slow load), and
// re-panics. A Group bounds every dimension the stampede layer needs:
//
//   - MaxKeys: the loads running at once. A load counts until its fn
//     returns, not only while callers wait for it, so a loader that ignores
//     its context cannot grow the goroutines without bound: its key is free
//     for a fresh load at once, but the Group refuses new keys
//     (ErrTooManyKeys) while MaxKeys such loads run. Stats.Running shows
//     them.
//   - MaxWaiters: the callers attached to one load (ErrTooManyWaiters).
//   - LoadTimeout: the deadline of every load from its start. When it
//     passes, every attached caller returns ErrLoadTimeout at once, even if
//     fn does not return.
//   - Abandoned loads are reaped: when the last attached caller has gone
//     (its own ctx ended), the load's context is cancelled (cause
//     ErrAbandoned) and the key is free at once. A result that arrives
//     after the load's context ended is discarded.
//   - The entry is removed the moment fn returns: the map holds only loads
//     in progress and never becomes a cache.
//
// A caller that has something to serve while a load runs (a stale value)
// calls Lead instead of Do: it starts the load when none runs, and
// otherwise gets ErrRunning at once rather than joining, so one caller per
// key waits for a refresh and the others answer.
//
// fn runs on a goroutine of its own with a context detached from every
// caller's cancellation but carrying the starting caller's values (trace
// ids), so a caller can leave without failing the others. A panic in fn is
// recovered and every attached caller gets a *PanicError.
//
// # Bulkhead
//
// NewBulkhead(maxConcurrent, maxQueued): permits, then a FIFO queue of at
// most maxQueued callers, then ErrBulkheadFull at once. The caller's
// deadline bounds its wait (ErrBulkheadTimeout). release is idempotent.
// "Cache fail-open is not unlimited fail-open": when Redis is down every
// miss becomes a source load, and the bulkhead is what stands between
// that and the source.
//
// # Errors and diagnostics
//
// Every refusal and end is a Reason from a closed set, an error usable with
// errors.Is; ErrOverloaded matches the four refusals a bound made (the
// cache reports them as OVERLOADED), ErrInvalid the configuration reasons.
// Keys may be digests of personal data: no error and no Stats field ever
// carries one.
//
// # Clocks
//
// The only time here is LoadTimeout, enforced by context deadlines, and the
// caller's own deadline; there is no clock to inject. Tests run inside
// testing/synctest bubbles, whose fake clock makes the timeouts exact.
//
// # What may change here
//
// The limits' typo guards, the Stats fields (new ones may be added), the
// internal data structures (one mutex per Group today; a sharded map if a
// region's key rate ever needs it). What must not: at most one running
// fn per key among attached callers, every bound above, a panic never
// escaping, keys never in errors or stats, and the names of the Reasons
// (metrics and alerts switch on them).
package flight
