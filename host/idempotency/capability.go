package idempotency

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

// CapabilityID is the idempotency capability's id and configuration block
// name (capabilities.idempotency).
const CapabilityID = "idempotency"

// Readiness is the level this implementation claims: R1. The protocol is
// proven against a real standalone redis-server (every outcome, at most
// one run per attempt under concurrent re-entry, lost replies through a
// stalling proxy, Redis killed, the middleware and the sidecar with
// hostile input) and across a kill -9 failover on real Sentinel and
// Cluster deployments (failover_test.go: a replicated action completes
// once; a completion the promoted replica never received is lost and the
// retry runs the action again). A rehearsed runbook is missing for R2
// (card.md, item 2).
const Readiness = capability.R1

// Implementation names the implementation in the descriptor.
const Implementation = "redis-idempotency-v2"

//go:embed card.md
var card []byte

// example is a minimal valid capabilities.idempotency block.
const example = `provider: redis
redis-role: coordination
replay-ttl: 24h
routes: [create-payment]
`

// CapabilityInfo registers the idempotency capability with the host.
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

// capabilityModule is the idempotency capability's module lifecycle: one
// Executor on the configured role and its stateless sidecar.
type capabilityModule struct {
	cfg          Config
	roleRequired bool
	exec         *Executor
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
			capability.GuaranteeRequestReplay, capability.GuaranteeAtMostOncePerAttempt,
			capability.GuaranteeBoundedResponse, capability.GuaranteeTypedOutcome,
		},
		NonGuarantees: []capability.NonGuarantee{
			capability.NonGuaranteeExactlyOnceEffects, capability.NonGuaranteeExactAcrossFailover,
			capability.NonGuaranteeFairness,
		},
		FailureMode:    capability.FailClosed,
		MultiInstance:  true,
		Role:           m.cfg.Role,
		Impact:         module.Impact(m.roleRequired),
		Implementation: Implementation,
	}
}

// Provision implements module.Module: the executor on the role's
// deployment (its metrics on the host's registry; the deployment's
// budgets must admit max-response-bytes) and the sidecar.
func (m *capabilityModule) Provision(_ context.Context, env module.Env) error {
	if env.Runtime == nil {
		return errors.New("idempotency: no Redis runtime")
	}
	e, err := New(env.Runtime, m.cfg, WithLogger(env.Log), WithRegisterer(env.Registerer))
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	m.exec = e
	m.side = NewSidecar(e)
	return nil
}

// Validate implements module.Module: nothing beyond what Decode and New
// checked (no guest plugs into idempotency).
func (m *capabilityModule) Validate(context.Context) error { return nil }

// Routes implements module.Module.
func (m *capabilityModule) Routes() map[string]http.Handler {
	if m.side == nil {
		return nil
	}
	return m.side.Routes()
}

// Guests implements module.Module: no guest kind plugs into idempotency.
func (m *capabilityModule) Guests() []string { return nil }

// Close implements module.Module: the executor holds no goroutine or
// connection of its own (actions in flight end with their callers).
func (m *capabilityModule) Close(context.Context) error { return nil }

// Executor returns the provisioned executor (nil before Provision).
func (m *capabilityModule) Executor() *Executor { return m.exec }
