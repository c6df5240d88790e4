// Package idempotency is owner-safe idempotent execution: a request that
// carries an idempotency key runs its action at most once per attempt, and
// a retry of a completed request gets the stored response back instead of
// a second execution.
//
// The Executor runs the protocol over the catalog's idempotency programs:
// claim (one atomic step that elects one owner among concurrent
// duplicates, or answers the stored response), start immediately before
// the action, renew at a third of the processing lease while it runs
// (ending the action's context, with ErrLeaseLost or
// ErrLeaseExpiredLocally, when the record is no longer this owner's or
// no renew was confirmed within nine tenths of the lease on the local
// monotonic clock), then complete with the response, or mark the record
// retryable (the action proved it had no effect) or abandoned (its effect
// is unknown: a panic, an unclassified error, a response too large to
// store, a lease lost while it ran). The
// action runs only after a start this very call sent was confirmed; a
// second call of the same attempt in the process never starts it. Lost
// replies are repeated once with the same operation id, then inspected.
// The processing lease and the replay TTL are separate durations.
//
// Middleware puts the IETF Idempotency-Key draft in front of any
// http.Handler: the header parsed as a Structured Field string, the
// request fingerprint (method, target, body), the bounded capture of the
// handler's response and its replay (status, allowlisted headers, body),
// 400/409/422/503 as the draft describes.
//
// The stateless steps (Claim, Inspect, Start, Renew, Complete, Fail,
// Release) drive the same protocol one program at a time for callers that
// keep only their attempt, and Sidecar serves them over HTTP
// (POST /v1/idempotency/<step>) for services outside the process. The
// package is also the host's `idempotency` capability (CapabilityInfo,
// Decode of capabilities.idempotency, metrics via WithRegisterer); see
// docs/idempotency.md and card.md.
//
// Its guarantee is REQUEST_REPLAY: while a record lives, the same request
// fingerprint under the same scope elects one current owner among
// concurrent duplicates and replays the completed response. It is not
// exactly-once for side effects outside the action's own store, and a
// failover of an asynchronously replicated Redis can lose a record.
//
// Raw idempotency keys and principals never reach Redis, logs or metrics:
// the scope is an HMAC by the host's key builder over (principal, key)
// under the route's region.
//
// What may change here: the stored response encoding only with a new codec
// id (records outlive a deploy; the old id stays readable), the header
// allowlist of replayed responses, the defaults. What must not: an action
// never runs for a request whose claim was not confirmed, and a response
// that cannot be stored is never silently dropped (the record fails
// closed).
package idempotency
