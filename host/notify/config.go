package notify

import (
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/caphost/caphost/host/notify/dispatch"
	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/host/notify/seal"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/strict"
)

// ProviderRedis is the notify capability's only provider.
const ProviderRedis = "redis"

const capPath = "capabilities.notify"

// Bounds of the block.
const (
	// MaxTransports bounds the configured transports (each one a process).
	MaxTransports = 8
	// MaxRoutes bounds the routes of one channel.
	MaxRoutes = 32
	// MaxRouteBytes bounds a route name.
	MaxRouteBytes = 64
	// DefaultRoute is the route a request without one takes.
	DefaultRoute = "default"
)

// Rules of the notify block's values (the shape rules are policy's:
// config.unknown-key, config.type, capability.provider, capability.role).
const (
	// RuleBounds: a number or duration out of its bounds.
	RuleBounds policy.Rule = "notify.bounds"
	// RuleTransport: a transport's name, binary, sha256 or settings.
	RuleTransport policy.Rule = "notify.transport"
	// RuleRoute: a route's channel, name or transports.
	RuleRoute policy.Rule = "notify.route"
	// RuleRenderer: renderers or default-locale.
	RuleRenderer policy.Rule = "notify.renderer"
	// RuleEncryption: intents.encryption (key versions, write version).
	RuleEncryption policy.Rule = "notify.encryption"
)

// Rules lists the notify block's own rules.
func Rules() []policy.Rule {
	return []policy.Rule{RuleBounds, RuleTransport, RuleRoute, RuleRenderer, RuleEncryption}
}

// Config is the decoded capabilities.notify block.
type Config struct {
	// Role is the Redis role of the intents (coordination by default).
	Role policy.Role
	// Renderers names the renderer modules in search order; empty: every
	// loaded module of kind renderer, sorted.
	Renderers []string
	// DefaultLocale is the last step of the locale fallback ("" none).
	DefaultLocale string
	// Intents configures the durable store (its Role is Role).
	Intents intent.Config
	// Dispatch configures the worker (Consumer "" takes the process's
	// default, Transports are the launched plugins).
	Dispatch dispatch.Config
	// DispatchDisabled: this process submits and answers lookups but
	// consumes nothing (another replica dispatches).
	DispatchDisabled bool
	// Transports are the go-plugin transports, by name.
	Transports map[string]TransportConfig
	// Routes maps a channel and a route name to the transports tried.
	Routes map[render.Channel]map[string]Route
}

// TransportConfig is one configured transport plugin.
type TransportConfig struct {
	// Binary is the plugin's path, absolute or relative to the
	// configuration file's directory (resolved by Decode).
	Binary string
	// SHA256 is the binary's pinned digest (64 lower-case hex digits).
	SHA256 string
	// CallTimeout bounds one delivery call (0: the transport default).
	CallTimeout time.Duration
	// Settings are the plugin's own settings; Secrets those given as
	// secret references (sent to the plugin over its wire, never logged).
	Settings map[string]string
	Secrets  map[string]policy.Secret
}

// Route is where one channel's route sends.
type Route struct {
	// Transports are transport names, primary first, then fallbacks.
	Transports []string
	// BestEffort allows best-effort sends on the route; without it the
	// route is durable only (a critical notification never takes the
	// fail-open path by accident).
	BestEffort bool
}

// route returns the route named name of channel c.
func (c *Config) route(ch render.Channel, name string) (Route, bool) {
	r, ok := c.Routes[ch][name]
	return r, ok
}

