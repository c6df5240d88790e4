package ratelimit

import (
	"context"
	_ "embed" // the capability card
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/internal/module"
	hostmetrics "github.com/caphost/caphost/host/metrics"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
)

// CapabilityID is the rate-limit capability's id and configuration block
// name (capabilities.rate-limit).
const CapabilityID = "rate-limit"

// Readiness is the readiness level this implementation claims: the
// production baseline (real provider, failure semantics, health, metrics,
// security and lifecycle proven against real Redis; see the card). Not R3:
// no rolling-upgrade or capacity runbook has been rehearsed. Failover
// recovery is bounded and measured (bench/cmd/failover, kill -9 under
// caphost serve): every decision is evaluated again within about 15 ms of
// Sentinel's +switch-master and within 0.2 s of a Cluster replica's
// promotion, with no over-admission on loopback; what asynchronous
// replication can still lose (exact-across-failover) is in
// docs/replication.md.
const Readiness = capability.R2

// Implementation names the implementation in the descriptor.
const Implementation = "redis-rate-limit-v2"

//go:embed card.md
var card []byte

// example is a minimal valid capabilities.rate-limit block.
const example = `provider: redis
redis-role: coordination
policies:
  login:
    revision: r1
    algorithm: fixed-window
    limit: 10
    window: 1m
    failure-mode: fail-closed
    subject: [client-ip]
`

// CapabilityInfo registers the rate-limit capability (fixed-window,
// sliding-counter, token-bucket, GCRA, sliding-log policies and the
// concurrency-permit port over the same policy set) with the host.
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

// SidecarPatterns lists the sidecar API's ServeMux patterns.
func SidecarPatterns() []string {
	return []string{PatternEvaluate, PatternAcquire, PatternRenew, PatternRelease}
}

// capabilityModule is the rate-limit capability's module lifecycle. The
// policy set is the configured policies plus those declared by the
// rate-policy guests, compiled together (duplicate ids fail). With a
// rate-policy guest the guest selects; otherwise the configured routes do.
type capabilityModule struct {
	cfg          Config
	roleRequired bool

	log     *slog.Logger
	lim     *Limiter
	conc    *ConcurrencyLimiter
	sel     Selector
	side    *Sidecar
	guests  module.Guests
	mods    []string
	reloads *hostmetrics.RatePolicyReloads

	// mu serialises policy-set rebuilds so two swaps cannot install sets
	// out of order.
	mu sync.Mutex
}

// Decode implements module.Module. With guest modules configured the block
// may omit its own policies (the guests may declare them; Validate checks
// that some policy exists once they are loaded).
func (m *capabilityModule) Decode(b module.Block, ps *policy.Problems) {
	raw := b.Raw
	if _, ok := raw["policies"]; !ok && len(b.GuestModules) > 0 {
		raw = maps.Clone(raw)
		if raw == nil {
			raw = map[string]any{}
		}
		raw["policies"] = map[string]any{}
	}
	cfg, err := Decode(b.Provider, b.Role, raw)
	b.AddDecodeError(ps, err)
	m.cfg = cfg
	m.cfg.RedisRole = b.Role
	if m.cfg.RedisRole == "" {
		m.cfg.RedisRole = policy.RoleCoordination
	}
	m.roleRequired = b.RoleRequired
}

// Descriptor implements module.Module.
func (m *capabilityModule) Descriptor() capability.Descriptor {
	return capability.Descriptor{
		Capability: CapabilityID,
		Provider:   ProviderRedis,
		Readiness:  Readiness,
		Guarantees: []capability.Guarantee{
			capability.GuaranteeGlobalQuota, capability.GuaranteeDenialConsumesNothing,
			capability.GuaranteeTypedOutcome, capability.GuaranteeEvaluationDedup,
			capability.GuaranteeBoundedPermits,
		},
		NonGuarantees: []capability.NonGuarantee{
			capability.NonGuaranteeExactAcrossFailover, capability.NonGuaranteeGlobalLocalEmergency,
			capability.NonGuaranteeFairness, capability.NonGuaranteeStrictCoordination,
			capability.NonGuaranteeClockIndependence,
		},
		FailureMode:      capability.FailClosed,
		FailureOverrides: []capability.FailureMode{capability.FailLocalEmergency, capability.FailOpen},
		MultiInstance:    true,
		Role:             m.cfg.RedisRole,
		Impact:           module.Impact(m.roleRequired),
		GuestKinds:       []string{string(abi.KindRatePolicy)},
		Implementation:   Implementation,
	}
}

