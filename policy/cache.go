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
	"strings"
	"time"
)

// CacheConsistency is a region's declared read-consistency intent (the
// reference's §17.1). STRONG and LINEARIZABLE are not offered: a database
// and a Redis cache cannot be updated as one.
type CacheConsistency string

// The consistency intents.
const (
	// CacheBestEffort: entries may be stale until their TTL; L1 allowed.
	CacheBestEffort CacheConsistency = "best-effort"
	// CacheBoundedStaleness: stale by at most the soft TTL (and, with L1,
	// the L1 age cap; after a region invalidation whose hint is lost, the
	// generation trust); L1 and generation trust allowed.
	CacheBoundedStaleness CacheConsistency = "bounded-staleness"
	// CacheReadAfterInvalidation: once an invalidation returns, no host
	// serves the invalidated value; no L1 and no generation trust (a lost
	// hint would break it).
	CacheReadAfterInvalidation CacheConsistency = "read-after-invalidation"
	// CacheSourceRevisionGuarded: as read-after-invalidation, and a load's
	// write is conditional on its source revision being newer; no L1.
	CacheSourceRevisionGuarded CacheConsistency = "source-revision-guarded"
)

// CacheConsistencies lists every intent.
func CacheConsistencies() []CacheConsistency {
	return []CacheConsistency{CacheBestEffort, CacheBoundedStaleness, CacheReadAfterInvalidation, CacheSourceRevisionGuarded}
}

// Valid reports whether c is in the closed set.
func (c CacheConsistency) Valid() bool { return slices.Contains(CacheConsistencies(), c) }

// Strict reports whether the intent forbids an in-process L1.
func (c CacheConsistency) Strict() bool {
	return c == CacheReadAfterInvalidation || c == CacheSourceRevisionGuarded
}

// CacheStampede is a region's stampede strategy (the reference's §18):
// how GetOrLoad coalesces loads. A caller that asks for the refresh lease
// itself (the cache's LookupOrClaim, the sidecar's claim) gets it in
// either strategy.
type CacheStampede string

// The stampede strategies.
const (
	// CacheStampedeLocal coalesces concurrent misses of one key in one
	// process (bounded single-flight) behind the source bulkhead.
	CacheStampedeLocal CacheStampede = "local"
	// CacheStampedeDistributed adds the refresh soft lease: across hosts one
	// claimant refreshes a stale or missing hot key while the others serve
	// stale or wait, bounded.
	CacheStampedeDistributed CacheStampede = "distributed"
)

// Valid reports whether s is a strategy.
func (s CacheStampede) Valid() bool { return s == CacheStampedeLocal || s == CacheStampedeDistributed }

// CacheSchemaPolicy says what a lookup does with an entry of a schema it
// cannot read (a newer writer, a retired version, an oversized value).
type CacheSchemaPolicy string

// The incompatible-schema policies.
const (
	// CacheSchemaFailFast reports IncompatibleSchema and never deletes or
	// overwrites the entry (a newer writer's entry must survive an old
	// reader), and GetOrLoad does not load.
	CacheSchemaFailFast CacheSchemaPolicy = "fail-fast"
	// CacheSchemaQuarantineAndReload quarantines the entry (owner-safe) and
	// loads from the source: for an approved migration off a retired
	// version.
	CacheSchemaQuarantineAndReload CacheSchemaPolicy = "quarantine-and-reload"
)

// Valid reports whether p is a policy.
func (p CacheSchemaPolicy) Valid() bool {
	return p == CacheSchemaFailFast || p == CacheSchemaQuarantineAndReload
}

