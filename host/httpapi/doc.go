// Package httpapi owns the HTTP surface of `caphost serve`: the sidecar
// capability API (POST /v1/ratelimit/evaluate; POST /v1/concurrency/acquire,
// /renew and /release for concurrency permits), the guest admin endpoints
// (GET /admin/guests, PUT /admin/guests/{name}) and the mounting of the
// host's operations endpoints (/livez, /readyz, /metrics).
//
// Everything that enters here is untrusted: bodies are size-bounded and
// decoded strictly (unknown fields and trailing data fail), every field is
// bounded, and every error is a JSON body with a stable code (see the Code
// constants). Raw subject values are handed to the limiter and never echoed,
// logged or put in an error. A permit's owner token is minted by the host,
// returned once in the acquire's body (the client needs it to renew and
// release) and otherwise never echoed or logged. The capability endpoints
// have no authentication of their own (the daemon listens on loopback by
// default); the admin endpoints do. The admin endpoints exist only when an admin
// token is configured, and compare it in constant time.
//
// What may change here: new capability endpoints and their JSON mapping,
// bounds (made stricter, never looser without review). What must not: the
// stable error codes and field names (sidecar clients depend on them), and
// "HTTP 200 for every evaluated outcome" — a client reads allowed (ok for
// permits) from the body, so a deny never looks like a transport failure.
package httpapi
