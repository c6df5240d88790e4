// Package ratelimit owns caphost's rate-limit capability: the Limiter that
// evaluates compiled rate policies (policy.RatePolicySet) against the Redis
// rate programs, the outcome model (Evaluated, Degraded, Unavailable,
// Indeterminate), the failure modes (fail-closed, a bounded local emergency
// limiter, explicit fail-open, shadow), evaluation-id dedup and its single
// reconciling retry, hierarchical evaluation, Prometheus metrics, policy
// selection (Selector, StaticSelector, GuestSelector) and the one entry
// point every front end calls (Limiter.Decide: one policy-set snapshot per
// request); the front ends themselves — the net/http Middleware and the
// sidecar HTTP API (Sidecar, its JSON types and strict decoders) — and the
// RateLimit response fields (WriteHeaders: legacy and the IETF draft); and
// the separate concurrency-permit port of §20.8 (ConcurrencyLimiter,
// Lease): acquire/renew/release with host-minted owner tokens, always
// fail-closed.
//
// Every rate algorithm runs its lean program (token bucket, sliding counter
// and GCRA v2, fixed window v3 — v2's state with windows up to 366 days:
// one string state; sliding log v3: a sorted set trimmed once per tick;
// all under key version 2) through a programs.Batcher:
// concurrent decisions that find the script lane busy share one pipeline
// (WithBatching), each keeping its own atomic program call and outcome; a
// lone decision is sent at once.
//
// Raw subject values (tenant, principal, API key, client IP, ...) enter only
// through Request.Subject and leave only as an HMAC digest inside a
// keys.Key: they are never stored, logged, put in errors or metric labels,
// or shown to a selector guest.
//
// What may change here: new algorithms' wiring (once the program exists
// and policy admits it), HTTP mapping details, metrics (bounded labels
// only). What must not: the outcome mapping rules of §19/§21 (a timeout is
// never an allow; program, codec and config errors never fall back), the
// sidecar's stable error codes and field names, and "HTTP 200 for every
// evaluated outcome" (a client reads allowed, or ok for permits, from the
// body, so a deny never looks like a transport failure).
package ratelimit