// Cache region bounds. The value bound follows the cache programs (a stored
// value is at most 1 MiB) and the envelope's header.
const (
	CacheMaxRegions     = 256
	CacheMaxIDBytes     = 64
	CacheMaxKeyVersion  = 999
	CacheMaxTTL         = 30 * 24 * time.Hour
	CacheMaxJitter      = 0.5
	CacheMaxValueBytes  = 1 << 20
	CacheMaxShards      = 256
	CacheMaxCompression = 1024
	CacheMaxL1Entries   = 10_000_000
	CacheMaxL1Bytes     = 1 << 36
	CacheMaxL1Age       = time.Hour
	// CacheMaxGenerationTrust bounds ops.generation-trust.
	CacheMaxGenerationTrust = time.Minute
	CacheMaxFlightKeys      = 1 << 20
	CacheMaxWaiters         = 1 << 20
	CacheMaxLoadTimeout     = 5 * time.Minute
	CacheMaxSourceLoads     = 1 << 16
	CacheMaxQueued          = 1 << 20
	CacheMaxLeaseTTL        = 10 * time.Minute
	// CacheEnvelopeOverhead is what the envelope adds to a payload at most
	// (its header with a 255-byte codec id), so a region's stored values
	// stay within MaxBytes + CacheEnvelopeOverhead.
	CacheEnvelopeOverhead = 4 + 1 + 1 + 255 + 4 + 1 + 8 + 8 + 8 + 8 + 4 + 4 + 16
	// CacheBuiltinCodec is the identity codec every host has: the value is
	// stored as given (version 1).
	CacheBuiltinCodec = "bytes"
)

// Cache rules.
const (
	RuleCacheID          Rule = "cache.id"
	RuleCacheDuplicate   Rule = "cache.duplicate"
	RuleCacheCount       Rule = "cache.count"
	RuleCacheTTL         Rule = "cache.ttl"
	RuleCacheJitter      Rule = "cache.jitter"
	RuleCacheBytes       Rule = "cache.bytes"
	RuleCacheCodec       Rule = "cache.codec"
	RuleCacheConsistency Rule = "cache.consistency"
	RuleCacheStampede    Rule = "cache.stampede"
	RuleCacheL1          Rule = "cache.l1"
	RuleCacheOps         Rule = "cache.operational"
	RuleCacheBounds      Rule = "cache.bounds"
	// RuleCacheHints: a region uses L1 but no hint secret is configured.
	RuleCacheHints Rule = "cache.hints"
)

// CacheRules lists the cache rules, sorted.
func CacheRules() []Rule {
	rs := []Rule{RuleCacheID, RuleCacheDuplicate, RuleCacheCount, RuleCacheTTL, RuleCacheJitter, RuleCacheBytes,
		RuleCacheCodec, RuleCacheConsistency, RuleCacheStampede, RuleCacheL1, RuleCacheOps, RuleCacheBounds, RuleCacheHints}
	sort.Slice(rs, func(i, j int) bool { return rs[i] < rs[j] })
	return rs
}

// CacheL1Limits bound a region's in-process L1.
type CacheL1Limits struct {
	MaxEntries int
	MaxBytes   int64
	// MaxAge caps an entry's life in L1 (it never outlives its L2 hard
	// expiry either): the staleness bound when an invalidation hint is lost
	// while the subscription stays up.
	MaxAge time.Duration
}

// CacheOps are a region's operational settings: how the host runs it, as
// opposed to what the region means. Configuration sets them (defaults for
// every region, overrides per configured region); guests never do.
type CacheOps struct {
	// Shards spreads the region over that many Cluster slots, each with its
	// own generation (1..CacheMaxShards). Part of the key layout.
	Shards int
	// MinTTL is the hard minimum of every jittered TTL.
	MinTTL time.Duration
	// CompressAbove offers payloads longer than this to compression (0:
	// never); MaxCompressionRatio bounds the ratio a reader accepts.
	CompressAbove       int
	MaxCompressionRatio int
	SchemaPolicy        CacheSchemaPolicy
	L1                  CacheL1Limits
	// FlightKeys, FlightWaiters and LoadTimeout bound the local
	// single-flight: keys loading at once, callers per load, one load.
	FlightKeys    int
	FlightWaiters int
	LoadTimeout   time.Duration
	// SourceLoads and SourceQueued bound the source bulkhead.
	SourceLoads  int
	SourceQueued int
	// LeaseTTL is the refresh soft lease's TTL, at least LoadTimeout (a
	// lease that expires while its holder still loads lets another host
	// load the same key); LeaseWait bounds how long a caller that finds
	// another host refreshing a missing key waits for the value. It reads
	// the entry when the holder announces its write (on the same host, or
	// through the hint channel when one is configured) and every LeasePoll
	// in any case.
	LeaseTTL  time.Duration
	LeaseWait time.Duration
	LeasePoll time.Duration
	// GenerationTrust is how long a host reads under a shard generation it
	// confirmed in Redis without reading the generation again (0: every
	// lookup reads it). It applies only while the invalidation hints are
	// up, which drop it on every region invalidation, and never in a
	// strict region (compiled to 0): the staleness bound when a region
	// invalidation's hint is lost while the subscription stays up.
	GenerationTrust time.Duration
}