// Provision implements module.Module: the limiter and the concurrency
// limiter on the runtime, the selector, and the swap hook of rate-policy
// guests.
func (m *capabilityModule) Provision(ctx context.Context, env module.Env) error {
	m.log = env.Log
	if env.Runtime == nil {
		return errors.New("rate-limit: no Redis runtime")
	}
	m.guests = env.Guests
	if m.guests != nil {
		m.mods = m.guests.ModulesOfKind(abi.KindRatePolicy)
	}
	decls, err := m.guestDecls(ctx, "", nil)
	if err != nil {
		return err
	}
	set, err := m.cfg.CompileWithGuests(decls)
	if err != nil {
		return err
	}
	if m.lim, err = New(env.Runtime, m.cfg, set, WithLogger(env.Log), WithRegisterer(env.Registerer)); err != nil {
		return err
	}
	if m.conc, err = NewConcurrencyLimiter(m.lim, WithLogger(env.Log), WithRegisterer(env.Registerer)); err != nil {
		return err
	}
	if m.reloads, err = hostmetrics.NewRatePolicyReloads(env.Registerer); err != nil {
		return err
	}
	if len(m.mods) == 0 {
		m.sel = NewStaticSelector(m.cfg.Routes)
	} else {
		if len(m.cfg.Routes) > 0 {
			env.Log.Warn("rate-limit routes are ignored: a rate-policy guest selects policies", "guests", m.mods)
		}
		m.sel = NewGuestSelector(m.guests.Manager(), m.mods...)
		m.guests.Hook(abi.KindRatePolicy, module.GuestHook{Check: m.checkCandidate, Swapped: m.reload})
	}
	m.side = NewSidecar(m.lim, m.sel, m.conc, SidecarOptions{Log: env.Log, Headers: m.cfg.Headers})
	return nil
}

// Validate implements module.Module: a limiter with no policy at all would
// limit nothing while looking configured.
func (m *capabilityModule) Validate(context.Context) error {
	if m.lim.Policies().Len() == 0 {
		return fmt.Errorf("rate-limit: no rate policy: configure %s.policies or load a rate-policy guest that declares some", capPath)
	}
	return nil
}

// Routes implements module.Module: the sidecar API.
func (m *capabilityModule) Routes() map[string]http.Handler { return m.side.Routes() }

// Guests implements module.Module.
func (m *capabilityModule) Guests() []string { return slices.Clone(m.mods) }

// Close implements module.Module. The limiter holds no goroutine or
// connection of its own (the runtime owns the clients and closes them).
func (m *capabilityModule) Close(context.Context) error { return nil }

// Limiter returns the provisioned limiter (nil before Provision).
func (m *capabilityModule) Limiter() *Limiter { return m.lim }

// Selector returns the provisioned selector (nil before Provision).
func (m *capabilityModule) Selector() Selector { return m.sel }

// ConcurrencyLimiter returns the provisioned concurrency limiter.
func (m *capabilityModule) ConcurrencyLimiter() *ConcurrencyLimiter { return m.conc }

// guestDecls collects the declared policies of every rate-policy guest from
// its serving generation; for module `candidate`, decls (the candidate's)
// are used instead.
func (m *capabilityModule) guestDecls(ctx context.Context, candidate string, decls []policy.RatePolicyDecl) (map[string][]policy.RatePolicyDecl, error) {
	out := make(map[string][]policy.RatePolicyDecl, len(m.mods))
	for _, n := range m.mods {
		if n == candidate {
			out[n] = decls
			continue
		}
		err := m.guests.Manager().Use(ctx, n, func(mod plugins.Guest) error {
			out[n] = GuestPolicyDecls(mod.Description())
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("rate-policy guest %s: %w", n, err)
		}
	}
	return out, nil
}

// checkCandidate is the pre-swap check of a rate-policy guest candidate:
// its policies must compile with the configured ones and the other guests',
// and the limiter must accept the resulting set.
func (m *capabilityModule) checkCandidate(ctx context.Context, name string, d *abi.Description) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	decls, err := m.guestDecls(ctx, name, GuestPolicyDecls(d))
	if err != nil {
		return err
	}
	set, err := m.cfg.CompileWithGuests(decls)
	if err != nil {
		return err
	}
	return m.lim.CheckSwap(set)
}

// reload rebuilds the policy set from the serving generations after a
// rate-policy guest swap. The candidate's policies were checked before the
// swap, so a failure here means a concurrent change: it is logged and
// counted, and the previous set keeps serving (Limiter.Swap is atomic).
//
// Between the guest swap and this rebuild (microseconds) the new generation
// may select against the previous set: selections name policy ids only, so
// such a request is evaluated under the previous revision, or answered 503
// if it names a policy the previous set lacks — never allowed unchecked.
func (m *capabilityModule) reload(module string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	decls, err := m.guestDecls(context.Background(), "", nil)
	var set *policy.RatePolicySet
	if err == nil {
		set, err = m.cfg.CompileWithGuests(decls)
	}
	if err == nil {
		err = m.lim.Swap(set)
	}
	m.reloads.Record(err == nil)
	if err != nil {
		m.log.Error("rate policy set not rebuilt after guest swap; the previous set keeps serving", "module", module, "error", err)
		return
	}
	m.log.Info("rate policy set rebuilt after guest swap", "module", module, "policies", set.Len(), "digest", set.Digest())
}
