// Package httpapi owns the daemon mux of `caphost serve`: it mounts the
// host's operations endpoints (/livez, /readyz, /metrics), the capability
// routes (today the rate-limit sidecar, ratelimit.Sidecar: POST
// /v1/ratelimit/evaluate and POST /v1/concurrency/acquire, /renew and
// /release; the cache sidecar, cache.Sidecar: /v1/cache/...; and the
// lease sidecar, lease.Sidecar: POST /v1/lease/acquire, /inspect, /renew
// and /release; and the idempotency sidecar: POST /v1/idempotency/claim,
// /inspect, /start, /renew, /complete, /fail and /release) and
// serves the guest admin endpoints (GET /admin/guests, PUT
// /admin/guests/{name}, POST /admin/guests/{name}/rollback).
//
// Paths are routed only when canonical (Canonical, on the escaped path):
// any other is a 400 bad-path before the mux sees it, because ServeMux
// would answer it with a redirect and an HTML body. Percent-encoded bytes
// are data: %2E%2E or %2F in a segment reach the route that serves it,
// which decodes the segment once. No answer of this package is a redirect
// or a text body.
//
// Everything that enters here is untrusted: bodies are read and errors
// written through host/httpjson (size-bounded, strict, stable codes, no
// request value ever echoed). The capability endpoints have no
// authentication of their own (the daemon listens on loopback by default);
// the admin endpoints exist only when an admin token is configured, and
// compare it in constant time.
//
// What may change here: which capability routes are mounted and how, the
// admin surface. What must not: the stable error codes and field names
// (clients depend on them).
package httpapi
