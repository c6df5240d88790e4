package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"
)

// RateAlgorithm is the closed menu of rate algorithms the host implements
// as catalog programs. A guest chooses one; it can never supply its own.
type RateAlgorithm string

// The rate algorithms. Fixed window, sliding counter and token bucket are
// the baseline; GCRA and sliding log are advanced opt-ins; concurrency is a
// permit limiter, not a rate, and is never emulated with token cost.
const (
	RateFixedWindow    RateAlgorithm = "fixed-window"
	RateSlidingCounter RateAlgorithm = "sliding-counter"
	RateTokenBucket    RateAlgorithm = "token-bucket"
	RateGCRA           RateAlgorithm = "gcra"
	RateSlidingLog     RateAlgorithm = "sliding-log"
	RateConcurrency    RateAlgorithm = "concurrency"
)

// RateAlgorithms lists every algorithm in menu order.
func RateAlgorithms() []RateAlgorithm {
	return []RateAlgorithm{RateFixedWindow, RateSlidingCounter, RateTokenBucket, RateGCRA, RateSlidingLog, RateConcurrency}
}

// Valid reports whether a is on the menu.
func (a RateAlgorithm) Valid() bool { return slices.Contains(RateAlgorithms(), a) }

// RateDimension is one subject dimension. The set is closed so that a
// policy can never key on something the host does not know how to extract.
type RateDimension string

// The subject dimensions, in canonical order (the order their values enter
// the subject digest).
const (
	DimGlobal        RateDimension = "global"
	DimTenant        RateDimension = "tenant"
	DimPrincipal     RateDimension = "principal"
	DimAPIKey        RateDimension = "api-key"
	DimClientIP      RateDimension = "client-ip"
	DimRoute         RateDimension = "route"
	DimResourceClass RateDimension = "resource-class"
)

// RateDimensions lists every dimension in canonical order.
func RateDimensions() []RateDimension {
	return []RateDimension{DimGlobal, DimTenant, DimPrincipal, DimAPIKey, DimClientIP, DimRoute, DimResourceClass}
}

// Valid reports whether d is in the closed set.
func (d RateDimension) Valid() bool { return slices.Contains(RateDimensions(), d) }

// RateFailureMode says what a policy does when the global (Redis) limiter
// cannot decide. There is deliberately no set-wide default switch: every
// policy carries its own mode and the default is fail-closed.
type RateFailureMode string

// The failure modes.
const (
	FailClosed     RateFailureMode = "fail-closed"
	FailLocal      RateFailureMode = "local-emergency"
	FailOpenPolicy RateFailureMode = "fail-open"
)

// RateFailureModes lists every failure mode.
func RateFailureModes() []RateFailureMode {
	return []RateFailureMode{FailClosed, FailLocal, FailOpenPolicy}
}

// Bounds of rate policies. Parameter bounds mirror the rate programs'
// manifest (runtime/programs/program-set.json) so that a compiled policy can
// never be refused by its program as INVALID.
const (
	RateMaxIDBytes       = 32
	RateMaxRevisionBytes = 24
	RateMaxLimit         = 1_000_000_000
	RateMaxLogLimit      = 10_000 // sliding log and concurrency state is per event/owner
	RateMaxWindow        = 30 * 24 * time.Hour
	RateMaxClockStep     = 24 * time.Hour
	RateMaxCleanupGrace  = 24 * time.Hour
	RateMaxDedupTTL      = 24 * time.Hour
	RateMaxDedupEntries  = 4096
	RateMaxPolicies      = 256
	// RateMaxFixedWindow is the longest window of a fixed-window policy
	// (rate-fixed-window-v3): 366 days, so that a year as
	// envoyproxy/ratelimit counts it (365 days) is one window. Every other
	// algorithm keeps RateMaxWindow.
	RateMaxFixedWindow = 366 * 24 * time.Hour
	// RateMinPermitTTL and RateMaxPermitTTL bound a concurrency permit's
	// life. A permit is a lease on work in flight: long work renews it
	// (ratelimit's auto-renewal), so a day bounds how long a holder that
	// died without releasing can keep a slot.
	RateMinPermitTTL = 10 * time.Millisecond
	RateMaxPermitTTL = 24 * time.Hour
	// RateScale is the fixed-point scale of token amounts (micro-tokens), as
	// in the token-bucket program.
	RateScale = 1_000_000
	// rateMaxScaled is 2^52: scaled amounts and capacity·period stay exact
	// in Lua doubles below it.
	rateMaxScaled = 1 << 52
)

