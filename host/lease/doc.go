// Package lease is the efficiency lease: an owner-token lease on a named
// resource that lets one worker out of many do a piece of work most of the
// time — refresh a cache entry, run a scheduled clean-up — while the
// authority that keeps the data correct stays elsewhere (a database
// constraint, a fenced write). Its guarantee is EFFICIENCY_ONLY: a paused
// holder, a clock step or an asynchronous-replication failover can leave
// two holders for a while, and nothing here can stop a paused holder's late
// write. Work that must never run twice uses a fenced lease and a protected
// resource that checks its token (host/fence), or idempotent execution.
//
// The package owns the protocol around the catalog programs
// lease-acquire-v3, lease-inspect-v1, lease-renew-v1 and lease-release-v3
// (the v3 programs are v1's on the same keys and envelope, with the
// envelope built and checked here and an integer reply on the fast path):
//
//   - An Attempt (owner token + operation id) is minted before the first
//     send, so a retry after a lost reply repeats the same attempt
//     (REPLAYED_SAME_OPERATION) instead of contending with itself; an
//     acquire whose reply was lost is reconciled by repeating it once.
//   - Validity is local and monotonic: the TTL (or, on a replay, the
//     server's remaining PTTL) counted from the moment before the send,
//     minus a drift budget. Wall-clock time is never consulted.
//   - A Handle moves from ACTIVE to LOST, RELEASED or UNKNOWN and never
//     back; a renew checks the owner and really extends the TTL, and a renew
//     or release whose reply was lost makes the handle UNKNOWN, which work
//     must treat as lost.
//   - A bounded wait backs off with jitter and never sleeps past the
//     holder's remaining TTL; the script itself never waits.
//   - Hold runs a function under a watchdog that renews at a third of the
//     TTL, stops at the caller's deadline and cancels the function's
//     context the moment the lease is lost or unknown — decided by the
//     validity deadline, not by counting failures.
//
// Keys are built by the host's key builder from the purpose and the
// resource (HMAC'd); owner tokens never reach logs, metrics or errors.
//
// What may change here: new outcome kinds only with new program ids (an old
// binary must not misread a new status); the drift and cadence defaults as
// measurements justify. What must not: ACTIVE never follows a terminal
// state, and a lease is never reported held on a guess.
package lease
