package host

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/certainty"
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

// newChecker builds the readiness checker of rt, with its transitions
// counted in caphost_readiness_transitions_total{role,status} (status: the
// new one). The series of every selected role are created up front.
func (h *Host) newChecker(rt *runtime.Runtime) *health.Checker {
	opts := health.Options{Handshake: h.ready.handshake, Startup: h.startupPolicy(), Log: h.log}
	if tr := newTransitionCounter(h.cfg.Redis); h.treg.Register(tr) == nil {
		opts.OnTransition = tr.observe
	} else {
		// Only a second registration of the same name can fail, and each
		// host builds one checker on its own registerer.
		h.log.Warn("readiness transitions are not counted: metric already registered")
	}
	return health.NewChecker(health.RuntimeSource(rt), h.cfg.Redis, opts)
}

// transitionCounter counts role readiness transitions; its label values are
// the selected roles and the three statuses, fixed at construction.
type transitionCounter struct {
	*prometheus.CounterVec
}

func newTransitionCounter(cfg policy.RedisConfig) transitionCounter {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caphost", Subsystem: "readiness", Name: "transitions_total",
		Help: "Changes of a selected Redis role's readiness status, by role and new status (UP, DEGRADED, DOWN).",
	}, []string{"role", "status"})
	for role := range cfg.Roles {
		for _, st := range []health.Status{health.Up, health.Degraded, health.Down} {
			c.WithLabelValues(string(role), string(st))
		}
	}
	return transitionCounter{c}
}

func (c transitionCounter) observe(t health.Transition) {
	c.WithLabelValues(string(t.Role), string(t.To)).Inc()
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

// readinessTap passes the runtime's observations to the metrics and tells
// the readiness checker what each call's certainty says about reaching its
// deployment, so /readyz follows the data path (health.Checker.DataPath)
// rather than only its own probes. The checker is set once it exists;
// calls before that (the runtime's construction) only reach the metrics.
type readinessTap struct {
	runtime.Observer
	checker atomic.Pointer[health.Checker]
}

// CommandDone implements runtime.Observer. Only outcomes that prove
// something about reaching Redis count: an answer that applied, did not
// apply or conflicted reached it; a call refused before the send for lack
// of a connection, or one whose reply was lost, did not. A guard rejection
// or an admission overload says nothing about Redis.
func (t *readinessTap) CommandDone(dep string, l policy.Lane, command string, o certainty.Outcome, d time.Duration) {
	t.Observer.CommandDone(dep, l, command, o, d)
	c := t.checker.Load()
	if c == nil {
		return
	}
	switch o {
	case certainty.Applied, certainty.NotApplied, certainty.Conflict:
		c.DataPath(dep, true)
	case certainty.UnavailableBeforeSend, certainty.Indeterminate:
		c.DataPath(dep, false)
	}
}