// DefaultCacheOps returns the operational defaults.
func DefaultCacheOps() CacheOps {
	return CacheOps{
		Shards: 16, MinTTL: time.Second, MaxCompressionRatio: 32, SchemaPolicy: CacheSchemaFailFast,
		L1:         CacheL1Limits{MaxEntries: 10_000, MaxBytes: 16 << 20, MaxAge: 5 * time.Second},
		FlightKeys: 1024, FlightWaiters: 1024, LoadTimeout: 5 * time.Second,
		SourceLoads: 32, SourceQueued: 256,
		LeaseTTL: 6 * time.Second, LeaseWait: time.Second, LeasePoll: 20 * time.Millisecond,
		GenerationTrust: time.Second,
	}
}

// CacheBounds are the operator's bounds on every region. A guest's
// declaration is clamped into them (and the clamp recorded); a configured
// region outside them is a configuration error.
type CacheBounds struct {
	MinHardTTL     time.Duration
	MaxHardTTL     time.Duration
	MaxNegativeTTL time.Duration
	MaxBytes       int
	MaxJitter      float64
	// AllowL1 false turns every region's L1 off.
	AllowL1 bool
}

// DefaultCacheBounds returns the default bounds.
func DefaultCacheBounds() CacheBounds {
	return CacheBounds{MinHardTTL: time.Second, MaxHardTTL: 24 * time.Hour, MaxNegativeTTL: 5 * time.Minute,
		MaxBytes: 1 << 20, MaxJitter: CacheMaxJitter, AllowL1: true}
}

// CacheRegionDecl is one region as declared by configuration or a
// cache-region guest, before bounds and defaults.
type CacheRegionDecl struct {
	// ID is the region id: a key-builder slug ([a-z0-9][a-z0-9-]*, at most
	// 64 bytes), so it can name the region in keys.
	ID string
	// Source is "config" or "guest:<module>".
	Source     string
	KeyVersion int
	// Codec is the schema id of the codec that owns the payload
	// (CacheBuiltinCodec or one a codec guest declares).
	Codec string
	// SoftTTL starts the stale window (0: none, fresh until HardTTL);
	// HardTTL ends an entry's life; NegativeTTL is the life of an
	// authoritative absence (0: absences are not cached).
	SoftTTL, HardTTL, NegativeTTL time.Duration
	// Jitter is the fraction (0..0.5) by which TTLs are shortened,
	// deterministically per key.
	Jitter float64
	// StaleIfError serves a stale entry (before its hard expiry) when the
	// source fails transiently.
	StaleIfError bool
	// L1 asks for an in-process L1 (refused for strict consistency).
	L1 bool
	// MaxBytes bounds a payload as the codec wrote it (before compression).
	MaxBytes    int
	Consistency CacheConsistency // default bounded-staleness
	Stampede    CacheStampede    // default distributed
	// Ops overrides the operational defaults (nil: the defaults). Only
	// configured regions carry one.
	Ops *CacheOps
	// Admit reports that the declaring guest exports an admission
	// predicate the host consults before storing.
	Admit bool
	// Canonicalize reports that the declaring guest canonicalises request
	// attributes into the region's key parts.
	Canonicalize bool
}

// CacheCodecInfo describes a codec a region may name.
type CacheCodecInfo struct {
	// Source is "builtin" or "guest:<module>".
	Source       string
	WriteVersion uint32
	Readable     []uint32
}

