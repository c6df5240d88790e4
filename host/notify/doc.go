// Package notify is the root of the notification capability: it owns
// turning a service's notification intent into messages sent exactly as
// they were frozen, with the guarantees stated as "at-least-once delivery
// plus an idempotent consumer", never "exactly once".
//
// The capability is built in stages, each its own package:
//
//   - host/notify/render (present): renders a template with a renderer
//     guest, validates parameters against the guest's declaration,
//     verifies the output for its channel, and freezes the result with
//     the digest of the module that rendered it.
//   - durable intent on a Redis Stream of the coordination role, dispatch
//     through a consumer group, and transports run as go-plugin processes
//     (later stages, issue 13): they store and send render.Result values
//     and never render again, so a retry after a guest hot swap sends the
//     same bytes.
//
// Until the capability module exists there is nothing to configure and
// no descriptor: the render stage is a library the later stages and
// embedding services call.
package notify
