package cache

import (
	"errors"
	"sort"
	"time"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/strict"
)

// ProviderRedis is the cache's only provider.
const ProviderRedis = "redis"

const capPath = "capabilities.cache"

// Hint window bounds (see host/cache/hint).
const (
	DefaultHintWindow = 30 * time.Second
	MinHintWindow     = time.Second
	MaxHintWindow     = 10 * time.Minute
	MinHintSecret     = 32
)

// Config is the decoded capabilities.cache block.
type Config struct {
	// Role is the Redis role the regions live on (default cache).
	Role policy.Role
	// Defaults are the operational settings every region starts from.
	Defaults policy.CacheOps
	// Bounds clamp guest regions and bound configured ones.
	Bounds policy.CacheBounds
	// HintSecret authenticates the invalidation hints; required when a
	// region uses L1 or generation-trust is configured (without hints no
	// host trusts a generation). HintWindow is how old (or how far in the
	// future) an accepted hint may be.
	HintSecret policy.Secret
	HintWindow time.Duration
	// Regions are the configured regions, sorted by id.
	Regions []policy.CacheRegionDecl
}

// Decode decodes the block strictly: unknown keys, wrong types and bad
// values fail, every problem at once as a *policy.ValidationError. With
// guests the block may declare no region (cache-region guests may); a
// configured region naming a codec other than the built-in one needs a
// codec guest, which is checked once guests are loaded.
func Decode(provider string, role policy.Role, raw map[string]any, guests bool) (Config, error) {
	d := &decoder{}
	cfg := Config{Role: role, Defaults: policy.DefaultCacheOps(), Bounds: policy.DefaultCacheBounds(), HintWindow: DefaultHintWindow}
	if cfg.Role == "" {
		cfg.Role = policy.RoleCache
	}
	if provider != ProviderRedis {
		d.Problems.Add(capPath+".provider", policy.RuleCapabilityProvider, "the cache capability needs provider redis")
	}
	d.Known(capPath, raw, "defaults", "bounds", "hints", "regions")
	if m, ok := d.Object(capPath+".defaults", raw["defaults"]); ok {
		d.Known(capPath+".defaults", m, opsKeys...)
		d.ops(capPath+".defaults", m, &cfg.Defaults)
	}
	if m, ok := d.Object(capPath+".bounds", raw["bounds"]); ok {
		d.bounds(m, &cfg.Bounds)
	}
	if m, ok := d.Object(capPath+".hints", raw["hints"]); ok {
		p := capPath + ".hints"
		d.Known(p, m, "hmac", "window")
		if s, ok := d.Secret(p+".hmac", m["hmac"]); ok {
			if s.Len() < MinHintSecret {
				d.Problems.Add(p+".hmac", policy.RuleCacheHints, "the hint secret must be at least %d bytes", MinHintSecret)
			} else {
				cfg.HintSecret = s
			}
		}
		if v, ok := d.Duration(p+".window", m["window"]); ok {
			if v < MinHintWindow || v > MaxHintWindow {
				d.Problems.Add(p+".window", policy.RuleCacheHints, "must be within %s..%s", MinHintWindow, MaxHintWindow)
			}
			cfg.HintWindow = v
		}
	}
	if m, ok := d.Object(capPath+".regions", raw["regions"]); ok {
		ids := make([]string, 0, len(m))
		for id := range m {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if decl, ok := d.region(id, m[id], cfg.Defaults); ok {
				cfg.Regions = append(cfg.Regions, decl)
			}
		}
	} else if raw["regions"] == nil && !guests {
		d.Problems.Add(capPath+".regions", policy.RuleCacheCount, "at least one region is required (or a cache-region guest that declares some)")
	}
	// Region semantics are the compiler's, reported with the shape problems.
	// Codecs are known once guests load: here every named codec is taken as
	// declared when guests are configured.
	codecs := map[string]policy.CacheCodecInfo{policy.CacheBuiltinCodec: BuiltinCodecInfo()}
	if guests {
		for _, r := range cfg.Regions {
			if _, ok := codecs[r.Codec]; !ok {
				codecs[r.Codec] = policy.CacheCodecInfo{Source: "guest:?", WriteVersion: 1, Readable: []uint32{1}}
			}
		}
	}
	set, err := policy.CompileCacheRegions(cfg.Regions, cfg.compileOptions(codecs))
	var verr *policy.ValidationError
	switch {
	case errors.As(err, &verr):
		d.Problems = append(d.Problems, verr.Problems...)
	case err == nil && set.UsesL1() && cfg.HintSecret.IsZero():
		d.Problems.Add(capPath+".hints.hmac", policy.RuleCacheHints, "a region uses L1: invalidation hints need a secret (secret://env/NAME or secret://file/PATH, at least %d bytes)", MinHintSecret)
	}
	if cfg.HintSecret.IsZero() {
		for _, p := range d.trustSet {
			d.Problems.Add(p, policy.RuleCacheHints, "generation-trust applies only while invalidation hints are up: configure hints.hmac, or remove it")
		}
	}
	if err := d.Problems.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// compileOptions returns the compiler options of this configuration.
func (c Config) compileOptions(codecs map[string]policy.CacheCodecInfo) policy.CacheCompileOptions {
	return policy.CacheCompileOptions{PathPrefix: capPath + ".regions", Defaults: c.Defaults, Bounds: c.Bounds,
		Codecs: codecs, JitterStrategy: jitterStrategy}
}

type decoder struct {
	strict.Reader
	// trustSet lists where a positive generation-trust was written: it
	// needs the hints, so without a hint secret it is an error.
	trustSet []string
}

// opsKeys are the operational keys, in defaults and as region overrides.
var opsKeys = []string{"shards", "min-ttl", "incompatible-schema", "compression", "l1-limits", "single-flight", "source", "refresh-lease", "generation-trust"}

// ops reads the operational keys of m into o (keys absent keep o's value).
func (d *decoder) ops(p string, m map[string]any, o *policy.CacheOps) {
	if n, ok := d.Int64In(p+".shards", m["shards"], 1, policy.CacheMaxShards); ok {
		o.Shards = int(n)
	}
	if v, ok := d.Duration(p+".min-ttl", m["min-ttl"]); ok {
		o.MinTTL = v
	}
	if s, ok := d.Str(p+".incompatible-schema", m["incompatible-schema"]); ok {
		o.SchemaPolicy = policy.CacheSchemaPolicy(s)
	}
	if c, ok := d.Object(p+".compression", m["compression"]); ok {
		d.Known(p+".compression", c, "above", "max-ratio")
		if n, ok := d.Int64In(p+".compression.above", c["above"], 0, policy.CacheMaxValueBytes); ok {
			o.CompressAbove = int(n)
		}
		if n, ok := d.Int64In(p+".compression.max-ratio", c["max-ratio"], 1, policy.CacheMaxCompression); ok {
			o.MaxCompressionRatio = int(n)
		}
	}
	if c, ok := d.Object(p+".l1-limits", m["l1-limits"]); ok {
		d.Known(p+".l1-limits", c, "max-entries", "max-bytes", "max-age")
		if n, ok := d.Int64In(p+".l1-limits.max-entries", c["max-entries"], 1, policy.CacheMaxL1Entries); ok {
			o.L1.MaxEntries = int(n)
		}
		if n, ok := d.Int64In(p+".l1-limits.max-bytes", c["max-bytes"], 1024, policy.CacheMaxL1Bytes); ok {
			o.L1.MaxBytes = n
		}
		if v, ok := d.Duration(p+".l1-limits.max-age", c["max-age"]); ok {
			o.L1.MaxAge = v
		}
	}
	if c, ok := d.Object(p+".single-flight", m["single-flight"]); ok {
		d.Known(p+".single-flight", c, "max-keys", "max-waiters", "load-timeout")
		if n, ok := d.Int64In(p+".single-flight.max-keys", c["max-keys"], 1, policy.CacheMaxFlightKeys); ok {
			o.FlightKeys = int(n)
		}
		if n, ok := d.Int64In(p+".single-flight.max-waiters", c["max-waiters"], 1, policy.CacheMaxWaiters); ok {
			o.FlightWaiters = int(n)
		}
		if v, ok := d.Duration(p+".single-flight.load-timeout", c["load-timeout"]); ok {
			o.LoadTimeout = v
		}
	}
	if c, ok := d.Object(p+".source", m["source"]); ok {
		d.Known(p+".source", c, "max-concurrent", "max-queued")
		if n, ok := d.Int64In(p+".source.max-concurrent", c["max-concurrent"], 1, policy.CacheMaxSourceLoads); ok {
			o.SourceLoads = int(n)
		}
		if n, ok := d.Int64In(p+".source.max-queued", c["max-queued"], 0, policy.CacheMaxQueued); ok {
			o.SourceQueued = int(n)
		}
	}
	if v, ok := d.Duration(p+".generation-trust", m["generation-trust"]); ok {
		o.GenerationTrust = v
		if v > 0 {
			d.trustSet = append(d.trustSet, p+".generation-trust")
		}
	}
	if c, ok := d.Object(p+".refresh-lease", m["refresh-lease"]); ok {
		d.Known(p+".refresh-lease", c, "ttl", "wait", "poll")
		if v, ok := d.Duration(p+".refresh-lease.ttl", c["ttl"]); ok {
			o.LeaseTTL = v
		}
		if v, ok := d.Duration(p+".refresh-lease.wait", c["wait"]); ok {
			o.LeaseWait = v
		}
		if v, ok := d.Duration(p+".refresh-lease.poll", c["poll"]); ok {
			o.LeasePoll = v
		}
	}
}

func (d *decoder) bounds(m map[string]any, b *policy.CacheBounds) {
	p := capPath + ".bounds"
	d.Known(p, m, "min-hard-ttl", "max-hard-ttl", "max-negative-ttl", "max-bytes", "max-jitter", "l1")
	if v, ok := d.Duration(p+".min-hard-ttl", m["min-hard-ttl"]); ok {
		b.MinHardTTL = v
	}
	if v, ok := d.Duration(p+".max-hard-ttl", m["max-hard-ttl"]); ok {
		b.MaxHardTTL = v
	}
	if v, ok := d.Duration(p+".max-negative-ttl", m["max-negative-ttl"]); ok {
		b.MaxNegativeTTL = v
	}
	if n, ok := d.Int64In(p+".max-bytes", m["max-bytes"], 1, policy.CacheMaxValueBytes); ok {
		b.MaxBytes = int(n)
	}
	if f, ok := d.Float(p+".max-jitter", m["max-jitter"]); ok {
		b.MaxJitter = f
	}
	if v, ok := d.Bool(p+".l1", m["l1"]); ok {
		b.AllowL1 = v
	}
}

// region decodes one configured region.
func (d *decoder) region(id string, v any, defaults policy.CacheOps) (policy.CacheRegionDecl, bool) {
	p := capPath + ".regions." + id
	m, ok := d.Object(p, v)
	if !ok {
		if v == nil {
			d.Problems.Add(p, policy.RuleType, "must be a mapping, got null")
		}
		return policy.CacheRegionDecl{}, false
	}
	d.Known(p, m, append([]string{"codec", "key-version", "ttl", "jitter", "max-bytes", "stale-if-error", "l1",
		"consistency", "stampede"}, opsKeys...)...)
	decl := policy.CacheRegionDecl{ID: id, Source: "config", KeyVersion: 1, Codec: policy.CacheBuiltinCodec, MaxBytes: 64 << 10}
	if s, ok := d.Str(p+".codec", m["codec"]); ok {
		decl.Codec = s
	}
	if n, ok := d.Int64In(p+".key-version", m["key-version"], 1, policy.CacheMaxKeyVersion); ok {
		decl.KeyVersion = int(n)
	}
	if t, ok := d.Object(p+".ttl", m["ttl"]); ok {
		d.Known(p+".ttl", t, "soft", "hard", "negative")
		if v, ok := d.Duration(p+".ttl.soft", t["soft"]); ok {
			decl.SoftTTL = v
		}
		if v, ok := d.Duration(p+".ttl.hard", t["hard"]); ok {
			decl.HardTTL = v
		} else if t["hard"] == nil {
			d.Problems.Add(p+".ttl.hard", policy.RuleCacheTTL, "required")
		}
		if v, ok := d.Duration(p+".ttl.negative", t["negative"]); ok {
			decl.NegativeTTL = v
		}
	} else if m["ttl"] == nil {
		d.Problems.Add(p+".ttl", policy.RuleCacheTTL, "required: at least ttl.hard")
	}
	if f, ok := d.Float(p+".jitter", m["jitter"]); ok {
		decl.Jitter = f
	}
	if n, ok := d.Int64In(p+".max-bytes", m["max-bytes"], 1, policy.CacheMaxValueBytes); ok {
		decl.MaxBytes = int(n)
	}
	if b, ok := d.Bool(p+".stale-if-error", m["stale-if-error"]); ok {
		decl.StaleIfError = b
	}
	if b, ok := d.Bool(p+".l1", m["l1"]); ok {
		decl.L1 = b
	}
	if s, ok := d.Str(p+".consistency", m["consistency"]); ok {
		decl.Consistency = policy.CacheConsistency(s)
	}
	if s, ok := d.Str(p+".stampede", m["stampede"]); ok {
		decl.Stampede = policy.CacheStampede(s)
	}
	for _, k := range opsKeys {
		if m[k] != nil {
			ops := defaults
			d.ops(p, m, &ops)
			decl.Ops = &ops
			break
		}
	}
	if decl.Ops != nil && m["generation-trust"] != nil && decl.Ops.GenerationTrust > 0 && decl.Consistency.Strict() {
		d.Problems.Add(p+".generation-trust", policy.RuleCacheConsistency,
			"a %s region never trusts a generation (a lost invalidation hint would serve an invalidated value): remove it or set 0s", decl.Consistency)
	}
	return decl, true
}
