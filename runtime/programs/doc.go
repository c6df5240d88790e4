// Package programs owns caphost's atomic program catalog: the embedded Lua
// sources under lua/, the program-set.json manifest that is the single
// source of truth for every program's contract (KEYS/ARGV schema, complete
// status enum, result shape, certainty, clock, ACL commands, digests), the
// deterministic Redis Functions library generated from the same sources, and
// the typed facades that run programs in one of two modes:
//
//   - evalsha-managed: EVALSHA; only on an exact NOSCRIPT reply, SCRIPT LOAD
//     of the embedded source, a SHA check, and exactly one more EVALSHA. EVAL
//     is never sent.
//   - functions-provisioned: FCALL (FCALL_RO for a read-only program) of the
//     library that Deploy installs on every primary; Verify checks the
//     deployed library byte for byte.
//
// There is never a fallback between the modes.
//
// What may change here: adding a program means adding lua/<id>.lua, a
// manifest entry (with its sha256/sha1), a typed facade with its status enum
// and golden vectors under testdata/programs/<id>.json; the drift tests fail
// until all four agree. Existing programs are immutable once released: a
// behaviour change is a new id (-v2), never an edit of a -v1 source.
//
// The rate-limit programs (fixed window, sliding counter, token bucket,
// GCRA, sliding log) and the concurrency-permit programs read Redis TIME
// once per call and are specified by the pure-Go reference
// in internal/rateref; a formula change is a new program id there and here.
//
// The cache's write is cache-put-v2: an envelope or a tombstone, to the
// captured shard generation only and, optionally, only while the entry is
// still what the lookup observed and only when the envelope's source
// revision is newer; it reads the host/cache/envelope headers. The lookup's
// read needs no program (runtime.Deployment.ReadScoped).
//
// The lease programs (lease-acquire/inspect/renew/release-v1) keep an
// efficiency lease as one attempt envelope (owner token + operation id) with
// a PX TTL: a replay of the same attempt reports the server's remaining TTL,
// renew and release act only for the attempt that holds the lease. The
// fenced programs (fenced-counter-provision-v1, fenced-lease-*-v1) add a
// no-TTL fence counter in the same slot, provisioned only from the
// protected store's durable registration, and issue fencing tokens
// (resource epoch, counter) that never go back while the counter stands.
// FencedLeaseAcquireReplicated and FenceCounterProvisionReplicated send the
// program and WAIT as one pipeline on one connection to the key's primary
// (the only path the guard admits WAIT on, under a replica-wait grant
// bounded by the call's ReplicaWait) and report the replicas that
// acknowledged; an applied program whose WAIT did not answer is a
// WaitLostError (INDETERMINATE).
//
// The idempotency programs (idempotency-claim/inspect/start/renew/complete/
// fail/release-v1) keep one record per request scope: an atomic claim that
// elects one owner (owner token + attempt), owner-safe transitions
// CLAIMED -> EXECUTING -> COMPLETED | FAILED_RETRYABLE | ABANDONED, a
// bounded response replayed for its own TTL, and PTTL-based deadlines: the
// key lives lease + retention while in progress, so an expired execution is
// found and fails closed (RECOVERY_REQUIRED), never taken over.
//
// The lean rate programs (rate-token-bucket-v2, rate-fixed-window-v2,
// rate-sliding-counter-v2, rate-gcra-v2) decide as their v1 over one string
// state in fewer Redis calls; rate-fixed-window-v3 is rate-fixed-window-v2
// with windows up to 366 days (a year) and v2's state, so v2 and v3 share
// keys. A RatePlan renders one policy's call once. A
// Batcher sends plan calls that arrive while the script lane is busy as one
// pipeline, each call keeping its own atomicity, reply and certainty.
//
// Callers never name a program, pass KEYS or see numeric statuses: facades
// take keys.Key values and typed arguments and return typed results whose
// status maps 1:1 to the manifest and to a certainty.Outcome.
package programs