// Defaults applied by the compiler when a declaration leaves them zero.
const (
	DefaultRateMaxClockStep = 2 * time.Second
	DefaultRateCleanupGrace = time.Second
	DefaultRateDedupTTL     = 30 * time.Second
	DefaultRateDedupEntries = 64
)

// RateParameters are the algorithm parameters. Which fields apply depends on
// the algorithm; the compiler rejects set fields that do not apply, so a
// typo can never silently change a limit.
type RateParameters struct {
	// Limit is the admitted cost per Window (fixed window, sliding counter,
	// sliding log), per Window as the GCRA period, or the maximum permits
	// (concurrency).
	Limit int64
	// Window is the window length, or the GCRA period. Whole milliseconds,
	// at most RateMaxWindow (30 days), or RateMaxFixedWindow (366 days)
	// for a fixed window.
	Window time.Duration
	// Capacity is the token-bucket size in tokens.
	Capacity int64
	// RefillTokens are added per RefillPeriod, pro rata.
	RefillTokens int64
	// RefillPeriod is the token-bucket refill period. Whole milliseconds.
	RefillPeriod time.Duration
	// PermitTTL bounds a leaked concurrency permit's life
	// (RateMinPermitTTL..RateMaxPermitTTL). It is also the default and the
	// largest TTL one acquire or renew may ask for.
	PermitTTL time.Duration
}

// RateDedup configures evaluation-id dedup. With it off, evaluation is
// at-least-once: a retry after a timeout may charge twice, so the limiter
// never retries such a policy.
type RateDedup struct {
	Enabled    bool
	TTL        time.Duration // default DefaultRateDedupTTL
	MaxEntries int           // ids remembered per subject; default DefaultRateDedupEntries
}

// RatePolicyDecl is one declared rate policy, from configuration or a
// rate-policy guest's describe output. It is input to CompileRatePolicies.
type RatePolicyDecl struct {
	// ID is a slug ([a-z0-9]+ joined by single hyphens, at most 32 bytes).
	ID string
	// Revision is a slug of the same shape (at most 24 bytes). A behaviour
	// change is a new revision; the revision is part of the state key.
	Revision   string
	Algorithm  RateAlgorithm
	Parameters RateParameters
	// MaxCost bounds the cost of one request (default 1).
	MaxCost int64
	// Dimensions are the subject dimensions (at least one; "global" alone).
	Dimensions []RateDimension
	// FailureMode defaults to fail-closed when empty.
	FailureMode RateFailureMode
	// Critical marks an abuse, security or cost boundary: fail-open is
	// rejected for it.
	Critical bool
	// PerPodShare overrides the local-emergency share for this policy
	// (0 inherits the configured share).
	PerPodShare float64
	Dedup       RateDedup
	// Shadow policies are evaluated (their state cost is real) but always
	// allow; a would-have-denied metric records the difference. Shadow is
	// not a security control.
	Shadow bool
	// Hierarchy optionally names the hierarchy (slug) the policy belongs to.
	Hierarchy string
	// MaxClockStep and CleanupGrace tune the programs' clock clamp and state
	// TTL grace (defaults DefaultRateMaxClockStep, DefaultRateCleanupGrace).
	MaxClockStep time.Duration
	CleanupGrace time.Duration
}

// RateLocalEmergency is the configured local emergency limiter, needed to
// compile local-emergency policies.
type RateLocalEmergency struct {
	// AssumedMaxPods is the assumed maximum number of pods sharing a global
	// quota.
	AssumedMaxPods int
	// PerPodShare is each pod's share of a global limit.
	PerPodShare float64
}

