// Package rlsconfig owns the static descriptor mapping of caphost's Envoy
// rate-limit service: it reads envoyproxy/ratelimit's own YAML
// configuration format (one domain per file, nested descriptors with key
// and optional value, `*` wildcards in values, rate_limit with unit and
// requests_per_unit, unlimited, shadow_mode, detailed_metric, name) strictly,
// and matches a request's descriptor to the rule that governs it with the
// same "most specific match" semantics as envoyproxy/ratelimit:
//
//   - at each level, the entry whose key and value both equal the request
//     entry's wins; then the first (in file order) entry whose value is a
//     `*` pattern matching the request value; then the value-less entry of
//     that key, which matches any value;
//   - a rule applies only when the request has exactly as many entries as
//     the rule is deep: a request deeper or shallower than the rule has no
//     limit.
//
// Decoding is strict where envoyproxy/ratelimit is lax: unknown fields,
// duplicate mapping keys, duplicate descriptors at one level, invalid
// units, anchors and aliases, wrong scalar types and invalid UTF-8 are
// errors, every one reported with its file, path and line. Fields caphost
// cannot act on (replaces, quota_mode, share_threshold, value_to_metric,
// metadata) are rejected rather than ignored. Every upstream unit is
// accepted in any case, with upstream's lengths (a month 30 days, a year
// 365); a year is one fixed window aligned to the Unix epoch, which only
// the fixed-window algorithm takes (up to 366 days; the others up to 30):
// a year rule whose caphost block names another algorithm is a problem at
// its unit, and one under another service algorithm a problem of Policies. Two deliberate differences: matching
// compares (key, value) pairs, never the joined "key_value" string
// envoyproxy/ratelimit builds (so key "a_b" with value "c" never matches
// key "a" with value "b_c"), and a key may not contain `*` (upstream would
// treat such a key as a pattern over joined strings).
//
// # caphost's extension
//
// A counted descriptor may carry a `caphost` block beside its rate_limit
// (ExtensionField, Extension): the rule's own algorithm, failure mode
// (including local-emergency with a per-pod share) and evaluation-id
// dedup, decoded as strictly as the rest. Every upstream file is valid
// unchanged; a file with the block is caphost's only (upstream refuses the
// unknown key).
//
// # detailed_metric
//
// A rule with detailed_metric: true gets per-rule series in the Envoy
// service's caphost_envoy_rls_rule_descriptors_total{rule,result}, where
// rule is the rule's KeyPath: the domain and the keys and configured
// values as written in the file (a wildcard as its pattern). Upstream puts
// the request's own values into the stat name instead; caphost never puts
// a request's value into a metric label, so the label values are bounded
// by the configuration: at most MaxDetailedRules rules may ask for it, and
// detailed_metric on a descriptor without a rate_limit (nothing to count)
// is a problem.
package rlsconfig
