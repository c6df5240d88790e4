// Package httpapi owns the HTTP surface of `caphost serve`: the sidecar
// capability API (POST /v1/ratelimit/evaluate), the guest admin endpoints
// (GET /admin/guests, PUT /admin/guests/{name}) and the mounting of the
// host's operations endpoints (/livez, /readyz, /metrics).
//
// Everything that enters here is untrusted: bodies are size-bounded and
// decoded strictly (unknown fields and trailing data fail), every field is
// bounded, and every error is a JSON body with a stable code (see the Code
// constants). Raw subject values are handed to the limiter and never echoed,
// logged or put in an error. The admin endpoints exist only when an admin
// token is configured, and compare it in constant time.
//
// What may change here: new capability endpoints and their JSON mapping,
// bounds (made stricter, never looser without review). What must not: the
// stable error codes and field names (sidecar clients depend on them), and
// "HTTP 200 for every evaluated outcome" — a client reads allowed from the
// body, so a deny never looks like a transport failure.
package httpapi
