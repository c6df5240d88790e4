// Package runtime owns caphost's Redis runtime core: it turns a validated
// policy.RedisConfig into one go-redis client per selected deployment and
// lane, installs the admission hook and the command guard on every client it
// creates (including Cluster node clients), classifies every call's
// execution certainty, and owns the single OPEN → DRAINING → CLOSED
// lifecycle.
//
// What may change here: client construction (clients.go; idleconn.go, how
// long a pooled connection goes without go-redis's reuse check), admission and
// certainty refinement (admission.go), the lifecycle (lifecycle.go) and the
// public surface (runtime.go, deployment.go). The no-resend rules — every
// client has MaxRetries -1, Cluster MaxRedirects -1, RESP2 without
// maintenance notifications, primary-only routing — are invariants pinned
// by tests; relaxing one needs a proof that no write can be sent twice.
// topology.go refreshes a Cluster lane client's slot map on topology-class
// failures (refused or broken connections, i/o timeouts, MOVED/ASK,
// CLUSTERDOWN, TRYAGAIN, MASTERDOWN, LOADING, READONLY), at most once per
// lane every 250 ms (and go-redis reloads a map older than 10 s as a
// backstop); it only refreshes the map — the failed call keeps its
// certainty and is never sent again.
// cluster_redirect.go follows a MOVED or ASK reply — which proves the node
// did not run the command — exactly once, to the named node's client (ASKING
// first for ASK; pipelines per target node, never MULTI/EXEC): the call's
// certainty is the second node's outcome, and a timeout there stays
// INDETERMINATE and is never resent. This is done in the hook chain, not by
// go-redis MaxRedirects > 0, because go-redis spends the same redirect budget
// on resending after connection errors and timeouts.
// sentinel.go finds and follows a Sentinel deployment's primary: one route
// per deployment asks every configured Sentinel and switches only when a
// quorum agrees (runtime/internal/sentinelquorum), confirms the candidate
// with ROLE, and swaps it in atomically on a topology-class failure of any
// lane, on +switch-master from any Sentinel, or every 30 s, single flight
// and with backoff. It is built on plain go-redis Clients, not
// FailoverClient: FailoverClient takes the first Sentinel that answers
// (no quorum), switches on one Sentinel's +switch-master, closes the
// connections to the old primary under calls in flight, and shares one
// dialer and TLS configuration between Sentinels and data nodes. Here the
// lane clients stay the same objects (the executor, Pub/Sub and the probe
// hold them) and the swap happens in their dialer: every connection carries
// the generation of the primary it was dialled to, a pooled connection of
// an older generation is refused on reuse and closed unwritten, a call
// already on one finishes there with its own certainty, and nothing is
// re-sent.
// cluster_coverage.go says when a Cluster deployment is covered (every
// primary of a fresh slot map answers as master with all slots served),
// for the startup probe and the live check. driverlog.go adapts go-redis's
// process-wide logger to slog (redacted, rate-limited); New never installs
// it — RouteDriverLogs is for the process's main.
// probe.go is the startup probe; operate.go the operator actions on the
// program catalog; ops.go the typed single-key primitives (GET, SET PX,
// UNLINK) that capabilities build on; pubsub.go the Pub/Sub facade (sharded
// Publish and Subscribe on the pubsub lane, with exact up/down states).
//
// No exported API takes a raw command or a key string, and no go-redis client
// escapes the package: capabilities use typed facades (Deployment.Programs,
// Deployment.Get/SetWithTTL/Delete, Deployment.Publish/Subscribe).
package runtime
