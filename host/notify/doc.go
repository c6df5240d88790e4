// Package notify is the notification capability: it owns turning a
// service's notification request into messages sent exactly as they were
// frozen, with the guarantee stated as "at-least-once delivery plus an
// idempotent consumer", never "exactly once".
//
// A Request names a channel, a route, a template id and version, a locale,
// typed parameters and a recipient. The Notifier renders it once with the
// renderer guests (host/notify/render), then either stores it as a
// durable intent on a Redis Stream of the coordination role
// (host/notify/intent), which the dispatcher (host/notify/dispatch)
// delivers through out-of-process transports (plugins/transport) — or,
// on routes that allow it, sends it best-effort: once, now, fail-open,
// nothing stored. The capability module in this package decodes the
// capabilities.notify block, launches the transport plugins, starts the
// dispatcher and serves POST /v1/notify and GET /v1/notify/{id}.
//
// Recipients, parameters and rendered content never reach a log line, a
// metric label, an error or a key; with intents.encryption configured
// they do not reach Redis either (plans sealed by host/notify/seal).
//
// What may change here: new request fields (as optional members), new
// routes options, new metrics. What must not: the HTTP answers' codes and
// fields (clients switch on them), and that a durable submit is never
// reported APPLIED before the intent is in its stream.
package notify
