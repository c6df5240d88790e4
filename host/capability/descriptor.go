package capability

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/caphost/caphost/policy"
)

// Guarantee is something a capability promises and its tests prove.
type Guarantee string

// Guarantees named by the capabilities built so far.
const (
	// GuaranteeGlobalQuota: one quota shared by every host instance on the
	// same deployment, decided atomically by one server-side program per
	// decision.
	GuaranteeGlobalQuota Guarantee = "global-quota"
	// GuaranteeDenialConsumesNothing: a denied request spends no quota.
	GuaranteeDenialConsumesNothing Guarantee = "denial-consumes-nothing"
	// GuaranteeTypedOutcome: every call ends in a typed outcome with its
	// execution certainty; a failure is never reported as an allow, a hit
	// or a success.
	GuaranteeTypedOutcome Guarantee = "typed-outcome"
	// GuaranteeEvaluationDedup: a repeated evaluation id within its TTL is
	// answered from the first decision instead of being charged again.
	GuaranteeEvaluationDedup Guarantee = "evaluation-dedup"
	// GuaranteeBoundedPermits: at most the configured number of permits are
	// held at once, each with a bounded lease and a host-minted owner token.
	GuaranteeBoundedPermits Guarantee = "bounded-permits"
	// GuaranteeMissNotOutage: a miss, an outage, an unreadable schema and a
	// corrupt entry are distinct outcomes; a codec or programming error is
	// never answered as a miss.
	GuaranteeMissNotOutage Guarantee = "miss-distinct-from-outage"
	// GuaranteeGuardedWrites: a cache write lands only in the generation and
	// on the entry state its lookup observed, atomically, so an invalidation
	// that raced a load wins.
	GuaranteeGuardedWrites Guarantee = "invalidation-wins-over-refill"
	// GuaranteeBoundedSourceLoad: concurrent misses of a key share one
	// source load per process (bounded single-flight), one across hosts
	// while the refresh lease holds, all behind a bounded source bulkhead.
	GuaranteeBoundedSourceLoad Guarantee = "bounded-source-load"
	// GuaranteeBoundedStaleness: no value is served past its hard expiry; an
	// in-process copy never outlives its Redis entry's hard expiry or the
	// region's L1 age cap, and is dropped when invalidation hints may have
	// been lost; a region generation is trusted without reading it for at
	// most the region's generation trust, and only while hints are up.
	GuaranteeBoundedStaleness Guarantee = "bounded-staleness"
	// GuaranteeEfficiencyOnly: a lease makes one holder of a resource the
	// usual case, so duplicated work is rare; it is not mutual exclusion
	// (a paused holder, a clock step or a failover can leave two holders),
	// and correctness stays with a fenced or idempotent resource.
	GuaranteeEfficiencyOnly Guarantee = "efficiency-only"
	// GuaranteeOwnerChecked: renew and release act only on the caller's own
	// lease (owner token and operation id checked by the server-side
	// program); another owner's lease is never extended or deleted.
	GuaranteeOwnerChecked Guarantee = "owner-checked-renew-release"
	// GuaranteeLocalValidity: a held lease's validity is measured on the
	// holder's monotonic clock from just before the send (or from the
	// server's remaining TTL on a replay), minus a drift budget; a lease is
	// never reported held on a guess.
	GuaranteeLocalValidity Guarantee = "conservative-local-validity"
	// GuaranteeRequestReplay: while its record lives, a request (scope and
	// fingerprint) elects one current owner among concurrent duplicates,
	// and a retry of a completed one gets the stored response back instead
	// of a second execution; the same key with another request is refused.
	GuaranteeRequestReplay Guarantee = "request-replay"
	// GuaranteeAtMostOncePerAttempt: an action runs only after a start of
	// its attempt was confirmed, never twice for one attempt (also when the
	// attempt re-enters or a reply was lost); an action whose effect is
	// unknown makes its record ABANDONED (RECOVERY_REQUIRED), never a
	// second run.
	GuaranteeAtMostOncePerAttempt Guarantee = "at-most-once-per-attempt"
	// GuaranteeBoundedResponse: a stored response is bounded by the
	// configuration; one over the bound is never stored truncated or
	// dropped silently (the record fails closed).
	GuaranteeBoundedResponse Guarantee = "bounded-stored-response"
	// GuaranteeAtLeastOnceDelivery: a durable intent whose submit was
	// APPLIED is handed to a transport until one accepts it, unless it
	// ends FAILED (definite rejections only), QUARANTINED or INDETERMINATE;
	// a repeated delivery carries the same intent id for the receiver to
	// deduplicate on.
	GuaranteeAtLeastOnceDelivery Guarantee = "at-least-once-delivery"
	// GuaranteeFrozenContent: a notification is rendered once, when its
	// intent is frozen; every attempt, also after a renderer hot swap,
	// sends the same bytes.
	GuaranteeFrozenContent Guarantee = "frozen-content"
	// GuaranteeSubmitDedup: while its record lives, a repeated idempotency
	// key returns the first intent and appends nothing.
	GuaranteeSubmitDedup Guarantee = "submit-dedup"
	// GuaranteeNoBlindRetry: a transport call whose send may have happened
	// (INDETERMINATE) is never retried and never sent to a fallback.
	GuaranteeNoBlindRetry Guarantee = "no-blind-retry"
)

