package lease

import (
	"context"
	_ "embed" // the capability card
	"errors"
	"fmt"
	"net/http"

	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/policy"
)

// CapabilityID is the lease capability's id and configuration block name
// (capabilities.lease).
const CapabilityID = "lease"

// Readiness is the level this implementation claims: R1. The protocol is
// proven against a real standalone redis-server (outcomes, lost replies
// through a stalling proxy, the watchdog, the sidecar and its hostile
// input) and across a kill -9 failover on real Sentinel and Cluster
// deployments (failover_test.go: a replicated lease survives, an
// unreplicated one is double-held until the first holder's renew answers
// LOST). R2 still needs a rehearsed runbook (card.md, item 2).
const Readiness = capability.R1

// Implementation names the implementation in the descriptor.
const Implementation = "redis-efficiency-lease-v1"

//go:embed card.md
var card []byte

// example is a minimal valid capabilities.lease block.
const example = `provider: redis
redis-role: coordination
max-ttl: 5m
purposes: [nightly-cleanup]
`

// CapabilityInfo registers the lease capability with the host.
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

// capabilityModule is the lease capability's module lifecycle: one Client
// on the configured role and its stateless sidecar.
type capabilityModule struct {
	cfg          Config
	roleRequired bool
	client       *Client
	side         *Sidecar
}

// Decode implements module.Module.
func (m *capabilityModule) Decode(b module.Block, ps *policy.Problems) {
	cfg, err := Decode(b.Provider, b.Role, b.Raw)
	b.AddDecodeError(ps, err)
	m.cfg = cfg
	m.cfg.Role = b.RoleOr(cfg.Role, policy.RoleCoordination)
	m.roleRequired = b.RoleRequired
}

// Descriptor implements module.Module.
func (m *capabilityModule) Descriptor() capability.Descriptor {
	return capability.Descriptor{
		Capability: CapabilityID,
		Provider:   ProviderRedis,
		Readiness:  Readiness,
		Guarantees: []capability.Guarantee{
			capability.GuaranteeEfficiencyOnly, capability.GuaranteeOwnerChecked,
			capability.GuaranteeLocalValidity, capability.GuaranteeTypedOutcome,
		},
		NonGuarantees: []capability.NonGuarantee{
			capability.NonGuaranteeStrictCoordination, capability.NonGuaranteeExactAcrossFailover,
			capability.NonGuaranteeFairness,
		},
		FailureMode:    capability.FailClosed,
		MultiInstance:  true,
		Role:           m.cfg.Role,
		Impact:         module.Impact(m.roleRequired),
		Implementation: Implementation,
	}
}

// Provision implements module.Module: the client on the role's deployment
// (its metrics on the host's registry) and the sidecar.
func (m *capabilityModule) Provision(_ context.Context, env module.Env) error {
	if env.Runtime == nil {
		return errors.New("lease: no Redis runtime")
	}
	c, err := New(env.Runtime, m.cfg, WithLogger(env.Log), WithRegisterer(env.Registerer))
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	m.client = c
	m.side = NewSidecar(c)
	return nil
}

// Validate implements module.Module: nothing beyond what Decode and New
// checked (no guest plugs into leases).
func (m *capabilityModule) Validate(context.Context) error { return nil }

// Routes implements module.Module.
func (m *capabilityModule) Routes() map[string]http.Handler {
	if m.side == nil {
		return nil
	}
	return m.side.Routes()
}

// Guests implements module.Module: no guest kind plugs into leases.
func (m *capabilityModule) Guests() []string { return nil }

// Close implements module.Module.
func (m *capabilityModule) Close(ctx context.Context) error {
	if m.client == nil {
		return nil
	}
	return m.client.Close(ctx)
}

// Client returns the provisioned client (nil before Provision).
func (m *capabilityModule) Client() *Client { return m.client }