// CacheRegionPolicy is one compiled, frozen region policy. It is a value.
type CacheRegionPolicy struct {
	ID           string
	Source       string
	KeyVersion   int
	Codec        string
	CodecWrite   uint32
	CodecRead    []uint32
	SoftTTL      time.Duration // 0: no stale window
	HardTTL      time.Duration
	NegativeTTL  time.Duration
	Jitter       float64
	StaleIfError bool
	L1           bool // effective: asked for, allowed and not strict
	MaxBytes     int
	Consistency  CacheConsistency
	Stampede     CacheStampede
	Admit        bool
	Canonicalize bool
	Ops          CacheOps
	// Clamped names the fields the operator bounds changed, sorted (guest
	// regions only; a configured region is refused instead).
	Clamped []string
	// Digest is the lower-hex sha256 of the canonical encoding of every
	// field above but Clamped: equal digests behave identically.
	Digest string
	// Revision names the policy for jitter and diagnostics: the source and
	// the digest's first 12 hex characters.
	Revision string
}

// MaxStoredBytes is the largest stored value of the region: payload plus
// envelope header.
func (p CacheRegionPolicy) MaxStoredBytes() int {
	return min(p.MaxBytes+CacheEnvelopeOverhead, CacheMaxValueBytes)
}

// TombstoneTTL is how long a per-key invalidation's tombstone lives: longer
// than any load that may have begun before it (the load deadline, or a
// refresh lease held by an HTTP caller), plus a second of margin.
func (p CacheRegionPolicy) TombstoneTTL() time.Duration {
	return max(p.Ops.LoadTimeout, p.Ops.LeaseTTL) + time.Second
}

// CacheRegionSet is an immutable set of compiled region policies.
type CacheRegionSet struct {
	byID   map[string]CacheRegionPolicy
	ids    []string
	digest string
}

// Lookup returns the region's policy.
func (s *CacheRegionSet) Lookup(id string) (CacheRegionPolicy, bool) {
	p, ok := s.byID[id]
	return p, ok
}

// IDs lists the region ids, sorted.
func (s *CacheRegionSet) IDs() []string { return slices.Clone(s.ids) }

// Len returns the number of regions.
func (s *CacheRegionSet) Len() int { return len(s.ids) }

// Digest digests every region's digest, in id order.
func (s *CacheRegionSet) Digest() string { return s.digest }

// UsesL1 reports whether any region has an effective L1.
func (s *CacheRegionSet) UsesL1() bool {
	for _, p := range s.byID {
		if p.L1 {
			return true
		}
	}
	return false
}

// CacheCompileOptions parameterise CompileCacheRegions.
type CacheCompileOptions struct {
	// PathPrefix prefixes every problem path (e.g. capabilities.cache.regions).
	PathPrefix string
	Defaults   CacheOps
	Bounds     CacheBounds
	// Codecs are the codecs regions may name, by schema id.
	Codecs map[string]CacheCodecInfo
	// JitterStrategy names the jitter algorithm; it enters every digest so a
	// new algorithm is a new revision.
	JitterStrategy string
}