// NonGuarantee is something a capability explicitly does not promise, so
// no operator or caller builds on it.
type NonGuarantee string

// Non-guarantees named by the capabilities built so far.
const (
	// NonGuaranteeExactAcrossFailover: Redis replication is asynchronous; a
	// failover can lose recent counts and grant quota again.
	NonGuaranteeExactAcrossFailover NonGuarantee = "exact-across-failover"
	// NonGuaranteeGlobalLocalEmergency: the local emergency limiter shares
	// nothing between instances; it bounds each instance, not the fleet.
	NonGuaranteeGlobalLocalEmergency NonGuarantee = "global-accuracy-of-local-emergency"
	// NonGuaranteeFairness: contended callers are not served in order.
	NonGuaranteeFairness NonGuarantee = "fairness"
	// NonGuaranteeStrictCoordination: a Redis-backed permit or lease is not a
	// correctness lock; protected resources need fencing.
	NonGuaranteeStrictCoordination NonGuarantee = "strict-coordination"
	// NonGuaranteeClockIndependence: windows are measured by the Redis
	// server's clock; a server clock step beyond the policy's clamp is
	// refused (CLOCK_UNSAFE) rather than absorbed.
	NonGuaranteeClockIndependence NonGuarantee = "clock-independence"
	// NonGuaranteeDurability: cache entries may be evicted or lost at any
	// time, and invalidation hints are best effort (TTLs and generations are
	// the recovery boundary).
	NonGuaranteeDurability NonGuarantee = "durability"
	// NonGuaranteeSourceAtomicity: the source of truth and the cache are not
	// updated as one; invalidate after the source commits.
	NonGuaranteeSourceAtomicity NonGuarantee = "cache-source-atomicity"
	// NonGuaranteeSingleLoader: under failover, a partition or a lease that
	// expires mid-load, two hosts may load one key; loaders must be
	// read-only or idempotent.
	NonGuaranteeSingleLoader NonGuarantee = "single-loader-across-failover"
	// NonGuaranteeExactlyOnceEffects: idempotent execution runs an action at
	// most once per attempt and replays its response; it does not make side
	// effects outside the action's own store exactly-once (a crash between
	// the effect and the completion leaves the record ABANDONED for
	// reconciliation).
	NonGuaranteeExactlyOnceEffects NonGuarantee = "exactly-once-side-effects"
	// NonGuaranteeExactlyOnceDelivery: a consumer that dies after a
	// transport accepted and before the finalize leaves the entry to be
	// delivered again; receivers deduplicate on the intent id.
	NonGuaranteeExactlyOnceDelivery NonGuarantee = "exactly-once-delivery"
	// NonGuaranteeOrdering: intents are delivered in no particular order
	// (shards, concurrency, retries and reclaims reorder them).
	NonGuaranteeOrdering NonGuarantee = "ordering"
)

// FailureMode is what a capability does when its backing service cannot
// answer. It is per capability, never global.
type FailureMode string

// Failure modes.
const (
	// FailClosed: the operation is refused (a rate decision denies, a
	// permit is not granted).
	FailClosed FailureMode = "fail-closed"
	// FailLocalEmergency: a bounded, process-local fallback decides and the
	// outcome says so (degraded).
	FailLocalEmergency FailureMode = "local-emergency"
	// FailOpen: the operation proceeds unchecked, explicitly configured and
	// reported as degraded; never silent.
	FailOpen FailureMode = "fail-open"
	// FailOpenToSource: an optional cache falls back to the source of truth
	// and reports a degraded result.
	FailOpenToSource FailureMode = "fail-open-to-source"
	// FailAbort: protected work is aborted (fenced coordination).
	FailAbort FailureMode = "abort"
)

// Valid reports whether m is one of the failure modes above.
func (m FailureMode) Valid() bool {
	switch m {
	case FailClosed, FailLocalEmergency, FailOpen, FailOpenToSource, FailAbort:
		return true
	}
	return false
}

// Impact is how a capability's backing role affects the host's readiness.
type Impact string

