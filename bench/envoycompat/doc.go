// Package envoycompat checks caphost's Envoy rate-limit service against
// envoyproxy/ratelimit itself, on upstream's documented example files
// (host/ratelimit/envoyrls/rlsconfig/testdata/upstream, README Example 9's
// trailing wildcards, and a week, a month and a year rule):
//
//   - TestSameLimitAsEnvoyproxyRatelimit loads the files into upstream's
//     config package and into rlsconfig and requires the same rule for
//     every request descriptor of depth 1..3 built from their keys and
//     values: requests_per_unit, unit, unlimited and shadow_mode, or none.
//   - TestSameDecisionsAsEnvoyproxyRatelimit builds `caphost serve` and
//     upstream's service from source, runs each on its own private
//     redis-server with the same files, and sends both the same
//     ShouldRateLimit calls through go-control-plane's
//     RateLimitServiceClient: every rule past its limit (request and
//     descriptor hits_addend, 1 and more), nested descriptors beside their
//     parents, wildcard values, unlimited and unmatched descriptors, shadow
//     mode, the same descriptor twice. Per call it requires the same
//     overall_code and RateLimit-* headers and, per descriptor, the same
//     code, current_limit, limit_remaining and a duration_until_reset
//     within the window the call fell in. A scenario that crossed a window
//     boundary is retried in the next window, never compared. The answers
//     where caphost differs by design (host/ratelimit/envoyrls's package
//     doc: denials not counted, checks without counting, limit overrides;
//     rlsconfig's: entries matched as pairs) are checked against that
//     documentation instead.
//
// It lives in the bench module so that envoyproxy/ratelimit never becomes
// a dependency of caphost; `make test` runs it.
package envoycompat
