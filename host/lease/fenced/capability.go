package fenced

import (
	"context"
	_ "embed" // the capability card
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/strict"
	"github.com/caphost/caphost/runtime"
)

// CapabilityID is the fenced lease capability's id and configuration
// block name (capabilities.fenced-lease).
const CapabilityID = "fenced-lease"

// ProviderRedis is the capability's only provider.
const ProviderRedis = "redis"

// Readiness is the level this implementation claims: R1. The protocol is
// proven against a real standalone redis-server and a real SQL store
// (SQLite and PostgreSQL), lost replies included, and across a kill -9
// failover on Sentinel and Cluster (failover_test.go). That test shows why R2 cannot be claimed:
// a failover loses an acknowledged increment, the next acquire re-issues
// the same token, and acquisition does not fail closed — only the
// protected store's Strict watermark keeps the repeat out (card.md, 2).
const Readiness = capability.R1

// Implementation names the implementation in the descriptor.
const Implementation = "redis-fenced-lease-v1"

//go:embed card.md
var card []byte

// example is a minimal valid capabilities.fenced-lease block.
const example = `provider: redis
redis-role: coordination
max-ttl: 5m
purposes: [ledger]
`

const capPath = "capabilities." + CapabilityID

// Rules of the block's values (the shape rules are policy's).
const (
	// RuleBounds: drift-budget, max-ttl, max-wait or hard-fail-threshold
	// out of its bounds.
	RuleBounds policy.Rule = "fenced-lease.bounds"
	// RulePurposes: a purpose that is not a slug, listed twice, or more
	// than lease.MaxPurposes of them.
	RulePurposes policy.Rule = "fenced-lease.purposes"
	// RuleReplication: a replication block without acks or timeout, or
	// with either out of bounds.
	RuleReplication policy.Rule = "fenced-lease.replication"
)

// Rules lists the block's own rules.
func Rules() []policy.Rule { return []policy.Rule{RuleBounds, RulePurposes, RuleReplication} }