// RateCompileOptions parameterise CompileRatePolicies.
type RateCompileOptions struct {
	// PathPrefix prefixes every problem path (for example
	// "capabilities.rate-limit.policies").
	PathPrefix string
	// LocalEmergency is nil when the degraded provider is disabled; then a
	// local-emergency policy is a configuration error.
	LocalEmergency *RateLocalEmergency
}

// Rate policy rules.
const (
	RuleRateID          Rule = "rate.id"
	RuleRateRevision    Rule = "rate.revision"
	RuleRateDuplicate   Rule = "rate.duplicate"
	RuleRateAlgorithm   Rule = "rate.algorithm"
	RuleRateParameters  Rule = "rate.parameters"
	RuleRateCost        Rule = "rate.cost"
	RuleRateDimensions  Rule = "rate.dimensions"
	RuleRateFailureMode Rule = "rate.failure-mode"
	RuleRateFailOpen    Rule = "rate.fail-open"
	RuleRateLocal       Rule = "rate.local-emergency"
	RuleRateDedup       Rule = "rate.dedup"
	RuleRateClock       Rule = "rate.clock"
	RuleRateHierarchy   Rule = "rate.hierarchy"
	RuleRateCount       Rule = "rate.count"
	// RuleRateHeaders: capabilities.rate-limit.headers is not a header mode.
	RuleRateHeaders Rule = "rate.headers"
)

// RateRules lists the rate policy rules, sorted.
func RateRules() []Rule {
	rs := []Rule{RuleRateID, RuleRateRevision, RuleRateDuplicate, RuleRateAlgorithm, RuleRateParameters, RuleRateCost,
		RuleRateDimensions, RuleRateFailureMode, RuleRateFailOpen, RuleRateLocal, RuleRateDedup, RuleRateClock,
		RuleRateHierarchy, RuleRateCount, RuleRateHeaders}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}

// RatePolicy is one compiled, frozen policy. It is a value: the set hands
// out copies, so nothing a caller does changes the set.
type RatePolicy struct {
	ID          string
	Revision    string
	Algorithm   RateAlgorithm
	Parameters  RateParameters
	MaxCost     int64
	Dimensions  []RateDimension // canonical order
	FailureMode RateFailureMode
	Critical    bool
	// PerPodShare is the effective local-emergency share (0 unless
	// FailureMode is local-emergency).
	PerPodShare  float64
	Dedup        RateDedup // defaults applied; zero when disabled
	Shadow       bool
	Hierarchy    string
	MaxClockStep time.Duration
	CleanupGrace time.Duration
	// Digest is the lower-hex sha256 of the canonical encoding (see
	// canonicalRate): two policies with the same digest behave identically.
	Digest string
}

// KeyRegion is the key-builder region of the policy's state: id and
// revision joined by "--", which is unambiguous because neither slug may
// contain a double hyphen. A new revision therefore never reuses old state.
func (p RatePolicy) KeyRegion() string { return p.ID + "--" + p.Revision }

// Limit is the policy's headline limit: the window limit, the bucket
// capacity or the maximum permits.
func (p RatePolicy) Limit() int64 {
	if p.Algorithm == RateTokenBucket {
		return p.Parameters.Capacity
	}
	return p.Parameters.Limit
}

func (p RatePolicy) clone() RatePolicy {
	p.Dimensions = slices.Clone(p.Dimensions)
	return p
}

// RatePolicySet is an immutable, validated set of rate policies. A change is
// a new set, swapped atomically by its user.
type RatePolicySet struct {
	policies map[string]RatePolicy
	ids      []string
	digest   string
}

// Policy returns a copy of the policy with id.
func (s *RatePolicySet) Policy(id string) (RatePolicy, bool) {
	if s == nil {
		return RatePolicy{}, false
	}
	p, ok := s.policies[id]
	if !ok {
		return RatePolicy{}, false
	}
	return p.clone(), true
}

// IDs lists the policy ids, sorted.
func (s *RatePolicySet) IDs() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.ids)
}

// Len is the number of policies.
func (s *RatePolicySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.ids)
}

// Digest is the sha256 over the sorted policy digests: it identifies the
// whole set.
func (s *RatePolicySet) Digest() string {
	if s == nil {
		return ""
	}
	return s.digest
}

