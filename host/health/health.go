// Package health owns caphost's liveness and readiness semantics.
//
// Liveness never touches Redis: restarting a process because Redis is slow
// only adds a reconnect storm to an outage. Readiness reflects the selected
// Redis roles: a required role (coordination, session) that cannot answer
// makes the host DOWN (not ready); an optional role (typically cache) makes it
// DEGRADED while it stays ready, because its capability has a declared
// fallback. Reports carry only bounded facts — role, deployment id,
// topology, status and a short reason — never endpoints, users or driver
// messages.
package health

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/certainty"
)

// Status is a health state.
type Status string

// Health states, from best to worst.
const (
	Up       Status = "UP"
	Degraded Status = "DEGRADED"
	Down     Status = "DOWN"
)

// RoleReport is the health of one selected role.
type RoleReport struct {
	Role       policy.Role `json:"role"`
	Deployment string      `json:"deployment"`
	Topology   string      `json:"topology"`
	Required   bool        `json:"required"`
	Status     Status      `json:"status"`
	// Reason is a bounded word: "pong", "unreachable", "overloaded",
	// "shutting-down", "rejected", "timeout".
	Reason string `json:"reason"`
}

// Report is a readiness report. Ready is false exactly when a required role
// is DOWN.
type Report struct {
	Status Status       `json:"status"`
	Ready  bool         `json:"ready"`
	Roles  []RoleReport `json:"roles"`
	// UnsafeColocation is set when a correctness role shares a deployment
	// with the cache role by explicit operator choice: the host serves, but
	// makes no correctness claim beyond that deployment's eviction policy.
	UnsafeColocation bool      `json:"unsafeColocation,omitempty"`
	CheckedAt        time.Time `json:"checkedAt"`
}

// Pinger is what readiness needs from a role's deployment.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Source resolves the deployment serving a role. *runtime.Runtime satisfies
// it through RuntimeSource.
type Source interface {
	Deployment(role policy.Role) (id string, topology string, p Pinger, err error)
}

// Checker computes readiness. Results are cached for MinInterval so that a
// burst of probes becomes one PING per role.
type Checker struct {
	src       Source
	roles     []policy.Role
	bindings  map[policy.Role]policy.RoleBinding
	unsafe    bool
	timeout   time.Duration
	minPeriod time.Duration
	now       func() time.Time

	mu   sync.Mutex
	last Report
	at   time.Time
}

// Options tune a Checker.
type Options struct {
	// Timeout bounds each role's PING (default 250ms).
	Timeout time.Duration
	// MinInterval caches a report (default 500ms; negative disables).
	MinInterval time.Duration
}

// NewChecker builds a readiness checker over the selected roles of cfg.
func NewChecker(src Source, cfg policy.RedisConfig, opt Options) *Checker {
	if opt.Timeout <= 0 {
		opt.Timeout = 250 * time.Millisecond
	}
	if opt.MinInterval == 0 {
		opt.MinInterval = 500 * time.Millisecond
	}
	var roles []policy.Role
	for _, r := range policy.Roles() {
		if _, ok := cfg.Roles[r]; ok {
			roles = append(roles, r)
		}
	}
	return &Checker{
		src: src, roles: roles, bindings: cfg.Roles,
		unsafe:  cfg.AllowUnsafeColocation && colocated(cfg),
		timeout: opt.Timeout, minPeriod: opt.MinInterval, now: time.Now,
	}
}

func colocated(cfg policy.RedisConfig) bool {
	c, ok := cfg.Roles[policy.RoleCache]
	if !ok {
		return false
	}
	for r, b := range cfg.Roles {
		if r.Correctness() && b.Deployment == c.Deployment {
			return true
		}
	}
	return false
}

// Readiness returns the current report, pinging each role concurrently.
func (c *Checker) Readiness(ctx context.Context) Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.minPeriod > 0 && !c.at.IsZero() && c.now().Sub(c.at) < c.minPeriod {
		return c.last
	}
	reports := make([]RoleReport, len(c.roles))
	var wg sync.WaitGroup
	for i, role := range c.roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i] = c.check(ctx, role)
		}()
	}
	wg.Wait()
	rep := Report{Status: Up, Ready: true, Roles: reports, UnsafeColocation: c.unsafe, CheckedAt: c.now()}
	for _, r := range reports {
		switch {
		case r.Status == Down:
			rep.Status, rep.Ready = Down, false
		case r.Status == Degraded && rep.Status == Up:
			rep.Status = Degraded
		}
	}
	c.last, c.at = rep, c.now()
	return rep
}

func (c *Checker) check(ctx context.Context, role policy.Role) RoleReport {
	b := c.bindings[role]
	rr := RoleReport{Role: role, Deployment: b.Deployment, Required: b.Required}
	id, topo, p, err := c.src.Deployment(role)
	if err == nil {
		rr.Deployment, rr.Topology = id, topo
		pctx, cancel := context.WithTimeout(ctx, c.timeout)
		err = p.Ping(pctx)
		cancel()
	}
	if err == nil {
		rr.Status, rr.Reason = Up, "pong"
		return rr
	}
	rr.Reason = reason(err)
	if b.Required {
		rr.Status = Down
	} else {
		rr.Status = Degraded
	}
	return rr
}

func reason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	switch certainty.Classify(err, false) {
	case certainty.OverloadedBeforeSend:
		return "overloaded"
	case certainty.UnavailableBeforeSend:
		if errors.Is(err, runtime.ErrLaneClosed) {
			return "shutting-down"
		}
		return "unreachable"
	case certainty.Rejected:
		return "rejected"
	case certainty.Indeterminate:
		return "timeout"
	}
	return "unreachable"
}

// RuntimeSource adapts a *runtime.Runtime to Source.
func RuntimeSource(rt *runtime.Runtime) Source { return runtimeSource{rt} }

type runtimeSource struct{ rt *runtime.Runtime }

func (s runtimeSource) Deployment(role policy.Role) (string, string, Pinger, error) {
	d, err := s.rt.Role(role)
	if err != nil {
		return "", "", nil, err
	}
	return d.ID(), string(d.Topology()), d, nil
}