// Decode decodes the capabilities.fenced-lease block strictly: unknown
// keys, wrong types and bad values fail, every problem at once as a
// *policy.ValidationError. role is the block's redis-role ("" defaults to
// coordination); the evictable cache role is refused, because a fence
// counter must never be evicted (a missing counter fails every acquire
// closed until an operator reprovisions it).
//
// Keys (besides provider and redis-role): drift-budget (default 50ms,
// 1ms..10s), max-ttl (default 10m, whole milliseconds, above
// drift-budget, at most 720h), max-wait (default 10s, 0..1m),
// hard-fail-threshold (default 2^53−1: the highest counter an acquire
// issues), purposes (the closed list of purpose slugs; absent: any, the
// first 64 getting their own metric label), replication (opt-in replica
// acknowledgements: a mapping of exactly acks, 1..16, and timeout, whole
// milliseconds within 1ms..5s; absent: no WAIT is ever sent). Whether the
// timeout fits the script lane's command timeout is checked when the
// capability is provisioned (New), against the deployment it runs on.
func Decode(provider string, role policy.Role, raw map[string]any) (Config, error) {
	d := &strict.Reader{}
	cfg := Config{Role: role, DriftBudget: lease.DefaultDriftBudget, MaxTTL: lease.DefaultConfigMaxTTL,
		MaxWait: lease.DefaultConfigMaxWait, HardFailThreshold: fence.MaxCounter}
	if cfg.Role == "" {
		cfg.Role = policy.RoleCoordination
	}
	if provider != ProviderRedis {
		d.Add(capPath+".provider", policy.RuleCapabilityProvider, "the fenced lease capability needs provider redis")
	}
	if !cfg.Role.Correctness() {
		d.Add(capPath+".redis-role", policy.RuleCapabilityRole,
			"fence counters need a correctness role (coordination or session): an evicted counter stops every acquire")
	}
	d.Known(capPath, raw, "drift-budget", "max-ttl", "max-wait", "hard-fail-threshold", "purposes", "replication")
	if v, ok := d.Duration(capPath+".drift-budget", raw["drift-budget"]); ok {
		if v < lease.MinDriftBudget || v > lease.MaxDriftBudget {
			d.Add(capPath+".drift-budget", RuleBounds, "must be within %s..%s", lease.MinDriftBudget, lease.MaxDriftBudget)
		}
		cfg.DriftBudget = v
	}
	if v, ok := d.Duration(capPath+".max-ttl", raw["max-ttl"]); ok {
		if v <= 0 || v > lease.MaxTTL || v%time.Millisecond != 0 {
			d.Add(capPath+".max-ttl", RuleBounds, "must be whole milliseconds within 1ms..%s", lease.MaxTTL)
		}
		cfg.MaxTTL = v
	}
	if cfg.MaxTTL > 0 && cfg.DriftBudget >= cfg.MaxTTL {
		d.Add(capPath+".max-ttl", RuleBounds, "must exceed drift-budget (%s)", cfg.DriftBudget)
	}
	if v, ok := d.Duration(capPath+".max-wait", raw["max-wait"]); ok {
		if v < 0 || v > lease.MaxConfigWait {
			d.Add(capPath+".max-wait", RuleBounds, "must be within 0s..%s", lease.MaxConfigWait)
		}
		cfg.MaxWait = v
	}
	if _, present := raw["hard-fail-threshold"]; present {
		if v, ok := d.Int64In(capPath+".hard-fail-threshold", raw["hard-fail-threshold"], 1, fence.MaxCounter); ok {
			cfg.HardFailThreshold = v
		}
	}
	if ps, ok := d.StrList(capPath+".purposes", raw["purposes"]); ok {
		switch {
		case len(ps) == 0:
			d.Add(capPath+".purposes", RulePurposes, "an empty list allows nothing; omit the key to allow any purpose")
		case len(ps) > lease.MaxPurposes:
			d.Add(capPath+".purposes", RulePurposes, "at most %d purposes", lease.MaxPurposes)
		}
		for i, p := range ps {
			switch {
			case !lease.ValidPurpose(p):
				d.Add(strict.Join(capPath+".purposes", strconv.Itoa(i)), RulePurposes, "must be a slug of 1..64 lower-case letters, digits and '-'")
			case slices.Contains(ps[:i], p):
				d.Add(strict.Join(capPath+".purposes", strconv.Itoa(i)), RulePurposes, "listed twice")
			}
		}
		cfg.Purposes = ps
	}
	if _, present := raw["replication"]; present {
		cfg.Replication = decodeReplication(d, raw["replication"])
	}
	if err := d.Problems.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decodeReplication reads capabilities.fenced-lease.replication: both keys
// required (a block with one of them is a mistake, not a default).
func decodeReplication(d *strict.Reader, v any) Replication {
	path := capPath + ".replication"
	m, ok := d.Object(path, v)
	if !ok {
		if v == nil {
			d.Add(path, RuleReplication, "an empty block: give acks and timeout, or omit replication")
		}
		return Replication{}
	}
	d.Known(path, m, "acks", "timeout")
	var r Replication
	if m["acks"] == nil {
		d.Add(strict.Join(path, "acks"), RuleReplication, "required: the replicas that must acknowledge a grant, 1..%d", MaxAcks)
	} else if n, ok := d.Int(strict.Join(path, "acks"), m["acks"]); ok {
		if n < 1 || n > MaxAcks {
			d.Add(strict.Join(path, "acks"), RuleReplication, "must be within 1..%d", MaxAcks)
		}
		r.Acks = n
	}
	if m["timeout"] == nil {
		d.Add(strict.Join(path, "timeout"), RuleReplication, "required: how long each WAIT may block, 1ms..%s", MaxTimeout)
	} else if t, ok := d.Duration(strict.Join(path, "timeout"), m["timeout"]); ok {
		if t < time.Millisecond || t > MaxTimeout || t%time.Millisecond != 0 {
			d.Add(strict.Join(path, "timeout"), RuleReplication, "must be whole milliseconds within 1ms..%s", MaxTimeout)
		}
		r.Timeout = t
	}
	return r
}

// CapabilityInfo describes the fenced lease capability for the host's
// registration list (host/internal/builtin).
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

// capabilityModule is the capability's lifecycle: one Client on the
// configured role and its stateless sidecar.
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

// Descriptor implements module.Module. FENCED is not among the
// guarantees: it holds only where the protected resource checks the
// token, which the host cannot see (reference §23.2).
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
		FailureMode:    capability.FailAbort,
		MultiInstance:  true,
		Role:           m.cfg.Role,
		Impact:         module.Impact(m.roleRequired),
		Implementation: Implementation,
	}
}

// Provision implements module.Module.
func (m *capabilityModule) Provision(_ context.Context, env module.Env) error {
	if env.Runtime == nil {
		return errors.New("fenced-lease: no Redis runtime")
	}
	c, err := New(env.Runtime, m.cfg, WithLogger(env.Log), WithRegisterer(env.Registerer))
	if err != nil {
		return fmt.Errorf("fenced-lease: %w", err)
	}
	m.client = c
	m.side = NewSidecar(c)
	return nil
}

// ReplicaWait returns the replication profile the startup probe must
// prove on the capability's role, when one is configured. The host asks
// before its startup handshake starts (Provision would be too late for
// the first attempt), so a data user without +wait fails start-up under
// redis.startup.on-failure fail-on-misconfiguration.
func (m *capabilityModule) ReplicaWait() (runtime.ReplicaWaitProfile, bool) {
	if !m.cfg.Replication.Enabled() {
		return runtime.ReplicaWaitProfile{}, false
	}
	return m.cfg.Replication.profile(m.cfg.Role), true
}

// Validate implements module.Module: nothing beyond Decode and New.
func (m *capabilityModule) Validate(context.Context) error { return nil }

// Routes implements module.Module.
func (m *capabilityModule) Routes() map[string]http.Handler {
	if m.side == nil {
		return nil
	}
	return m.side.Routes()
}

// Guests implements module.Module: no guest kind plugs into fenced leases.
func (m *capabilityModule) Guests() []string { return nil }

// Close implements module.Module: the client holds nothing to release
// (handles are the callers').
func (m *capabilityModule) Close(context.Context) error { return nil }

// Client returns the provisioned client (nil before Provision).
func (m *capabilityModule) Client() *Client { return m.client }