// CompileCacheRegions validates decls, applies defaults, clamps guest
// declarations into the bounds and freezes every region with a digest and
// revision. Every problem is reported at once as a *ValidationError.
func CompileCacheRegions(decls []CacheRegionDecl, o CacheCompileOptions) (*CacheRegionSet, error) {
	var ps Problems
	at := func(id, field string) string {
		p := o.PathPrefix
		if id != "" {
			p += "." + id
		}
		if field != "" {
			p += "." + field
		}
		return p
	}
	checkBounds(o.Bounds, o.PathPrefix, &ps)
	n := len(ps)
	checkOps(o.Defaults, strings.TrimSuffix(o.PathPrefix, ".regions")+".defaults", &ps)
	// A region's overrides start from the defaults: their problems are
	// reported once, at the defaults.
	defaultsOK := len(ps) == n
	if len(decls) > CacheMaxRegions {
		ps.Add(o.PathPrefix, RuleCacheCount, "%d regions, at most %d", len(decls), CacheMaxRegions)
	}
	set := &CacheRegionSet{byID: make(map[string]CacheRegionPolicy, len(decls))}
	seen := map[string]string{}
	for _, d := range decls {
		if !cacheSlug(d.ID) {
			ps.Add(at("", ""), RuleCacheID, "region id %s is not a slug of at most %d bytes ([a-z0-9][a-z0-9-]*)", quoteBounded(d.ID), CacheMaxIDBytes)
			continue
		}
		if prev, dup := seen[d.ID]; dup {
			ps.Add(at(d.ID, ""), RuleCacheDuplicate, "region declared twice (%s and %s)", prev, d.Source)
			continue
		}
		seen[d.ID] = d.Source
		p, ok := compileRegion(d, o, at, defaultsOK, &ps)
		if ok {
			set.byID[d.ID] = p
			set.ids = append(set.ids, d.ID)
		}
	}
	if err := ps.Err(); err != nil {
		return nil, err
	}
	sort.Strings(set.ids)
	h := sha256.New()
	for _, id := range set.ids {
		h.Write([]byte(set.byID[id].Digest))
	}
	set.digest = hex.EncodeToString(h.Sum(nil))
	return set, nil
}

