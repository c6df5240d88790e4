// Package fenced is the fenced lease: a lease whose every grant carries a
// fencing token (resource epoch, counter) from a per-resource counter that
// lives in Redis without a TTL, so a protected resource that checks tokens
// (host/fence) rejects a paused holder's late write once a newer holder
// has written. The lease alone is EFFICIENCY_ONLY, like host/lease; the
// FENCED guarantee holds only where the protected resource verifies the
// token against its durable registration.
//
// The package owns the Redis side of the protocol over the catalog programs
// fenced-counter-provision-v1 and fenced-lease-acquire/inspect/renew/
// release-v1:
//
//   - Provisioning: the protected store creates a PENDING registration
//     (random epoch, registration digest, high watermark 0) in the
//     transaction that creates the resource; Activate provisions the Redis
//     counter from it (never on the request path: a missing counter is
//     never recreated as 0) and only then marks the registration ACTIVE.
//   - Acquire increments the counter and returns the new token; a repeat of
//     the same attempt (after a lost reply) returns the same token without
//     an increment. A counter that is missing, of another epoch or
//     registration, below a live token or at the hard-fail threshold is a
//     typed refusal — fail closed, never a grant.
//   - Handles follow the efficiency lease's rules: monotonic local
//     validity minus a drift budget, ACTIVE then LOST, RELEASED or UNKNOWN
//     for good, renew and release checked against owner, operation and
//     token, and a lost renew reply is UNKNOWN without a retry.
//   - Replication profile (opt-in, Config.Replication; configuration
//     capabilities.fenced-lease.replication: {acks, timeout}): every
//     acquire and provision is followed by WAIT on the same connection; a
//     grant fewer than acks replicas acknowledged is NotReplicated —
//     released best-effort, no handle, no token — and a counter is
//     ProvisionNotReplicated (the registration stays PENDING). A lost WAIT
//     reply is INDETERMINATE with the same one reconciling repeat. WAIT
//     narrows the failover window (an acknowledged grant survives a
//     failover to a replica that acknowledged it); it does not close it,
//     so the protected store's Strict watermark stays the safety mechanism
//     (docs/replication.md). New registers the profile with the runtime
//     (and the host does before its startup handshake), so the startup
//     probe's replication check proves it first: a script-lane user
//     without +wait fails it as a misconfiguration, fewer online replicas
//     than acks warns.
//
// What may change here: more outcome kinds only with new program ids (or, as
// NotReplicated, host-side outcomes of an opt-in profile, documented with
// it); the threshold and drift defaults. What must not: a token is reported only
// for a grant Redis confirmed, and the counter is never created or lowered
// on the request path.
package fenced