// Decode decodes the capabilities.notify block strictly: unknown keys,
// wrong types and bad values fail, every problem at once as a
// *policy.ValidationError. role is the block's redis-role ("" defaults to
// coordination; the evictable cache role is refused: an evicted intent is
// a lost notification). dir resolves relative transport binaries.
//
// Keys (besides provider and redis-role):
//   - renderers: renderer modules in search order (default: all loaded);
//   - default-locale: the last locale fallback (a language tag);
//   - intents: shards (1..256, default 4), retention (1ms..720h, default
//     168h), max-len (default 100000), quarantine-max-len (default 10000),
//     encryption {write-version, versions: {N: secret reference of 32..1024
//     bytes}, accept-plaintext} (plans sealed at rest, see package seal);
//   - dispatch: enabled (default true), consumer, concurrency (1..1024),
//     min-idle, reclaim-every, max-deliveries, attempts-per-transport,
//     backoff {base, cap}, call-timeout — the dispatch package's bounds;
//   - transports (required, 1..8): name → {binary, sha256, call-timeout,
//     settings}, settings values strings or secret references;
//   - routes (required): channel (email, text, slack, csv) → route name →
//     {transports: [primary, fallbacks...] (1..4 configured transports),
//     best-effort: bool}.
func Decode(provider string, role policy.Role, raw map[string]any, dir string) (Config, error) {
	d := &strict.Reader{}
	cfg := Config{Role: role, Transports: map[string]TransportConfig{}, Routes: map[render.Channel]map[string]Route{}}
	if cfg.Role == "" {
		cfg.Role = policy.RoleCoordination
	}
	if provider != ProviderRedis {
		d.Add(capPath+".provider", policy.RuleCapabilityProvider, "the notify capability needs provider redis")
	}
	if !cfg.Role.Correctness() {
		d.Add(capPath+".redis-role", policy.RuleCapabilityRole,
			"durable intents need a correctness role (coordination or session): an evicted intent is a lost notification")
	}
	d.Known(capPath, raw, "renderers", "default-locale", "intents", "dispatch", "transports", "routes")
	if rs, ok := d.StrList(capPath+".renderers", raw["renderers"]); ok {
		if len(rs) == 0 {
			d.Add(capPath+".renderers", RuleRenderer, "an empty list renders nothing; omit the key to use every renderer module")
		}
		for i, r := range rs {
			if slices.Contains(rs[:i], r) {
				d.Add(strict.Join(capPath+".renderers", strconv.Itoa(i)), RuleRenderer, "listed twice")
			}
		}
		cfg.Renderers = rs
	}
	if v, ok := d.Str(capPath+".default-locale", raw["default-locale"]); ok {
		if !render.ValidLocale(v) {
			d.Add(capPath+".default-locale", RuleRenderer, "must be a language tag (en, de-AT)")
		}
		cfg.DefaultLocale = v
	}
	decodeIntents(d, raw["intents"], &cfg.Intents)
	cfg.DispatchDisabled = decodeDispatch(d, raw["dispatch"], &cfg.Dispatch)
	decodeTransports(d, raw["transports"], dir, cfg.Transports)
	decodeRoutes(d, raw["routes"], cfg.Transports, cfg.Routes)
	if err := d.Problems.Err(); err != nil {
		return Config{}, err
	}
	cfg.Intents.Role = cfg.Role
	return cfg, nil
}

func decodeIntents(d *strict.Reader, v any, out *intent.Config) {
	p := capPath + ".intents"
	m, ok := d.Object(p, v)
	if !ok {
		return
	}
	d.Known(p, m, "shards", "retention", "max-len", "quarantine-max-len", "encryption")
	if n, ok := d.Int64In(p+".shards", m["shards"], 1, 256); ok {
		out.Shards = int(n)
	}
	if r, ok := d.Duration(p+".retention", m["retention"]); ok {
		if r < time.Millisecond || r > intent.MaxRetention || r%time.Millisecond != 0 {
			d.Add(p+".retention", RuleBounds, "must be whole milliseconds within 1ms..%s", intent.MaxRetention)
		}
		out.Retention = r
	}
	if n, ok := d.Int64In(p+".max-len", m["max-len"], 1, 1<<40); ok {
		out.MaxLen = n
	}
	if n, ok := d.Int64In(p+".quarantine-max-len", m["quarantine-max-len"], 1, 1<<40); ok {
		out.QuarantineMaxLen = n
	}
	decodeEncryption(d, m["encryption"], out)
}

