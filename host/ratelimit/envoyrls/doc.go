// Package envoyrls owns caphost's drop-in Envoy rate-limit service:
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over gRPC
// (Service, Server), answering from caphost's rate limiter with the rules of
// an envoyproxy/ratelimit YAML configuration (package rlsconfig), so that a
// deployment can switch by pointing Envoy at caphost.
//
// # Decisions
//
// Each descriptor of a request is matched to at most one rule (most
// specific match, see rlsconfig) and answered on its own; the overall code
// is OVER_LIMIT when any descriptor is, as upstream. A request's
// descriptors are decided concurrently, except that identical descriptors
// (one counter) are charged in request order, as upstream's pipeline
// applies them: the earlier one sees the earlier count.
//
//   - No rule: OK, no current_limit, nothing counted.
//   - unlimited: OK, limit_remaining 4294967295, nothing counted.
//   - requests_per_unit 0, or a cost above the limit: OVER_LIMIT without a
//     Redis call (nothing could ever be admitted).
//   - Otherwise one evaluation of the rule's caphost policy (fixed window by
//     default, aligned to the Unix epoch as upstream's, for every unit up
//     to a year of 365 days; sliding-counter, gcra or token-bucket by
//     configuration, up to a month: a year rule needs the fixed window,
//     and the configuration is refused otherwise) at cost hits_addend — the
//     descriptor's when set, else the request's, 0 meaning 1. The subject is
//     a digest of the domain and all the request's entries, so each distinct
//     descriptor (each value of a value-less or wildcard key) has its own
//     counter. The status carries current_limit, limit_remaining and
//     duration_until_reset (to the window's end, from Redis time).
//   - shadow_mode: the policy is a caphost shadow policy: counted, always
//     OK. A descriptor the rule would have limited — decided in Redis or,
//     for a cost over the limit, without a call — counts as
//     caphost_envoy_rls_descriptors_total{result="shadow_over_limit"},
//     one within the limit as {result="shadow"}.
//   - A descriptor hits_addend of 0 asks for a check without counting
//     (upstream's INCRBY 0). caphost's limiter cannot evaluate a limit
//     without consuming from it, so on a counted rule the check fails
//     closed: OVER_LIMIT with the rule's current_limit, nothing counted,
//     caphost_envoy_rls_invalid_descriptors_total{reason="check_only"}
//     (OK on a shadow rule, which never limits). Without a rule or on an
//     unlimited rule the answer needs no state and is upstream's. On a
//     limit of 0 it is OVER_LIMIT, as every call with hits there is;
//     upstream answers such a check OK while its counter for the window
//     is still 0 (no hit counted yet), OVER_LIMIT after.
//
// One difference in counting: caphost's denial consumes nothing, where
// upstream's INCRBY counts denied hits too; limit_remaining is 0 in both
// once the limit is reached. So a descriptor denied for a hits_addend
// above what is left reports what is left (upstream 0: its counter has
// passed the limit), and a later call that fits is admitted (upstream:
// OVER_LIMIT until the window ends).
//
// The bench module's envoycompat test runs `caphost serve` and
// envoyproxy/ratelimit on the same descriptor files and compares their
// answers call by call; it allows only the differences documented here
// and in rlsconfig, and checks each against its documentation.
//
// Failure modes follow caphost's per-policy failure mode: when Redis cannot
// decide, a fail-closed rule answers OVER_LIMIT, a fail-open rule OK, and a
// local-emergency rule is answered by the process-local emergency limiter
// (Options.LocalEmergency) at its per-pod share of the limit. Failures are answered in-band rather
// than as gRPC errors because Envoy treats a failed rate-limit call
// according to its own failure_mode_deny, which defaults to allowing.
//
// # Per-rule options
//
// The service's options (algorithm, failure mode) apply to every rule
// without a caphost block; a rule's block (rlsconfig.Extension) overrides
// them for that rule and can enable evaluation-id dedup. With dedup, the
// evaluation id is the request's x-request-id metadata (RequestIDHeader,
// which Envoy forwards) and the descriptor's index, so a retried call is
// charged once; without a usable id the limiter mints one, which still
// makes its own retry after an unseen outcome safe.
//
// # Mapping through the rate-limit capability's selector
//
// Options.Selector (SelectorMapping) answers whole domains through the
// rate-limit capability's selector — its rate-policy guest when one is
// configured — instead of a descriptor file: entries named after caphost's
// attributes and identities become the query, the selector chooses the
// policies and their unit costs, hits_addend multiplies them (up to each
// policy's max-cost), and the capability's limiter decides. `caphost serve`
// wires it from server.envoy-rate-limit.selector-domains.
//
// # Reload
//
// Reload and ReloadFiles replace the whole mapping atomically (`caphost
// serve` calls ReloadFiles on SIGHUP). A request is answered by the
// mapping it started with; an unchanged rule keeps its counter, a changed
// one starts fresh under a new policy revision. A configuration that fails
// to load or compile is refused with every problem, logged, counted in
// caphost_envoy_rls_reloads_total{result="failed"}, and the previous one
// keeps serving.
//
// # Invalid descriptors
//
// Requests are bounded (Validate): at most MaxDescriptors descriptors of
// 1..MaxEntries entries, non-empty keys, key and value byte limits, valid
// UTF-8, MaxMessageBytes on the wire. A descriptor outside them, or using
// what caphost cannot act on (a per-descriptor limit override, negative
// hits, a hits_addend of 0 on a counted rule; for a selector-mapped
// domain a key outside its vocabulary), is refused on its own and in-band: its status is
// OVER_LIMIT (fail closed) without a current_limit, nothing is counted for
// it, the request's other descriptors are decided as usual, and the
// overall code follows the usual rule — so it is OVER_LIMIT. Each refusal
// is counted in caphost_envoy_rls_invalid_descriptors_total{reason} (a
// closed set, Reasons) and logged at WARN, sampled, with the field and
// sizes but never a key or value. More than MaxDescriptors refuses every
// descriptor that way. In-band matters: Envoy values come from request
// headers and the path, so a client chooses their size, and refusing the
// whole call with a gRPC error would let Envoy's default
// (failure_mode_deny: false) allow the request past every limit it
// carries — the per-IP limit beside one oversized header included.
//
// Only what belongs to no descriptor and what Envoy never sends is still
// a gRPC InvalidArgument that counts nothing: an empty, over-long or
// non-UTF-8 domain (Envoy's domain is its static configuration, never
// request data, and Envoy refuses an empty one) and a request without
// descriptors (Envoy makes no call then); envoyproxy/ratelimit errors on
// both too. A request over MaxMessageBytes (256 KiB) is refused by the
// gRPC transport (ResourceExhausted) before the service sees it, so it
// cannot be answered in-band: with Envoy's default header limit (60 KiB)
// it takes five or more descriptor entries copied from near-limit headers
// or paths. Set failure_mode_deny: true (as below) so that such a call,
// like an unreachable service, is denied rather than allowed.
//
// # Pointing Envoy at caphost
//
// Configure the listener in caphost's configuration:
//
//	server:
//	  envoy-rate-limit:
//	    listen: 127.0.0.1:8081
//	    config-files: [ratelimit/config.yaml]   # envoyproxy/ratelimit files, relative to this file
//	    failure-mode: fail-closed               # or fail-open, local-emergency
//	    algorithm: fixed-window                 # or sliding-counter, gcra, token-bucket
//	    local-emergency:                        # for local-emergency rules
//	      maximum-entries: 100000
//	      entry-ttl: 1m
//	      maximum-in-flight: 1024
//	      assumed-maximum-pods: 4
//	      per-pod-share: 0.25
//	    response-headers: true                  # RateLimit-Limit/-Remaining/-Reset
//	    response-header-names:                  # optional, as LIMIT_*_HEADER upstream
//	      limit: X-RateLimit-Limit
//	      remaining: X-RateLimit-Remaining
//	      reset: X-RateLimit-Reset
//	    shadow-mode: false                      # true: decide and count, never limit (SHADOW_MODE)
//
// and point Envoy's rate-limit filter at it exactly as at envoyproxy/ratelimit
// (an HTTP/2 cluster, transport_api_version V3):
//
//	http_filters:
//	- name: envoy.filters.http.ratelimit
//	  typed_config:
//	    "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
//	    domain: edge_proxy_per_ip
//	    failure_mode_deny: true
//	    rate_limit_service:
//	      transport_api_version: V3
//	      grpc_service:
//	        envoy_grpc: {cluster_name: caphost_rls}
//	clusters:
//	- name: caphost_rls
//	  type: STRICT_DNS
//	  typed_extension_protocol_options:
//	    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
//	      "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
//	      explicit_http_config: {http2_protocol_options: {}}
//	  load_assignment:
//	    cluster_name: caphost_rls
//	    endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8081}}}}]}]
//	  health_checks:
//	  - timeout: 1s
//	    interval: 5s
//	    unhealthy_threshold: 2
//	    healthy_threshold: 1
//	    grpc_health_check: {service_name: envoy.service.ratelimit.v3.RateLimitService}
//
// The listener also serves the standard gRPC health service
// (grpc.health.v1.Health), as envoyproxy/ratelimit does: SERVING for ""
// and HealthService, NOT_SERVING from the moment a shutdown begins, so
// Envoy's health check moves traffic to another replica while the calls
// in flight drain.
//
// The service's own metrics are caphost_envoy_rls_requests_total{code},
// caphost_envoy_rls_descriptors_total{result},
// caphost_envoy_rls_invalid_descriptors_total{reason} and
// caphost_envoy_rls_reloads_total{result}; its limiter's are the
// rate-limit capability's series prefixed with MetricPrefix, labelled
// with each rule's opaque policy id (envoy-<hex>). No metric carries a
// request's descriptor key or value.
//
// A rule with detailed_metric: true is also counted in
// caphost_envoy_rls_rule_descriptors_total{rule,result}, rule being its
// configuration key path (rlsconfig.Rule.KeyPath: domain, keys and
// configured values, a wildcard as its pattern), so the label values are
// bounded by the configuration (at most rlsconfig.MaxDetailedRules); a
// reload drops the series of labels it no longer serves. Every load and
// reload logs one "envoy rate-limit rule" line per counted or detailed
// rule with its policy id, key path and file:line, to map both kinds of
// series back to the file.
package envoyrls
