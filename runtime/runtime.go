package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/commands"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Observer receives runtime events. command is a catalog name or "unknown";
// every label set is bounded. Implementations must be safe for concurrent
// use and fast: they run on the command path.
type Observer interface {
	guard.Observer
	// CommandDone reports the certainty of one top-level command.
	CommandDone(deployment string, lane policy.Lane, command string, outcome certainty.Outcome, d time.Duration)
	// InFlight reports the lane's in-flight count after it changed.
	InFlight(deployment string, lane policy.Lane, n int)
	// SlotMapRefresh reports one Cluster slot-map refresh the lane's client
	// was asked for after a topology-class failure (topology.go): at most
	// one per lane every 250 ms.
	SlotMapRefresh(deployment string, lane policy.Lane)
}

type nopObserver struct{}

func (nopObserver) Admitted(policy.Lane, string)                                              {}
func (nopObserver) Rejected(policy.Lane, string, guard.Reason)                                {}
func (nopObserver) ReplyBytes(policy.Lane, int)                                               {}
func (nopObserver) CommandDone(string, policy.Lane, string, certainty.Outcome, time.Duration) {}
func (nopObserver) InFlight(string, policy.Lane, int)                                         {}
func (nopObserver) SlotMapRefresh(string, policy.Lane)                                        {}

// Option configures New.
type Option func(*options)

type options struct {
	log *slog.Logger
	obs Observer
}

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithObserver sets the observer (default: none).
func WithObserver(obs Observer) Option {
	return func(o *options) {
		if obs != nil {
			o.obs = obs
		}
	}
}

// Runtime owns every Redis client of the process. It is safe for
// concurrent use. Close is the single close authority.
type Runtime struct {
	log   *slog.Logger
	gate  *gate
	keys  *keys.Builder
	roles map[policy.Role]*Deployment
	deps  []*Deployment // sorted by id; only role-selected deployments
	// registry lists every top-level client in creation order; Close
	// closes each exactly once.
	registry []*registered
	drain    time.Duration
	subs     *subscriptions // live Pub/Sub subscriptions; Close ends them
	// progs, mode and bindings are kept for the startup probe.
	progs    *programs.Catalog
	mode     policy.ProgramMode
	bindings map[policy.Role]policy.RoleBinding
	// waits are the replica-wait profiles the probe proves (probe.go).
	waits replicaWaits

	closeOnce sync.Once
	closeErr  error

	// sentinels are the Sentinel deployments' discovery routes
	// (sentinel.go), closed after the clients.
	sentinels []*sentinelRoute
}

// registered is one client the runtime created.
type registered struct {
	deployment string
	lane       policy.Lane
	client     redis.UniversalClient
	refresh    *slotRefresher // Cluster only; stopped before the client closes
	closes     atomic.Int32
}

