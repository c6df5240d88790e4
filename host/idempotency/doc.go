// Package idempotency is owner-safe idempotent execution: a request that
// carries an idempotency key runs its action at most once per attempt, and
// a retry of a completed request gets the stored response back instead of
// a second execution. It owns the HTTP side of the IETF Idempotency-Key
// draft — parsing the header, the request fingerprint, and the bounded
// capture and strict encoding of a response for replay. The executor over
// the catalog's idempotency programs (claim → start → complete, with a
// processing lease separate from the replay TTL) and the middleware that
// joins the two are being built on top of these parts.
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
