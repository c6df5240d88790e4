package host

import (
	"context"
	"fmt"

	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// readinessOptions are the startup-handshake options of New.
type readinessOptions struct {
	handshake bool
	// startup overrides redis.startup field by field (zero: the
	// configuration's value).
	startup policy.StartupPolicy
}

// WithStartupHandshake makes the host prove each Redis deployment before
// readiness can be UP for the roles on it: New starts the ordered startup
// handshake of reference §8.5 (auth, topology, version, cluster coverage,
// programs and digests, an ephemeral write/read, eviction and persistence
// attestation; runtime.Runtime.ProbeDeployment) for every selected
// deployment. Until a deployment passes, its required roles are DOWN and
// its optional roles DEGRADED; a failed attempt is retried with the
// backoff of redis.startup. When redis.startup.on-failure is
// fail-on-misconfiguration or fail, New waits for the first attempt of
// every deployment serving a required role and fails with a
// *health.HandshakeError (errors.Is health.ErrHandshake) when the policy
// ends startup; a later such failure arrives on StartupFailed. Without this
// option readiness rests on the live check alone. `caphost serve` always
// sets it.
func WithStartupHandshake() Option {
	return func(o *options) { o.ready.handshake = true }
}

// WithStartupPolicy overrides redis.startup for an embedder (each non-zero
// field of p replaces the configuration's) and implies
// WithStartupHandshake.
func WithStartupPolicy(p policy.StartupPolicy) Option {
	return func(o *options) {
		o.ready.handshake = true
		o.ready.startup = p
	}
}

// startupPolicy is redis.startup with the embedder's overrides.
func (h *Host) startupPolicy() policy.StartupPolicy {
	p, o := h.cfg.Redis.Startup, h.ready.startup
	if o.OnFailure != "" {
		p.OnFailure = o.OnFailure
	}
	if o.RetryInitial != 0 {
		p.RetryInitial = o.RetryInitial
	}
	if o.RetryMax != 0 {
		p.RetryMax = o.RetryMax
	}
	if o.AttemptTimeout != 0 {
		p.AttemptTimeout = o.AttemptTimeout
	}
	return p.WithDefaults()
}

// newChecker builds the readiness checker of rt.
func (h *Host) newChecker(rt *runtime.Runtime) *health.Checker {
	return health.NewChecker(health.RuntimeSource(rt), h.cfg.Redis, health.Options{
		Handshake: h.ready.handshake, Startup: h.startupPolicy(), Log: h.log,
	})
}

// startHandshake starts the startup handshake (with WithStartupHandshake)
// and, when the startup policy can end startup, waits for the first
// attempt of every deployment serving a required role.
func (h *Host) startHandshake(ctx context.Context) error {
	if h.checker == nil || !h.ready.handshake {
		return nil
	}
	p := h.startupPolicy()
	if err := p.Validate(); err != nil {
		return fmt.Errorf("caphost: startup policy: %w", err)
	}
	h.checker.Start(ctx)
	if p.OnFailure == policy.StartupRetry {
		return nil
	}
	if err := h.checker.AwaitFirstHandshake(ctx); err != nil {
		return fmt.Errorf("caphost: %w", err)
	}
	return nil
}

// stopHandshake ends the handshake loops before the runtime closes.
func (h *Host) stopHandshake() {
	if h.checker != nil {
		h.checker.Stop()
	}
}

// StartupFailed receives, at most once, the *health.HandshakeError that
// ended startup after New returned: with fail-on-misconfiguration, a
// deployment first unreachable and then found misconfigured before it ever
// passed. The daemon exits on it. Without WithStartupHandshake, or with
// no Redis role, it never fires.
func (h *Host) StartupFailed() <-chan error {
	if h.checker == nil {
		return nil
	}
	return h.checker.Fatal()
}