// Hierarchy lists the ids of the policies in hierarchy name, sorted.
func (s *RatePolicySet) Hierarchy(name string) []string {
	if s == nil || name == "" {
		return nil
	}
	var out []string
	for _, id := range s.ids {
		if s.policies[id].Hierarchy == name {
			out = append(out, id)
		}
	}
	return out
}

// CompileRatePolicies validates every declaration, applies defaults and
// freezes the result. It reports every problem at once as a
// *ValidationError.
func CompileRatePolicies(decls []RatePolicyDecl, opts RateCompileOptions) (*RatePolicySet, error) {
	var ps Problems
	prefix := opts.PathPrefix
	if prefix != "" {
		prefix += "."
	}
	if len(decls) > RateMaxPolicies {
		ps.Add(opts.PathPrefix, RuleRateCount, "%d policies, at most %d allowed", len(decls), RateMaxPolicies)
	}
	set := &RatePolicySet{policies: make(map[string]RatePolicy, len(decls))}
	seen := make(map[string]bool, len(decls))
	for i, d := range decls {
		path := prefix + strconv.Itoa(i)
		if rateSlugProblem(d.ID, RateMaxIDBytes) == "" {
			path = prefix + d.ID
		}
		if seen[d.ID] {
			ps.Add(path, RuleRateDuplicate, "policy id declared more than once")
			continue
		}
		seen[d.ID] = true
		p, ok := compileRate(d, opts.LocalEmergency, path, &ps)
		if ok {
			set.policies[p.ID] = p
		}
	}
	if err := ps.Err(); err != nil {
		return nil, err
	}
	for id := range set.policies {
		set.ids = append(set.ids, id)
	}
	sort.Strings(set.ids)
	h := sha256.New()
	for _, id := range set.ids {
		h.Write([]byte(set.policies[id].Digest))
	}
	set.digest = hex.EncodeToString(h.Sum(nil))
	return set, nil
}