// decodeEncryption reads intents.encryption: {write-version, versions:
// {N: secret reference}, accept-plaintext} and builds the seal ring.
func decodeEncryption(d *strict.Reader, v any, out *intent.Config) {
	p := capPath + ".intents.encryption"
	m, ok := d.Object(p, v)
	if !ok {
		return
	}
	d.Known(p, m, "write-version", "versions", "accept-plaintext")
	cfg := seal.Config{Versions: map[int]policy.Secret{}}
	write, hasWrite := d.Int64In(p+".write-version", m["write-version"], 1, seal.MaxVersion)
	if !hasWrite && m["write-version"] == nil {
		d.Add(p+".write-version", RuleEncryption, "required: the key version new plans are sealed with")
	}
	cfg.WriteVersion = int(write)
	vs, ok := d.Object(p+".versions", m["versions"])
	switch {
	case !ok && m["versions"] == nil:
		d.Add(p+".versions", RuleEncryption, "required: key version → secret reference")
	case ok && (len(vs) == 0 || len(vs) > seal.MaxVersions):
		d.Add(p+".versions", RuleEncryption, "must hold 1..%d key versions", seal.MaxVersions)
	}
	names := make([]string, 0, len(vs))
	for k := range vs {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		vp := strict.Join(p+".versions", k)
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 || n > seal.MaxVersion || strconv.Itoa(n) != k {
			d.Add(vp, RuleEncryption, "a key version is a decimal number within 1..%d", seal.MaxVersion)
			continue
		}
		s, ok := d.Secret(vp, vs[k])
		if !ok {
			continue
		}
		if s.Len() < seal.MinMaterialBytes || s.Len() > seal.MaxMaterialBytes {
			d.Add(vp, RuleEncryption, "key material must be %d..%d bytes", seal.MinMaterialBytes, seal.MaxMaterialBytes)
			continue
		}
		cfg.Versions[n] = s
	}
	if hasWrite && ok && len(vs) > 0 {
		if _, listed := vs[strconv.Itoa(int(write))]; !listed {
			d.Add(p+".write-version", RuleEncryption, "version %d is not among versions", write)
		}
	}
	if b, ok := d.Bool(p+".accept-plaintext", m["accept-plaintext"]); ok {
		out.AcceptPlaintext = b
	}
	if d.Problems.Err() != nil {
		return
	}
	ring, err := seal.New(cfg)
	if err != nil {
		d.Add(p, RuleEncryption, "%v", err)
		return
	}
	out.Seal = ring
}