// New validates cfg and builds one client per lane for every deployment a
// role selects. It dials nothing: connections open on first use
// (MinIdleConns 0). Unreferenced deployments create no client at all.
func New(ctx context.Context, cfg policy.RedisConfig, opts ...Option) (*Runtime, error) {
	o := options{log: slog.Default(), obs: nopObserver{}}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(cfg.Roles) == 0 {
		return nil, fmt.Errorf("%w: no role is selected", ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	kb, err := keys.NewBuilder(keys.Config{App: cfg.Keys.App, Env: cfg.Keys.Env, Material: cfg.Keys.HMAC})
	if err != nil {
		return nil, fmt.Errorf("%w: keys: %w", ErrConfig, err)
	}
	cat, err := commands.Default()
	if err != nil {
		return nil, fmt.Errorf("command catalog: %w", err)
	}
	progs, err := programs.Load()
	if err != nil {
		return nil, fmt.Errorf("program catalog: %w", err)
	}

	r := &Runtime{log: o.log, gate: newGate(), keys: kb, roles: make(map[policy.Role]*Deployment),
		progs: progs, mode: cfg.Programs.Mode, bindings: cfg.Roles, subs: newSubscriptions()}
	byID := make(map[string]*Deployment)
	for _, role := range sortedRoles(cfg.Roles) {
		b := cfg.Roles[role]
		d, ok := byID[b.Deployment]
		if !ok {
			dc, ok := cfg.Deployments[b.Deployment]
			if !ok {
				r.closeClients()
				return nil, fmt.Errorf("%w: role %s references unknown deployment %q", ErrConfig, role, b.Deployment)
			}
			d, err = r.buildDeployment(dc, cat, progs, cfg.Programs.Mode, kb.Namespace(), o.obs)
			if err != nil {
				r.closeClients()
				return nil, err
			}
			byID[b.Deployment] = d
			r.deps = append(r.deps, d)
			if dc.Timeouts.Shutdown > r.drain {
				r.drain = dc.Timeouts.Shutdown
			}
		}
		r.roles[role] = d
	}
	sort.Slice(r.deps, func(i, j int) bool { return r.deps[i].id < r.deps[j].id })
	return r, nil
}

func sortedRoles(m map[policy.Role]policy.RoleBinding) []policy.Role {
	out := make([]policy.Role, 0, len(m))
	for _, r := range policy.Roles() {
		if _, ok := m[r]; ok {
			out = append(out, r)
		}
	}
	return out
}

func (r *Runtime) buildDeployment(dc policy.Deployment, cat *commands.Catalog, progs *programs.Catalog,
	mode policy.ProgramMode, namespace string, obs Observer) (*Deployment, error) {
	d := &Deployment{id: dc.ID, topology: dc.Topology.TopologyKind(), budgets: dc.Budgets, lanes: make(map[policy.Lane]*lane)}
	cluster := d.topology == policy.TopologyCluster
	dial := &pubsubDial{}
	rlog := &refreshLog{log: r.log}
	sen, err := newSentinelRoute(dc, r.log, obs) // nil unless Sentinel
	if err != nil {
		return nil, fmt.Errorf("%w: deployment %s: %w", ErrConfig, dc.ID, err)
	}
	if sen != nil {
		r.sentinels = append(r.sentinels, sen)
	}
	for _, l := range policy.Lanes() {
		lc := dc.Lanes[l]
		g, err := guard.New(guard.Config{
			Deployment: dc.ID, Lane: l, Catalog: cat, Namespace: namespace, Cluster: cluster,
			Budgets: dc.Budgets, Scripts: progs, Observer: obs,
		})
		if err != nil {
			return nil, fmt.Errorf("%w: deployment %s lane %s: %w", ErrConfig, dc.ID, l, err)
		}
		adm := &admission{
			deployment: dc.ID, lane: l, gate: r.gate, inflight: newInflight(lc.MaxInFlight),
			acquire: dc.Timeouts.Acquire, catalog: cat, obs: obs,
		}
		install := func(c interface{ AddHook(redis.Hook) }) {
			c.AddHook(adm)
			c.AddHook(g)
			if l == policy.LanePubSub {
				c.AddHook(dial)
			}
		}
		var nodes *nodeRegistry // Cluster only: the node clients a redirect is followed to
		if cluster {
			nodes = newNodeRegistry()
		}
		client, err := newLaneClient(dc, l, sen, func(node *redis.Client) {
			install(node)
			nodes.add(node)
		})
		if err != nil {
			return nil, fmt.Errorf("%w: deployment %s lane %s: %w", ErrConfig, dc.ID, l, err)
		}
		install(client)
		var refresh *slotRefresher
		if cc, ok := client.(*redis.ClusterClient); ok {
			// On the Cluster client only, inside the guard: it sees the
			// call's go-redis error (after any redirect was followed),
			// before admission refines it.
			refresh = newSlotRefresher(dc.ID, l, cc, obs, rlog)
			cc.AddHook(refreshHook{r: refresh})
			// Innermost of all: follows one MOVED/ASK (cluster_redirect.go).
			cc.AddHook(newRedirectHook(dc.ID, l, nodes, progs, obs, r.log))
		}
		r.registry = append(r.registry, &registered{deployment: dc.ID, lane: l, client: client, refresh: refresh})
		d.lanes[l] = &lane{name: l, client: client, guard: g, refresh: refresh}
	}
	d.regular = d.lanes[policy.LaneRegular]
	d.ps = newPubsubHost(r, dc, dial)
	ex, err := programs.NewExecutor(progs, mode, d.lanes[policy.LaneScript].client)
	if err != nil {
		return nil, fmt.Errorf("%w: deployment %s: %w", ErrConfig, dc.ID, err)
	}
	d.programs = ex
	return d, nil
}

// Role returns the deployment bound to role, or a *RoleError.
func (r *Runtime) Role(role policy.Role) (*Deployment, error) {
	if d, ok := r.roles[role]; ok {
		return d, nil
	}
	return nil, &RoleError{Role: role}
}

// Roles lists the selected roles in policy.Roles() order.
func (r *Runtime) Roles() []policy.Role {
	out := make([]policy.Role, 0, len(r.roles))
	for _, role := range policy.Roles() {
		if _, ok := r.roles[role]; ok {
			out = append(out, role)
		}
	}
	return out
}

// State returns the lifecycle state.
func (r *Runtime) State() State { return r.gate.current() }

// Keys returns the key builder (namespace and HMAC material from cfg.Keys).
func (r *Runtime) Keys() *keys.Builder { return r.keys }

// Close refuses new calls (DRAINING), waits for in-flight calls for at most
// the largest Timeouts.Shutdown of the deployments (or until ctx ends), then
// closes every client exactly once and reports CLOSED. Concurrent and
// repeated calls wait for the first one and return its result.
func (r *Runtime) Close(ctx context.Context) error {
	r.closeOnce.Do(func() { r.closeErr = r.close(ctx) })
	return r.closeErr
}

func (r *Runtime) close(ctx context.Context) error {
	idle := r.gate.drain()
	// Subscriptions hold no gate slot (one that lives for the whole run
	// would keep the gate from ever idling): DRAINING ends them here and
	// they are waited for within the same budget.
	subs := r.subs.end()
	deadline := time.Now().Add(r.drain)
	t := time.NewTimer(r.drain)
	defer t.Stop()
	var errs []error
	select {
	case <-idle:
	case <-t.C:
		n := r.gate.inFlight()
		r.log.Warn("redis runtime: drain timeout, closing with calls in flight", "in_flight", n, "drain_timeout", r.drain)
		errs = append(errs, fmt.Errorf("%w: %d calls in flight after %s", ErrDrainTimeout, n, r.drain))
	case <-ctx.Done():
		n := r.gate.inFlight()
		r.log.Warn("redis runtime: close context ended, closing with calls in flight", "in_flight", n)
		errs = append(errs, fmt.Errorf("%w: %d calls in flight: %w", ErrDrainTimeout, n, ctx.Err()))
	}
	if err := waitEnded(ctx, subs, time.Until(deadline)); err != nil {
		r.log.Warn("redis runtime: closing with subscription handlers still running")
		errs = append(errs, err)
	}
	errs = append(errs, r.closeClients())
	r.gate.setClosed()
	return errors.Join(errs...)
}

// closeClients closes every registered client exactly once.
func (r *Runtime) closeClients() error {
	var errs []error
	for _, reg := range r.registry {
		if reg.closes.Add(1) != 1 {
			continue
		}
		if reg.refresh != nil {
			reg.refresh.close()
		}
		if err := reg.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			errs = append(errs, fmt.Errorf("close %s/%s: %w", reg.deployment, reg.lane, err))
		}
	}
	for _, s := range r.sentinels {
		if err := s.close(); err != nil {
			errs = append(errs, fmt.Errorf("close sentinel discovery %s: %w", s.deployment, err))
		}
	}
	return errors.Join(errs...)
}