func compileRegion(d CacheRegionDecl, o CacheCompileOptions, at func(id, field string) string, defaultsOK bool, ps *Problems) (CacheRegionPolicy, bool) {
	n := len(*ps)
	guest := strings.HasPrefix(d.Source, "guest:")
	b := o.Bounds
	p := CacheRegionPolicy{
		ID: d.ID, Source: d.Source, KeyVersion: d.KeyVersion, Codec: d.Codec,
		SoftTTL: d.SoftTTL, HardTTL: d.HardTTL, NegativeTTL: d.NegativeTTL, Jitter: d.Jitter,
		StaleIfError: d.StaleIfError, MaxBytes: d.MaxBytes, Consistency: d.Consistency, Stampede: d.Stampede,
		Admit: d.Admit, Canonicalize: d.Canonicalize, Ops: o.Defaults,
	}
	if d.Ops != nil {
		p.Ops = *d.Ops
		if defaultsOK {
			checkOps(p.Ops, at(d.ID, ""), ps)
		}
	}
	if p.Consistency == "" {
		p.Consistency = CacheBoundedStaleness
	}
	if p.Stampede == "" {
		p.Stampede = CacheStampedeDistributed
	}
	if d.KeyVersion < 1 || d.KeyVersion > CacheMaxKeyVersion {
		ps.Add(at(d.ID, "key-version"), RuleCacheID, "must be within 1..%d", CacheMaxKeyVersion)
	}
	if !p.Consistency.Valid() {
		ps.Add(at(d.ID, "consistency"), RuleCacheConsistency, "unknown consistency %s (want best-effort, bounded-staleness, read-after-invalidation or source-revision-guarded)", quoteBounded(string(p.Consistency)))
	}
	if !p.Stampede.Valid() {
		ps.Add(at(d.ID, "stampede"), RuleCacheStampede, "unknown stampede strategy %s (want local or distributed)", quoteBounded(string(p.Stampede)))
	}
	if c, ok := o.Codecs[d.Codec]; !ok {
		ps.Add(at(d.ID, "codec"), RuleCacheCodec, "codec %s is not declared by any codec guest (nor the built-in %q)", quoteBounded(d.Codec), CacheBuiltinCodec)
	} else {
		p.CodecWrite, p.CodecRead = c.WriteVersion, slices.Clone(c.Readable)
		slices.Sort(p.CodecRead)
	}

	// clamp moves a guest's value into a bound and records it; a configured
	// region outside a bound is refused instead.
	clamp := func(field string, rule Rule, bad bool, fix func(), format string, args ...any) {
		if !bad {
			return
		}
		if guest {
			fix()
			p.Clamped = append(p.Clamped, field)
			return
		}
		ps.Add(at(d.ID, field), rule, format, args...)
	}
	if p.HardTTL <= 0 || p.HardTTL > CacheMaxTTL {
		ps.Add(at(d.ID, "ttl.hard"), RuleCacheTTL, "must be within 1ms..%s", CacheMaxTTL)
	} else {
		clamp("ttl.hard", RuleCacheTTL, p.HardTTL < b.MinHardTTL, func() { p.HardTTL = b.MinHardTTL }, "below bounds.min-hard-ttl %s", b.MinHardTTL)
		clamp("ttl.hard", RuleCacheTTL, p.HardTTL > b.MaxHardTTL, func() { p.HardTTL = b.MaxHardTTL }, "above bounds.max-hard-ttl %s", b.MaxHardTTL)
		clamp("ttl.soft", RuleCacheTTL, p.SoftTTL > p.HardTTL, func() { p.SoftTTL = p.HardTTL }, "longer than the hard TTL")
		clamp("ttl.negative", RuleCacheTTL, p.NegativeTTL > b.MaxNegativeTTL, func() { p.NegativeTTL = b.MaxNegativeTTL }, "above bounds.max-negative-ttl %s", b.MaxNegativeTTL)
		clamp("ttl.negative", RuleCacheTTL, p.NegativeTTL > p.HardTTL, func() { p.NegativeTTL = p.HardTTL }, "longer than the hard TTL")
	}
	if p.SoftTTL == p.HardTTL {
		p.SoftTTL = 0 // no stale window
	}
	for _, t := range []struct {
		f string
		v time.Duration
	}{{"ttl.soft", p.SoftTTL}, {"ttl.hard", p.HardTTL}, {"ttl.negative", p.NegativeTTL}} {
		switch {
		case t.v < 0:
			ps.Add(at(d.ID, t.f), RuleCacheTTL, "must not be negative")
		case t.v%time.Millisecond != 0:
			ps.Add(at(d.ID, t.f), RuleCacheTTL, "must be whole milliseconds")
		}
	}
	if math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter > CacheMaxJitter {
		ps.Add(at(d.ID, "jitter"), RuleCacheJitter, "must be within 0..%g", CacheMaxJitter)
	} else {
		clamp("jitter", RuleCacheJitter, p.Jitter > b.MaxJitter, func() { p.Jitter = b.MaxJitter }, "above bounds.max-jitter %g", b.MaxJitter)
	}
	if p.MaxBytes <= 0 || p.MaxBytes > CacheMaxValueBytes {
		ps.Add(at(d.ID, "max-bytes"), RuleCacheBytes, "must be within 1..%d", CacheMaxValueBytes)
	} else {
		clamp("max-bytes", RuleCacheBytes, p.MaxBytes > b.MaxBytes, func() { p.MaxBytes = b.MaxBytes }, "above bounds.max-bytes %d", b.MaxBytes)
	}
	// The minimum must not exceed a TTL in use: jitter holds draws at it.
	for _, t := range []time.Duration{p.SoftTTL, p.HardTTL, p.NegativeTTL} {
		if t > 0 && t < p.Ops.MinTTL {
			p.Ops.MinTTL = t
		}
	}
	p.L1 = d.L1
	clamp("l1", RuleCacheL1, p.L1 && p.Consistency.Strict(), func() { p.L1 = false },
		"a %s region gets no L1 (a lost invalidation hint would serve an invalidated value)", p.Consistency)
	clamp("l1", RuleCacheL1, p.L1 && !b.AllowL1, func() { p.L1 = false }, "bounds.l1 is false: no region may use L1")
	if p.Consistency.Strict() {
		// A lost hint would let a host read an invalidated generation.
		p.Ops.GenerationTrust = 0
	}
	if len(*ps) > n {
		return CacheRegionPolicy{}, false
	}
	slices.Sort(p.Clamped)
	p.Clamped = slices.Compact(p.Clamped)
	sum := sha256.Sum256(canonicalCacheRegion(p, o.JitterStrategy))
	p.Digest = hex.EncodeToString(sum[:])
	src := p.Source
	if i := strings.IndexByte(src, ':'); i >= 0 {
		src = src[:i]
	}
	p.Revision = src + "-" + p.Digest[:12]
	return p, true
}