// Readiness impacts.
const (
	// ImpactRequired: the backing role down makes the host not ready.
	ImpactRequired Impact = "required"
	// ImpactOptional: the backing role down makes the host DEGRADED; it
	// stays ready because the capability has a declared fallback.
	ImpactOptional Impact = "optional"
	// ImpactNone: the capability has no backing service.
	ImpactNone Impact = "none"
)

// Valid reports whether i is one of the impacts above.
func (i Impact) Valid() bool {
	return i == ImpactRequired || i == ImpactOptional || i == ImpactNone
}

// Descriptor is the typed description a capability contributes for its
// active provider. Readiness is the constant of the capability's package;
// everything else follows from the code and the capability's decoded
// configuration. It never holds a client, a credential or an endpoint.
type Descriptor struct {
	// Capability is the capability id, the block name under capabilities.
	Capability string `json:"capability"`
	// Provider is the provider id (e.g. "redis").
	Provider string `json:"provider"`
	// Readiness is the level the implementation claims (a package constant).
	Readiness Readiness `json:"readiness"`
	// Guarantees and NonGuarantees are both required: a descriptor says
	// what not to build on as clearly as what to build on.
	Guarantees    []Guarantee    `json:"guarantees"`
	NonGuarantees []NonGuarantee `json:"non-guarantees"`
	// FailureMode is the default; FailureOverrides are the modes a
	// configuration may choose instead (per policy, for example).
	FailureMode      FailureMode   `json:"failure-mode"`
	FailureOverrides []FailureMode `json:"failure-overrides,omitempty"`
	// MultiInstance: the guarantees hold across host instances sharing the
	// backing deployment.
	MultiInstance bool `json:"multi-instance"`
	// Role is the backing Redis role ("" for none).
	Role policy.Role `json:"role,omitempty"`
	// Impact is the readiness impact of the backing role.
	Impact Impact `json:"readiness-impact"`
	// GuestKinds lists the guest kinds the capability consumes.
	GuestKinds []string `json:"guest-kinds,omitempty"`
	// Implementation names the implementation and its version
	// (e.g. "redis-rate-limit-v2").
	Implementation string `json:"implementation"`
}

var idPattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// ErrInvalidDescriptor is matched by Descriptor.Validate's errors.
var ErrInvalidDescriptor = errors.New("capability: invalid descriptor")

// Validate checks that d is complete and consistent. Every problem is
// reported.
func (d Descriptor) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidDescriptor, d.Capability, fmt.Sprintf(format, args...)))
	}
	if !idPattern.MatchString(d.Capability) {
		bad("capability id must be a lower-case slug")
	}
	if !idPattern.MatchString(d.Provider) {
		bad("provider id must be a lower-case slug")
	}
	if !d.Readiness.Valid() {
		bad("readiness %d is not on the R0–R3 scale", d.Readiness)
	}
	if len(d.Guarantees) == 0 {
		bad("no guarantee")
	}
	if len(d.NonGuarantees) == 0 {
		bad("no explicit non-guarantee")
	}
	if dup := firstDuplicate(d.Guarantees); dup != "" {
		bad("guarantee %s listed twice", dup)
	}
	if dup := firstDuplicate(d.NonGuarantees); dup != "" {
		bad("non-guarantee %s listed twice", dup)
	}
	if !d.FailureMode.Valid() {
		bad("unknown failure mode %q", d.FailureMode)
	}
	for _, m := range d.FailureOverrides {
		if !m.Valid() || m == d.FailureMode {
			bad("failure override %q is unknown or the default", m)
		}
	}
	if !d.Impact.Valid() {
		bad("unknown readiness impact %q", d.Impact)
	}
	switch {
	case d.Role == "" && d.Impact != ImpactNone:
		bad("a readiness impact without a backing role")
	case d.Role != "" && !d.Role.Valid():
		bad("unknown role %q", d.Role)
	case d.Role != "" && d.Impact == ImpactNone:
		bad("a backing role without a readiness impact")
	}
	if d.Role == policy.RoleCache && d.MultiInstance && slices.Contains(d.Guarantees, GuaranteeGlobalQuota) {
		// An evictable deployment can forget a quota at any moment.
		bad("a quota guarantee on the evictable cache role")
	}
	if d.Role == policy.RoleCache && slices.Contains(d.Guarantees, GuaranteeEfficiencyOnly) {
		// An evicted lease frees its resource to a second holder silently.
		bad("a lease on the evictable cache role")
	}
	if d.Role == policy.RoleCache && slices.Contains(d.Guarantees, GuaranteeRequestReplay) {
		// An evicted record runs the action a second time.
		bad("idempotency records on the evictable cache role")
	}
	if d.Implementation == "" {
		bad("no implementation version")
	}
	return errors.Join(errs...)
}

func firstDuplicate[T ~string](xs []T) T {
	for i, x := range xs {
		if slices.Contains(xs[:i], x) {
			return x
		}
	}
	return ""
}
