// Package fence is the protected side of caphost's fenced leases: the part
// that a resource (a database row, a file, an in-process state machine)
// uses to reject writes from a holder whose lease was lost. caphost's host
// hands each fenced-lease holder a Token (resource epoch, counter) from a
// no-TTL Redis counter; a holder that paused past its lease still holds an
// old token, and only the resource can stop its late write. This package
// does that, following the reference's §23 "Fencing & coordination":
//
//   - Token: the fencing token with a strict canonical text form
//     "epoch.counter" (also its JSON form) and a 16-byte binary form.
//   - Guard: an in-memory high watermark per resource; Guard.Do runs a
//     write iff its token is admitted, atomically with the advance.
//   - Store: the durable registration (resource, epoch, state
//     PENDING/ACTIVE/RETIRED, high watermark, registration digest) in a
//     database/sql table, and Store.Write, which admits a token with one
//     compare-and-advance UPDATE in the same transaction as the caller's
//     write, so a stale token's write is rolled back.
//
// # Admission rule
//
// A token is admitted iff the registration is ACTIVE, the token's epoch is
// the registered epoch, and its counter is strictly above the high
// watermark (Strict, the zero Mode: each token once, the reference's rule)
// or at or above it (Repeatable: the current holder may write again). A
// lower epoch is always rejected (EpochRetired); a
// higher one too (EpochUnregistered): only a registration, never a token,
// moves a resource to a new epoch, so a Redis caller cannot raise it.
//
// # Registration lifecycle
//
// The protected resource's durable store owns the registration; Redis only
// mirrors it. Register (or RegisterTx, inside the transaction that creates
// the resource) writes PENDING with a random epoch and digest and
// watermark 0; a reconciler provisions the Redis counter with them
// (fenced-counter-provision-v1), verifies the read-back receipt and calls
// Activate. Retire leaves a RETIRED tombstone; Reregister then starts a
// new, strictly larger epoch. Abandon rolls back a PENDING registration
// that admitted nothing. A counter lost in Redis while the row is ACTIVE is
// never re-created from 0: the operator reprovisions it at or above
// Registration.HighWatermark, with backup or incident evidence, and fenced
// acquires fail closed until then.
//
// The Redis counter is not monotonic forever: asynchronous replication can
// lose acknowledged increments across a failover, and a promoted replica
// can hand out counters at or below the watermark. The watermark keeps
// those stale writers out (in Strict mode also a re-issued equal counter);
// it cannot keep availability: new holders see ErrStaleToken until the
// counter passes the watermark. Alert on ErrStaleToken rates.
//
// # Dependencies
//
// This is a leaf package: the standard library and database/sql only, no
// go-redis and no other caphost package (internal/archtest enforces it),
// so a protected service imports it without pulling in the host. Tests use
// modernc.org/sqlite and a PostgreSQL server through pgx.
//
// What may change: new dialects, new Outcome values at the end of the
// list, extra columns added by DDL with defaults. What may not: the
// token's text and binary forms, the admission rule, the meaning of the
// stored columns and state names.
package fence
