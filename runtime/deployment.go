package runtime

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/programs"
)

// Deployment is one role-selected Redis deployment with its lanes.
type Deployment struct {
	id       string
	topology policy.TopologyKind
	budgets  policy.Budgets
	lanes    map[policy.Lane]*lane
	regular  *lane // lanes[LaneRegular], kept apart: the hot path skips a map lookup
	programs *programs.Executor
	ps       *pubsubHost // the Pub/Sub facade's runtime state (pubsub.go)
}

// lane is one client and its guard.
type lane struct {
	name   policy.Lane
	client redis.UniversalClient
	guard  *guard.Guard
	// refresh spaces the client's slot-map reloads (topology.go); nil
	// unless the deployment is a Cluster.
	refresh *slotRefresher
}

// ID returns the deployment id.
func (d *Deployment) ID() string { return d.id }

// Topology returns the deployment's topology kind.
func (d *Deployment) Topology() policy.TopologyKind { return d.topology }

// Budgets returns the deployment's request and reply byte budgets, which
// the guard enforces on every lane: a capability sizes what it sends and
// reads to fit them (a cache region's largest value, for example).
func (d *Deployment) Budgets() policy.Budgets { return d.budgets }

// Programs returns the catalog-program executor bound to the script lane.
func (d *Deployment) Programs() *programs.Executor { return d.programs }

// Ping sends PING on the regular lane (readiness). The error, if any, is a
// *certainty.Error.
func (d *Deployment) Ping(ctx context.Context) error {
	err := d.regular.client.Ping(ctx).Err()
	return certainty.Wrap("ping", err, false)
}

// client returns the go-redis client of lane l, for the startup probe and
// tests inside this package only.
func (d *Deployment) client(l policy.Lane) redis.UniversalClient {
	if ln, ok := d.lanes[l]; ok {
		return ln.client
	}
	return nil
}