// decodeDispatch reads the dispatch block and reports whether dispatch is
// disabled in this process.
func decodeDispatch(d *strict.Reader, v any, out *dispatch.Config) bool {
	p := capPath + ".dispatch"
	m, ok := d.Object(p, v)
	if !ok {
		return false
	}
	d.Known(p, m, "enabled", "consumer", "concurrency", "min-idle", "reclaim-every", "max-deliveries",
		"attempts-per-transport", "backoff", "call-timeout")
	disabled := false
	if b, ok := d.Bool(p+".enabled", m["enabled"]); ok {
		disabled = !b
	}
	if s, ok := d.Str(p+".consumer", m["consumer"]); ok {
		if !validConsumer(s) {
			d.Add(p+".consumer", RuleBounds, "must be 1..64 bytes of [A-Za-z0-9._-], unique per process")
		}
		out.Consumer = s
	}
	if n, ok := d.Int64In(p+".concurrency", m["concurrency"], 1, 1024); ok {
		out.Concurrency = int(n)
	}
	if n, ok := d.Int64In(p+".max-deliveries", m["max-deliveries"], 2, 1000); ok {
		out.MaxDeliveries = n
	}
	if n, ok := d.Int64In(p+".attempts-per-transport", m["attempts-per-transport"], 1, 100); ok {
		out.AttemptsPerTransport = int(n)
	}
	dur := func(path string, v any, into *time.Duration) {
		if x, ok := d.Duration(path, v); ok {
			if x < time.Millisecond || x > 24*time.Hour {
				d.Add(path, RuleBounds, "must be within 1ms..24h")
			}
			*into = x
		}
	}
	dur(p+".min-idle", m["min-idle"], &out.MinIdle)
	dur(p+".reclaim-every", m["reclaim-every"], &out.ReclaimEvery)
	dur(p+".call-timeout", m["call-timeout"], &out.CallTimeout)
	if b, ok := d.Object(p+".backoff", m["backoff"]); ok {
		d.Known(p+".backoff", b, "base", "cap")
		dur(p+".backoff.base", b["base"], &out.Base)
		dur(p+".backoff.cap", b["cap"], &out.Cap)
	}
	// The dispatcher's cross-field rules, on the values it will run with,
	// so `caphost check` reports them.
	or := func(v, def time.Duration) time.Duration {
		if v == 0 {
			return def
		}
		return v
	}
	base, capD := or(out.Base, dispatch.DefaultBase), or(out.Cap, dispatch.DefaultCap)
	idle, call := or(out.MinIdle, dispatch.DefaultMinIdle), or(out.CallTimeout, dispatch.DefaultCallTimeout)
	if capD < base {
		d.Add(p+".backoff.cap", RuleBounds, "must be at least backoff.base (%s)", base)
	}
	if idle <= capD+call {
		d.Add(p+".min-idle", RuleBounds, "must exceed backoff.cap + call-timeout (%s), or a live consumer's entry is reclaimed during its backoff", capD+call)
	}
	if out.ReclaimEvery > idle/2 {
		d.Add(p+".reclaim-every", RuleBounds, "must be at most min-idle / 2 (%s)", idle/2)
	}
	return disabled
}

func decodeTransports(d *strict.Reader, v any, dir string, out map[string]TransportConfig) {
	p := capPath + ".transports"
	m, ok := d.Object(p, v)
	if !ok {
		if v == nil {
			d.Add(p, RuleTransport, "required: at least one transport plugin")
		}
		return
	}
	switch {
	case len(m) == 0:
		d.Add(p, RuleTransport, "required: at least one transport plugin")
	case len(m) > MaxTransports:
		d.Add(p, RuleTransport, "at most %d transports", MaxTransports)
	}
	for _, name := range sortedKeys(m) {
		tp := strict.Join(p, name)
		if !transport.ValidName(name) {
			d.Add(p+".<name>", RuleTransport, "a transport name is 1..32 bytes of [a-z0-9-]")
			continue
		}
		t, ok := d.Object(tp, m[name])
		if !ok {
			continue
		}
		d.Known(tp, t, "binary", "sha256", "call-timeout", "settings")
		var tc TransportConfig
		if b, ok := d.Str(tp+".binary", t["binary"]); ok {
			if b == "" {
				d.Add(tp+".binary", RuleTransport, "must name the plugin binary")
			} else if !filepath.IsAbs(b) {
				b = filepath.Join(dir, b)
			}
			tc.Binary = b
		} else if t["binary"] == nil {
			d.Add(tp+".binary", RuleTransport, "required: the plugin binary (make transports builds build/transports/<name>)")
		}
		if s, ok := d.Str(tp+".sha256", t["sha256"]); ok {
			if !validSHA256(s) {
				d.Add(tp+".sha256", RuleTransport, "must be 64 lower-case hex digits (sha256sum of the binary)")
			}
			tc.SHA256 = s
		} else if t["sha256"] == nil {
			d.Add(tp+".sha256", RuleTransport, "required: go-plugin checks the binary against it before every launch")
		}
		if x, ok := d.Duration(tp+".call-timeout", t["call-timeout"]); ok {
			if x < time.Millisecond || x > 10*time.Minute {
				d.Add(tp+".call-timeout", RuleBounds, "must be within 1ms..10m")
			}
			tc.CallTimeout = x
		}
		tc.Settings, tc.Secrets = decodeSettings(d, tp+".settings", t["settings"])
		out[name] = tc
	}
}