func checkBounds(b CacheBounds, prefix string, ps *Problems) {
	path := strings.TrimSuffix(prefix, ".regions") + ".bounds"
	if b.MinHardTTL <= 0 || b.MinHardTTL > b.MaxHardTTL || b.MaxHardTTL > CacheMaxTTL {
		ps.Add(path, RuleCacheBounds, "want 0 < min-hard-ttl <= max-hard-ttl <= %s", CacheMaxTTL)
	}
	if b.MaxNegativeTTL < 0 || b.MaxNegativeTTL > CacheMaxTTL {
		ps.Add(path+".max-negative-ttl", RuleCacheBounds, "must be within 0..%s", CacheMaxTTL)
	}
	if b.MaxBytes <= 0 || b.MaxBytes > CacheMaxValueBytes {
		ps.Add(path+".max-bytes", RuleCacheBounds, "must be within 1..%d", CacheMaxValueBytes)
	}
	if math.IsNaN(b.MaxJitter) || b.MaxJitter < 0 || b.MaxJitter > CacheMaxJitter {
		ps.Add(path+".max-jitter", RuleCacheBounds, "must be within 0..%g", CacheMaxJitter)
	}
}

func checkOps(o CacheOps, path string, ps *Problems) {
	bad := func(field, format string, args ...any) { ps.Add(path+"."+field, RuleCacheOps, format, args...) }
	if o.Shards < 1 || o.Shards > CacheMaxShards {
		bad("shards", "must be within 1..%d", CacheMaxShards)
	}
	if o.MinTTL < time.Millisecond || o.MinTTL%time.Millisecond != 0 || o.MinTTL > CacheMaxTTL {
		bad("min-ttl", "must be whole milliseconds within 1ms..%s", CacheMaxTTL)
	}
	if o.CompressAbove < 0 || o.CompressAbove > CacheMaxValueBytes {
		bad("compression.above", "must be within 0..%d", CacheMaxValueBytes)
	}
	if o.MaxCompressionRatio < 1 || o.MaxCompressionRatio > CacheMaxCompression {
		bad("compression.max-ratio", "must be within 1..%d", CacheMaxCompression)
	}
	if !o.SchemaPolicy.Valid() {
		bad("incompatible-schema", "want fail-fast or quarantine-and-reload")
	}
	if o.L1.MaxEntries < 1 || o.L1.MaxEntries > CacheMaxL1Entries {
		bad("l1.max-entries", "must be within 1..%d", CacheMaxL1Entries)
	}
	if o.L1.MaxBytes < 1024 || o.L1.MaxBytes > CacheMaxL1Bytes {
		bad("l1.max-bytes", "must be within 1024..%d", int64(CacheMaxL1Bytes))
	}
	if o.L1.MaxAge < time.Millisecond || o.L1.MaxAge > CacheMaxL1Age {
		bad("l1.max-age", "must be within 1ms..%s", CacheMaxL1Age)
	}
	if o.GenerationTrust < 0 || o.GenerationTrust > CacheMaxGenerationTrust {
		bad("generation-trust", "must be within 0..%s", CacheMaxGenerationTrust)
	}
	if o.FlightKeys < 1 || o.FlightKeys > CacheMaxFlightKeys {
		bad("single-flight.max-keys", "must be within 1..%d", CacheMaxFlightKeys)
	}
	if o.FlightWaiters < 1 || o.FlightWaiters > CacheMaxWaiters {
		bad("single-flight.max-waiters", "must be within 1..%d", CacheMaxWaiters)
	}
	if o.LoadTimeout < time.Millisecond || o.LoadTimeout > CacheMaxLoadTimeout {
		bad("single-flight.load-timeout", "must be within 1ms..%s", CacheMaxLoadTimeout)
	}
	if o.SourceLoads < 1 || o.SourceLoads > CacheMaxSourceLoads {
		bad("source.max-concurrent", "must be within 1..%d", CacheMaxSourceLoads)
	}
	if o.SourceQueued < 0 || o.SourceQueued > CacheMaxQueued {
		bad("source.max-queued", "must be within 0..%d", CacheMaxQueued)
	}
	leaseOK := o.LeaseTTL >= time.Millisecond && o.LeaseTTL%time.Millisecond == 0 && o.LeaseTTL <= CacheMaxLeaseTTL
	loadOK := o.LoadTimeout >= time.Millisecond && o.LoadTimeout <= CacheMaxLoadTimeout
	switch {
	case !leaseOK:
		bad("refresh-lease.ttl", "must be whole milliseconds within 1ms..%s", CacheMaxLeaseTTL)
	case loadOK && o.LeaseTTL < o.LoadTimeout:
		// The lease holder loads for up to the load timeout: a lease that
		// expires first lets another host claim it and load the same key.
		bad("refresh-lease.ttl", "%s is shorter than single-flight.load-timeout %s: the refresh lease would expire while its holder still loads, and another host would load the same key; raise it to at least %s (or lower the load timeout)",
			o.LeaseTTL, o.LoadTimeout, o.LoadTimeout)
	}
	if o.LeaseWait < 0 || o.LeaseWait > o.LeaseTTL {
		bad("refresh-lease.wait", "must be within 0..refresh-lease.ttl")
	}
	if o.LeasePoll < time.Millisecond || o.LeasePoll > time.Second {
		bad("refresh-lease.poll", "must be within 1ms..1s")
	}
}