func compileRate(d RatePolicyDecl, le *RateLocalEmergency, path string, ps *Problems) (RatePolicy, bool) {
	n := len(*ps)
	if r := rateSlugProblem(d.ID, RateMaxIDBytes); r != "" {
		ps.Add(path+".id", RuleRateID, "%s", r)
	}
	if r := rateSlugProblem(d.Revision, RateMaxRevisionBytes); r != "" {
		ps.Add(path+".revision", RuleRateRevision, "%s", r)
	}
	p := RatePolicy{
		ID: d.ID, Revision: d.Revision, Algorithm: d.Algorithm, Parameters: d.Parameters, MaxCost: d.MaxCost,
		FailureMode: d.FailureMode, Critical: d.Critical, Shadow: d.Shadow, Hierarchy: d.Hierarchy,
		MaxClockStep: d.MaxClockStep, CleanupGrace: d.CleanupGrace,
	}
	if p.MaxCost == 0 {
		p.MaxCost = 1
	}
	if p.FailureMode == "" {
		p.FailureMode = FailClosed
	}
	if p.MaxClockStep == 0 {
		p.MaxClockStep = DefaultRateMaxClockStep
	}
	if p.CleanupGrace == 0 {
		p.CleanupGrace = DefaultRateCleanupGrace
	}

	if !d.Algorithm.Valid() {
		ps.Add(path+".algorithm", RuleRateAlgorithm, "unknown algorithm (want one of %v)", RateAlgorithms())
	} else {
		checkRateParams(p, path, ps)
	}

	// Dimensions: closed set, no duplicates, "global" only alone; stored in
	// canonical order so the digest does not depend on declaration order.
	switch {
	case len(d.Dimensions) == 0:
		ps.Add(path+".subject", RuleRateDimensions, "at least one subject dimension is required")
	default:
		seen := map[RateDimension]bool{}
		for _, dim := range d.Dimensions {
			switch {
			case !dim.Valid():
				ps.Add(path+".subject", RuleRateDimensions, "unknown dimension %q (want one of %v)", truncateRate(string(dim)), RateDimensions())
			case seen[dim]:
				ps.Add(path+".subject", RuleRateDimensions, "duplicate dimension %s", dim)
			}
			seen[dim] = true
		}
		if seen[DimGlobal] && len(d.Dimensions) > 1 {
			ps.Add(path+".subject", RuleRateDimensions, "global is a subject of its own and cannot be combined")
		}
		for _, dim := range RateDimensions() {
			if seen[dim] {
				p.Dimensions = append(p.Dimensions, dim)
			}
		}
	}

	switch p.FailureMode {
	case FailClosed:
	case FailOpenPolicy:
		if d.Critical {
			ps.Add(path+".failure-mode", RuleRateFailOpen, "a critical policy cannot fail open")
		}
		if slices.Contains(d.Dimensions, DimGlobal) {
			ps.Add(path+".failure-mode", RuleRateFailOpen, "a global policy cannot fail open (there is no global fail-open)")
		}
	case FailLocal:
		share := d.PerPodShare
		if le == nil {
			ps.Add(path+".failure-mode", RuleRateLocal, "local-emergency needs degraded-provider: local-emergency")
			break
		}
		if share == 0 {
			share = le.PerPodShare
		}
		switch {
		case math.IsNaN(share) || share <= 0 || share > 1:
			ps.Add(path+".per-pod-share", RuleRateLocal, "per-pod share must be within (0, 1]")
		case le.AssumedMaxPods < 1:
			ps.Add(path+".per-pod-share", RuleRateLocal, "assumed-maximum-pods must be at least 1")
		case share*float64(le.AssumedMaxPods) > 1+1e-12:
			ps.Add(path+".per-pod-share", RuleRateLocal,
				"per-pod share %g × assumed maximum pods %d exceeds 1: the pods together would exceed the global limit", share, le.AssumedMaxPods)
		}
		p.PerPodShare = share
	default:
		ps.Add(path+".failure-mode", RuleRateFailureMode, "unknown failure mode (want fail-closed, local-emergency or fail-open)")
	}
	if d.PerPodShare != 0 && p.FailureMode != FailLocal {
		ps.Add(path+".per-pod-share", RuleRateLocal, "per-pod-share applies only to local-emergency policies")
	}

	if d.Dedup.Enabled {
		p.Dedup = RateDedup{Enabled: true, TTL: d.Dedup.TTL, MaxEntries: d.Dedup.MaxEntries}
		if p.Dedup.TTL == 0 {
			p.Dedup.TTL = DefaultRateDedupTTL
		}
		if p.Dedup.MaxEntries == 0 {
			p.Dedup.MaxEntries = DefaultRateDedupEntries
		}
		if !wholeMillis(p.Dedup.TTL) || p.Dedup.TTL > RateMaxDedupTTL {
			ps.Add(path+".dedup.ttl", RuleRateDedup, "must be whole milliseconds within 1ms..%s", RateMaxDedupTTL)
		}
		if p.Dedup.MaxEntries < 1 || p.Dedup.MaxEntries > RateMaxDedupEntries {
			ps.Add(path+".dedup.max-entries", RuleRateDedup, "must be within 1..%d", RateMaxDedupEntries)
		}
		if d.Algorithm == RateConcurrency {
			ps.Add(path+".dedup", RuleRateDedup, "concurrency permits are keyed by owner token, not evaluation id")
		}
	} else if d.Dedup.TTL != 0 || d.Dedup.MaxEntries != 0 {
		ps.Add(path+".dedup", RuleRateDedup, "ttl and max-entries need enabled: true")
	}

	if p.MaxClockStep < 0 || p.MaxClockStep > RateMaxClockStep || p.MaxClockStep%time.Millisecond != 0 {
		ps.Add(path+".max-clock-step", RuleRateClock, "must be whole milliseconds within 0..%s", RateMaxClockStep)
	}
	if p.CleanupGrace < 0 || p.CleanupGrace > RateMaxCleanupGrace || p.CleanupGrace%time.Millisecond != 0 {
		ps.Add(path+".cleanup-grace", RuleRateClock, "must be whole milliseconds within 0..%s", RateMaxCleanupGrace)
	}
	if d.Hierarchy != "" {
		if r := rateSlugProblem(d.Hierarchy, RateMaxIDBytes); r != "" {
			ps.Add(path+".hierarchy", RuleRateHierarchy, "%s", r)
		}
		if d.Algorithm == RateConcurrency {
			ps.Add(path+".hierarchy", RuleRateHierarchy, "a concurrency limiter is not part of a rate hierarchy")
		}
	}
	if len(*ps) != n {
		return RatePolicy{}, false
	}
	p.Digest = hex.EncodeToString(canonicalRateDigest(p))
	return p, true
}