func decodeSettings(d *strict.Reader, p string, v any) (map[string]string, map[string]policy.Secret) {
	m, ok := d.Object(p, v)
	if !ok {
		return nil, nil
	}
	plain, secret := map[string]string{}, map[string]policy.Secret{}
	check := map[string]string{}
	for _, k := range sortedKeys(m) {
		switch x := m[k].(type) {
		case policy.Secret:
			secret[k] = x
			check[k] = string(x.Reveal())
		default:
			if s, ok := d.Str(strict.Join(p, k), x); ok {
				plain[k] = s
				check[k] = s
			}
		}
	}
	// The plugin's own bounds, checked here so `caphost check` reports
	// them; the error names a key at most, never a value.
	if err := transport.ValidateSettings(check); err != nil {
		d.Add(p, RuleTransport, "%v", err)
	}
	clear(check)
	return plain, secret
}

func decodeRoutes(d *strict.Reader, v any, transports map[string]TransportConfig, out map[render.Channel]map[string]Route) {
	p := capPath + ".routes"
	m, ok := d.Object(p, v)
	if !ok {
		if v == nil {
			d.Add(p, RuleRoute, "required: channel → route → transports")
		}
		return
	}
	if len(m) == 0 {
		d.Add(p, RuleRoute, "required: channel → route → transports")
	}
	for _, chName := range sortedKeys(m) {
		cp := strict.Join(p, chName)
		ch := render.Channel(chName)
		if !ch.Valid() {
			d.Add(p+".<channel>", RuleRoute, "a channel is one of email, text, slack, csv")
			continue
		}
		rs, ok := d.Object(cp, m[chName])
		if !ok {
			continue
		}
		switch {
		case len(rs) == 0:
			d.Add(cp, RuleRoute, "a channel needs at least one route")
		case len(rs) > MaxRoutes:
			d.Add(cp, RuleRoute, "at most %d routes per channel", MaxRoutes)
		}
		routes := map[string]Route{}
		for _, name := range sortedKeys(rs) {
			rp := strict.Join(cp, name)
			if !validRouteName(name) {
				d.Add(cp+".<route>", RuleRoute, "a route name is 1..64 bytes of [a-z0-9-]")
				continue
			}
			r, ok := d.Object(rp, rs[name])
			if !ok {
				continue
			}
			d.Known(rp, r, "transports", "best-effort")
			var route Route
			if b, ok := d.Bool(rp+".best-effort", r["best-effort"]); ok {
				route.BestEffort = b
			}
			ts, ok := d.StrList(rp+".transports", r["transports"])
			switch {
			case !ok && r["transports"] == nil:
				d.Add(rp+".transports", RuleRoute, "required: primary transport first, then fallbacks")
			case ok && (len(ts) == 0 || len(ts) > intent.MaxTransports):
				d.Add(rp+".transports", RuleRoute, "1..%d transports", intent.MaxTransports)
			}
			for i, t := range ts {
				tp := strict.Join(rp+".transports", strconv.Itoa(i))
				switch _, known := transports[t]; {
				case !known:
					d.Add(tp, RuleRoute, "not a configured transport")
				case slices.Contains(ts[:i], t):
					d.Add(tp, RuleRoute, "listed twice")
				}
			}
			route.Transports = ts
			routes[name] = route
		}
		out[ch] = routes
	}
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func validRouteName(s string) bool {
	if len(s) == 0 || len(s) > MaxRouteBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func validConsumer(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