// cacheSlug matches the key builder's region slug.
func cacheSlug(s string) bool {
	if s == "" || len(s) > CacheMaxIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0:
		default:
			return false
		}
	}
	return true
}

// quoteBounded quotes s, cut to 32 bytes: ids come from guests and files.
func quoteBounded(s string) string {
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return strconv.Quote(s)
}

// canonicalCacheRegion encodes every behaviour-relevant field of p in a
// fixed order, each length-prefixed (u32 big-endian), so two policies share
// a digest only if they behave identically.
func canonicalCacheRegion(p CacheRegionPolicy, jitterStrategy string) []byte {
	var b []byte
	str := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	num := func(v int64) { str(strconv.FormatInt(v, 10)) }
	flag := func(v bool) { str(strconv.FormatBool(v)) }
	str("caphost/policy/cache-region/v1")
	str(jitterStrategy)
	str(p.ID)
	str(p.Source)
	num(int64(p.KeyVersion))
	str(p.Codec)
	num(int64(p.CodecWrite))
	num(int64(len(p.CodecRead)))
	for _, v := range p.CodecRead {
		num(int64(v))
	}
	num(int64(p.SoftTTL))
	num(int64(p.HardTTL))
	num(int64(p.NegativeTTL))
	// The jitter in parts per million, as the expiry arithmetic uses it.
	num(int64(math.Round(p.Jitter * 1e6)))
	flag(p.StaleIfError)
	flag(p.L1)
	num(int64(p.MaxBytes))
	str(string(p.Consistency))
	str(string(p.Stampede))
	flag(p.Admit)
	flag(p.Canonicalize)
	o := p.Ops
	for _, v := range []int64{int64(o.Shards), int64(o.MinTTL), int64(o.CompressAbove), int64(o.MaxCompressionRatio),
		int64(o.L1.MaxEntries), o.L1.MaxBytes, int64(o.L1.MaxAge), int64(o.FlightKeys), int64(o.FlightWaiters),
		int64(o.LoadTimeout), int64(o.SourceLoads), int64(o.SourceQueued), int64(o.LeaseTTL), int64(o.LeaseWait), int64(o.LeasePoll),
		int64(o.GenerationTrust)} {
		num(v)
	}
	str(string(o.SchemaPolicy))
	return b
}

// String summarises the policy for logs (no secrets exist in it).
func (p CacheRegionPolicy) String() string {
	return fmt.Sprintf("cache region %s rev %s (codec %s v%d, hard %s)", p.ID, p.Revision, p.Codec, p.CodecWrite, p.HardTTL)
}
