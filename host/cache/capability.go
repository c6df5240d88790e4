package cache

import (
	"context"
	_ "embed" // the capability card
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/policy"
)

// CapabilityID is the cache capability's id and configuration block name
// (capabilities.cache).
const CapabilityID = "cache"

// Readiness is the level this implementation claims: R2 on standalone,
// Sentinel and Cluster as card.md's item 11 tests them. Not R3: no test
// fails over a Cluster primary under the cache itself (the runtime serves
// the failed-over slots within a second of the promotion, measured by
// bench/cmd/failover, and the invalidation-hint subscription follows the
// Sentinel switch within milliseconds, TestPubSubSentinelKillFollowsTheSwitch),
// and no rolling-upgrade or capacity runbook has been rehearsed. What a
// lossy failover does to entries and invalidations is in
// docs/replication.md. Plugged codec or cache-region guests cap the
// effective readiness at their kind cards' level.
const Readiness = capability.R2

// Implementation names the implementation in the descriptor.
const Implementation = "redis-cache-regions-v1"

//go:embed card.md
var card []byte

// example is a minimal valid capabilities.cache block.
const example = `provider: redis
redis-role: cache
regions:
  products:
    ttl: {soft: 30s, hard: 5m, negative: 10s}
    jitter: 0.1
    max-bytes: 65536
`

// CapabilityInfo registers the cache capability with the host.
func CapabilityInfo() module.Info {
	return module.Info{
		ID:        CapabilityID,
		Readiness: Readiness,
		Providers: []string{ProviderRedis},
		Card:      card,
		Example:   example,
		Routes:    SidecarPatterns(),
		New:       func() module.Module { return &capabilityModule{} },
	}
}

// capabilityModule is the cache capability's module lifecycle.
type capabilityModule struct {
	cfg          Config
	roleRequired bool
	guests       module.Guests
	mods         []string
	log          *slog.Logger
	cache        *Cache
	side         *Sidecar
}

// Decode implements module.Module.
func (m *capabilityModule) Decode(b module.Block, ps *policy.Problems) {
	cfg, err := Decode(b.Provider, b.Role, b.Raw, len(b.GuestModules) > 0)
	b.AddDecodeError(ps, err)
	m.cfg = cfg
	m.cfg.Role = b.RoleOr(cfg.Role, policy.RoleCache)
	m.roleRequired = b.RoleRequired
}

// Descriptor implements module.Module.
func (m *capabilityModule) Descriptor() capability.Descriptor {
	return capability.Descriptor{
		Capability: CapabilityID,
		Provider:   ProviderRedis,
		Readiness:  Readiness,
		Guarantees: []capability.Guarantee{
			capability.GuaranteeTypedOutcome, capability.GuaranteeMissNotOutage, capability.GuaranteeGuardedWrites,
			capability.GuaranteeBoundedSourceLoad, capability.GuaranteeBoundedStaleness,
		},
		NonGuarantees: []capability.NonGuarantee{
			capability.NonGuaranteeDurability, capability.NonGuaranteeSourceAtomicity,
			capability.NonGuaranteeSingleLoader, capability.NonGuaranteeExactAcrossFailover,
		},
		FailureMode:    capability.FailOpenToSource,
		MultiInstance:  true,
		Role:           m.cfg.Role,
		Impact:         module.Impact(m.roleRequired),
		GuestKinds:     []string{string(abi.KindCodec), string(abi.KindCacheRegion)},
		Implementation: Implementation,
	}
}

// Provision implements module.Module: the cache on the role's deployment,
// its hint channel, and the swap hooks of codec and cache-region guests.
func (m *capabilityModule) Provision(ctx context.Context, env module.Env) error {
	m.log = env.Log
	if env.Runtime == nil {
		return errors.New("cache: no Redis runtime")
	}
	dep, err := env.Runtime.Role(m.cfg.Role)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	var gs Guests
	if env.Guests != nil {
		m.guests = env.Guests
		gs = env.Guests
		for _, k := range []abi.Kind{abi.KindCodec, abi.KindCacheRegion} {
			for _, n := range env.Guests.ModulesOfKind(k) {
				if !slices.Contains(m.mods, n) {
					m.mods = append(m.mods, n)
				}
			}
		}
		slices.Sort(m.mods)
	}
	m.cache, err = New(ctx, dep, env.Runtime.Keys(), m.cfg, Options{Log: env.Log, Registerer: env.Registerer, Guests: gs})
	if err != nil {
		return err
	}
	if m.guests != nil {
		hook := module.GuestHook{Check: m.cache.CheckSwap, Swapped: m.reload}
		m.guests.Hook(abi.KindCodec, hook)
		m.guests.Hook(abi.KindCacheRegion, hook)
	}
	m.side = NewSidecar(m.cache, SidecarOptions{Log: env.Log})
	return nil
}

// reload rebuilds the regions after a codec or cache-region guest swap.
// The candidate was checked before the swap; a failure here is logged and
// the previous regions keep serving.
func (m *capabilityModule) reload(mod string) {
	if err := m.cache.Reload(context.Background()); err != nil {
		m.log.Error("cache regions not rebuilt after guest swap; the previous regions keep serving", "module", mod, "error", err)
		return
	}
	m.log.Info("cache regions rebuilt after guest swap", "module", mod, "regions", len(m.cache.Regions()))
}

// Validate implements module.Module: a cache with no region caches nothing
// while looking configured.
func (m *capabilityModule) Validate(context.Context) error {
	if len(m.cache.Regions()) == 0 {
		return fmt.Errorf("cache: no region: configure %s.regions or load a cache-region guest that declares some", capPath)
	}
	return nil
}

// Routes implements module.Module.
func (m *capabilityModule) Routes() map[string]http.Handler {
	if m.side == nil {
		return nil
	}
	return m.side.Routes()
}

// Guests implements module.Module.
func (m *capabilityModule) Guests() []string { return slices.Clone(m.mods) }

// Close implements module.Module.
func (m *capabilityModule) Close(ctx context.Context) error {
	if m.cache == nil {
		return nil
	}
	return m.cache.Close(ctx)
}

// Cache returns the provisioned cache (nil before Provision).
func (m *capabilityModule) Cache() *Cache { return m.cache }