// checkRateParams enforces the per-algorithm parameter menu and the
// programs' manifest bounds.
func checkRateParams(p RatePolicy, path string, ps *Problems) {
	pp := p.Parameters
	bad := func(field, format string, a ...any) { ps.Add(path+"."+field, RuleRateParameters, format, a...) }
	notFor := func(field string, set bool) {
		if set {
			bad(field, "does not apply to %s", p.Algorithm)
		}
	}
	window := func(field string, d time.Duration) {
		switch {
		case p.Algorithm == RateFixedWindow:
			if !wholeMillis(d) || d > RateMaxFixedWindow {
				bad(field, "must be whole milliseconds within 1ms..%s (366 days)", RateMaxFixedWindow)
			}
		case wholeMillis(d) && d > RateMaxWindow && d <= RateMaxFixedWindow:
			bad(field, "%s is longer than %s (30 days), the most %s allows; only fixed-window takes a window up to %s (366 days)",
				d, RateMaxWindow, p.Algorithm, RateMaxFixedWindow)
		case !wholeMillis(d) || d > RateMaxWindow:
			bad(field, "must be whole milliseconds within 1ms..%s", RateMaxWindow)
		}
	}
	costUpTo := func(max int64) {
		if p.MaxCost < 1 || p.MaxCost > max {
			ps.Add(path+".max-cost", RuleRateCost, "must be within 1..%d", max)
		}
	}
	switch p.Algorithm {
	case RateFixedWindow, RateSlidingCounter, RateGCRA:
		if pp.Limit < 1 || pp.Limit > RateMaxLimit {
			bad("limit", "must be within 1..%d", RateMaxLimit)
		}
		window("window", pp.Window)
		costUpTo(max(1, min(pp.Limit, RateMaxLimit)))
		notFor("capacity", pp.Capacity != 0)
		notFor("refill-tokens", pp.RefillTokens != 0)
		notFor("refill-period", pp.RefillPeriod != 0)
		notFor("permit-ttl", pp.PermitTTL != 0)
	case RateSlidingLog:
		if pp.Limit < 1 || pp.Limit > RateMaxLogLimit {
			bad("limit", "must be within 1..%d", RateMaxLogLimit)
		}
		window("window", pp.Window)
		costUpTo(1) // v1 sliding log admits cost 1 only
		notFor("capacity", pp.Capacity != 0)
		notFor("refill-tokens", pp.RefillTokens != 0)
		notFor("refill-period", pp.RefillPeriod != 0)
		notFor("permit-ttl", pp.PermitTTL != 0)
	case RateConcurrency:
		if pp.Limit < 1 || pp.Limit > RateMaxLogLimit {
			bad("limit", "maximum permits must be within 1..%d", RateMaxLogLimit)
		}
		if pp.PermitTTL < RateMinPermitTTL || pp.PermitTTL > RateMaxPermitTTL || pp.PermitTTL%time.Millisecond != 0 {
			bad("permit-ttl", "must be whole milliseconds within %s..%s", RateMinPermitTTL, RateMaxPermitTTL)
		}
		// §21.4/§21.5 define the local emergency limiter, fail-open and
		// shadow for rates (per-pod window and bucket limits, allow plus
		// telemetry); none of them is defined for permits of work in flight.
		// A permit limiter whose global state cannot be reached therefore
		// fails closed, always.
		if p.FailureMode != FailClosed && p.FailureMode != "" {
			ps.Add(path+".failure-mode", RuleRateFailureMode, "a concurrency limiter always fails closed (§21 defines no local or open fallback for permits)")
		}
		if p.Shadow {
			bad("shadow", "does not apply to %s: a shadow permit would admit work it does not count", p.Algorithm)
		}
		costUpTo(1)
		notFor("window", pp.Window != 0)
		notFor("capacity", pp.Capacity != 0)
		notFor("refill-tokens", pp.RefillTokens != 0)
		notFor("refill-period", pp.RefillPeriod != 0)
	case RateTokenBucket:
		notFor("limit", pp.Limit != 0)
		notFor("window", pp.Window != 0)
		notFor("permit-ttl", pp.PermitTTL != 0)
		okCap := pp.Capacity >= 1 && pp.Capacity <= rateMaxScaled/RateScale
		okRefill := pp.RefillTokens >= 1 && pp.RefillTokens <= rateMaxScaled/RateScale
		if !okCap {
			bad("capacity", "must be within 1..%d tokens", rateMaxScaled/RateScale)
		}
		if !okRefill {
			bad("refill-tokens", "must be within 1..%d tokens", rateMaxScaled/RateScale)
		}
		window("refill-period", pp.RefillPeriod)
		if okCap {
			costUpTo(pp.Capacity)
		}
		if okCap && okRefill && wholeMillis(pp.RefillPeriod) && pp.RefillPeriod <= RateMaxWindow {
			capScaled, periodMs := pp.Capacity*RateScale, pp.RefillPeriod.Milliseconds()
			if capScaled > rateMaxScaled/periodMs {
				bad("capacity", "capacity × refill period (ms) × %d exceeds 2^52", RateScale)
			} else {
				// Full-refill horizon, the state TTL, must stay within 30 days.
				horizon := (capScaled*periodMs + pp.RefillTokens*RateScale - 1) / (pp.RefillTokens * RateScale)
				if time.Duration(horizon)*time.Millisecond > RateMaxWindow {
					bad("refill-period", "a full refill takes longer than %s", RateMaxWindow)
				}
			}
		}
	}
}

