// Package render is the render stage of the notification capability
// (host/notify): it owns turning a notification intent's template
// reference and typed parameters into message parts with a renderer
// guest, and the host's checks on both sides of that call. It never
// touches Redis and never sends anything; the durable plan and the
// transports are later stages that store and send a Result.
//
// One render, in order:
//
//  1. The request is checked without the guest: the template is an id,
//     the version is not 0, the locale is a language tag, the channel is
//     one the host has output rules for (Channels).
//  2. The renderer modules are searched for the template; the serving
//     generation of the one declaring it is pinned for the rest. Version
//     and channel must be declared exactly; the locale is resolved by the
//     host (tag, shorter prefixes, Options.DefaultLocale) so the locale
//     recorded is the locale rendered.
//  3. Parameters are checked against the declaration (every name once,
//     no other; with param_specs, each value's type — text, integer,
//     timestamp in one canonical form — and max_bytes) and the Limits, as
//     valid UTF-8 without NUL. The typed constructors (String, Int, Time)
//     write each Go value in its type's canonical form.
//  4. The guest renders with the host's now. A trap, deadline, memory or
//     output overrun, an unavailable module or a status other than
//     invalid-request is ErrRenderFailed; invalid-request is
//     ErrParamsRefused.
//  5. The answer is verified (Verify) and nothing is ever rewritten: the
//     exact parts of the channel in order with their content types; each
//     part non-empty and bounded, all parts bounded, the subject bounded;
//     valid UTF-8; no control character but TAB and LF in bodies and none
//     in a header (CR, LF, NEL, U+2028/9 there are header injection); no
//     bidirectional embedding, override or isolate; parameters escaped
//     in HTML (< > & ") and Slack mrkdwn (< > &) parts; CSV parts parse
//     as RFC 4180 and have no field a spreadsheet would run as a formula.
//     Guests neutralise (the reference guest guests/renderer does); the
//     host refuses what they let through, as ErrInvalidOutput.
//  6. The Result is frozen: parts plus module, module sha256, template,
//     version, locales and now, with a canonical binary encoding, so a
//     retry after a hot swap re-sends identical content.
//
// Parameter values, rendered content and recipients never reach a log
// line, a metric label or an error's text: errors carry declared ids,
// numbers and closed-set rule or class names only, and metrics are
// labelled by channel, outcome, rule and failure class.
package render
