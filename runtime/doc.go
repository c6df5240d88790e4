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
// probe.go is the startup probe; operate.go the operator actions on the
// program catalog; ops.go the typed single-key primitives (GET, SET PX,
// UNLINK) that capabilities build on; pubsub.go the Pub/Sub facade (sharded
// Publish and Subscribe on the pubsub lane, with exact up/down states).
//
// No exported API takes a raw command or a key string, and no go-redis client
// escapes the package: capabilities use typed facades (Deployment.Programs,
// Deployment.Get/SetWithTTL/Delete, Deployment.Publish/Subscribe).
package runtime
