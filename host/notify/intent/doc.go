// Package intent owns the durable notification intent: the frozen plan
// (recipient, ordered transports, the canonical render.Result bytes,
// created-at), its append to a Redis Stream of the coordination role, the
// per-intent record that deduplicates submits and carries the delivery
// state and receipts, and the consumer-group operations the dispatcher
// (host/notify/dispatch) runs on it.
//
// Guarantees: at-least-once delivery plus an idempotent consumer — never
// "exactly once". A submit with an idempotency key already used returns
// the first intent (notify-submit-v3 creates the record and appends the
// entry in one step). Every call reports its certainty: a submit whose
// reply was lost is INDETERMINATE, and repeating it with the same key
// resolves it (Duplicate, with the same id). Concurrent submits are
// pipelined (a programs.Batcher), and those of one shard share script
// calls of up to four intents: each intent is still judged on its own,
// and a lost reply leaves every intent of its call INDETERMINATE. A lone
// submit is sent at once. Claim (notify-claim-v2)
// never begins an attempt after one that was claimed and never finalized:
// that attempt may have been sent, so the intent becomes INDETERMINATE and
// the claim reports InDoubt — even when the attempt never reached its
// transport, which nothing here can tell. Finalize and RecordReceipt
// (notify-finalize-v2) reduce an attempt's receipts monotonically and
// regardless of arrival order: a definite rejection of the current
// attempt resolves INDETERMINATE into FAILED, ACCEPTED wins over all.
//
// Layout. Intents spread over Config.Shards shards; a shard is one stream
// (the anchor of a keys.Sharded layout of keys.CapNotify) plus its
// quarantine stream, and every intent record lives in its shard's slot,
// so each program touches one Cluster slot. The intent id is the hex of
// the record location's keyed digest (HMAC of the idempotency key): the
// raw key never reaches Redis, and the id finds the record without a
// lookup. Rotating the HMAC write version or changing Shards moves the
// records: drain the streams first.
//
// Reclaim. XAUTOCLAIM looks at no more than 10×COUNT PEL entries per
// call, so Reclaim keeps a cursor per shard in the Store and goes on from
// it: each round trip reads the delivery counts with XPENDING IDLE from
// the cursor and claims from the first idle entry it found, the cursor
// wraps to "0-0" at the end of the PEL, and one Reclaim makes at most 4
// XAUTOCLAIM calls. Live consumers' entries at the head of the PEL so no
// longer starve a dead consumer's entries behind them (see Reclaim).
//
// Trim and PEL. Each stream is bounded by XADD MAXLEN ~ Config.MaxLen,
// which trims the oldest entries whether or not a consumer group still
// has them pending: MAXLEN never consults the PEL (Redis 7.0). A trimmed
// entry that was never delivered is lost to dispatch; one that was
// pending stays in the PEL as an id without fields until XAUTOCLAIM
// reports it deleted and drops it. Either way its record stays PENDING or
// DELIVERING until its retention ends, visible through Get. Size MaxLen
// far above the backlog (pending + lag, reported by Stats) — the
// dispatcher's observer exports both so an alert fires long before.
//
// At rest. With Config.Seal (a seal.Ring) every plan is sealed before it
// reaches Redis, bound to its intent id, and the record's plan digest is
// the layout's keyed digest instead of a plain SHA-256: Redis and its
// copies hold no recipient or content. An entry that does not open is
// ErrCorruptPlan (quarantined); one sealed with a key version the ring
// does not hold is ErrPlanKeyUnavailable (left pending for a consumer
// that holds it); a plain-text plan under a ring is refused unless
// Config.AcceptPlaintext.
//
// Recipients and rendered content are never logged, put in errors,
// metrics or keys: Plan prints only sizes and names, and the recipient
// is a transport.Recipient (redacted by type).
package intent