func wholeMillis(d time.Duration) bool { return d >= time.Millisecond && d%time.Millisecond == 0 }

// canonicalRateDigest is sha256 over a length-prefixed encoding of every
// behaviour-relevant field in a fixed order, under a domain string. Each
// field is a big-endian u32 length followed by its bytes; integers are
// decimal text. Changing this encoding changes every digest: bump the
// domain.
func canonicalRateDigest(p RatePolicy) []byte {
	var buf []byte
	field := func(s string) {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	num := func(n int64) { field(strconv.FormatInt(n, 10)) }
	flag := func(b bool) {
		if b {
			field("1")
		} else {
			field("0")
		}
	}
	field("caphost/rate-policy/v1")
	field(p.ID)
	field(p.Revision)
	field(string(p.Algorithm))
	num(p.Parameters.Limit)
	num(p.Parameters.Window.Milliseconds())
	num(p.Parameters.Capacity)
	num(p.Parameters.RefillTokens)
	num(p.Parameters.RefillPeriod.Milliseconds())
	num(p.Parameters.PermitTTL.Milliseconds())
	num(p.MaxCost)
	num(int64(len(p.Dimensions)))
	for _, d := range p.Dimensions {
		field(string(d))
	}
	field(string(p.FailureMode))
	flag(p.Critical)
	field(strconv.FormatFloat(p.PerPodShare, 'g', -1, 64))
	flag(p.Dedup.Enabled)
	num(p.Dedup.TTL.Milliseconds())
	num(int64(p.Dedup.MaxEntries))
	flag(p.Shadow)
	field(p.Hierarchy)
	num(p.MaxClockStep.Milliseconds())
	num(p.CleanupGrace.Milliseconds())
	sum := sha256.Sum256(buf)
	return sum[:]
}

// rateSlugProblem returns why s is not [a-z0-9]+(-[a-z0-9]+)* of at most max
// bytes, or "". It never echoes s.
func rateSlugProblem(s string, max int) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > max:
		return fmt.Sprintf("%d bytes, at most %d allowed", len(s), max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1 && s[i-1] != '-':
		default:
			return fmt.Sprintf("byte %d is not allowed (want lower-case letters and digits joined by single hyphens)", i)
		}
	}
	return ""
}

// truncateRate bounds a declared string before it enters a message.
func truncateRate(s string) string {
	if len(s) > 24 {
		return s[:24] + "..."
	}
	return s
}
