package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterPrimaries = 3
	clusterTimeout   = 20 * time.Second
)

// Cluster is a 3-primary, 3-replica Redis Cluster owned by a test.
type Cluster struct {
	d         *deployment
	nodes     []*Server
	primaries []*Server
	admin     *redis.ClusterClient
}

// StartCluster starts 3 primaries and 3 replicas with cluster-enabled, assigns
// all 16384 slots, and waits for cluster_state:ok on every node and for every
// replica to be attached and in sync.
func StartCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	d := newDeployment(t, opts)
	c := &Cluster{d: d}
	for i := 0; i < 2*clusterPrimaries; i++ {
		c.nodes = append(c.nodes, d.newServer(t, kindCluster, nil))
	}
	c.primaries = c.nodes[:clusterPrimaries]
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := startAll(ctx, c.nodes); err != nil {
		t.Fatal(err)
	}
	if err := c.form(ctx); err != nil {
		t.Fatal(err)
	}
	user, pass := d.adminCreds()
	co := &redis.ClusterOptions{
		Addrs:           c.Seeds(),
		Username:        user,
		Password:        pass,
		ClientName:      adminClientName,
		DisableIdentity: true,
		DialTimeout:     2 * time.Second,
		ReadTimeout:     commandTimeout,
		WriteTimeout:    commandTimeout,
		PoolSize:        4,
	}
	if d.tls != nil {
		co.TLSConfig = d.tls.Config()
	}
	c.admin = redis.NewClusterClient(co)
	t.Cleanup(func() { _ = c.admin.Close() })
	return c
}

// startAll starts servers concurrently, returning the first error.
func startAll(ctx context.Context, servers []*Server) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.start(ctx, true)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// form wires the nodes together the way redis-cli --cluster create does, but
// through go-redis so the harness does not depend on redis-cli.
func (c *Cluster) form(ctx context.Context) error {
	ids := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		id, err := n.admin.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER MYID on %s: %w", n.Addr(), err)
		}
		ids[i] = id
		// Distinct epochs up front avoid the slow epoch-collision resolution.
		if err := n.admin.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %w", n.Addr(), err)
		}
	}
	const slots = 16384
	per := slots / clusterPrimaries
	for i, p := range c.primaries {
		lo, hi := i*per, (i+1)*per-1
		if i == clusterPrimaries-1 {
			hi = slots - 1
		}
		if err := p.admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE on %s: %w", p.Addr(), err)
		}
	}
	first := c.nodes[0]
	for _, n := range c.nodes[1:] {
		if err := first.admin.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.port, n.busPort).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s: %w", n.Addr(), err)
		}
	}
	if err := c.waitFor(ctx, "all nodes to know each other", func(n *Server) (bool, string, error) {
		out, err := n.admin.Do(ctx, "CLUSTER", "NODES").Text()
		if err != nil {
			return false, "", err
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		ok := len(lines) == len(c.nodes) && !strings.Contains(out, "handshake") && !strings.Contains(out, "noaddr")
		return ok, out, nil
	}); err != nil {
		return err
	}
	for i, r := range c.nodes[clusterPrimaries:] {
		if err := r.admin.Do(ctx, "CLUSTER", "REPLICATE", ids[i]).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER REPLICATE on %s: %w", r.Addr(), err)
		}
	}
	return c.waitFor(ctx, "cluster_state:ok and replicas in sync", func(n *Server) (bool, string, error) {
		info, err := n.admin.Do(ctx, "CLUSTER", "INFO").Text()
		if err != nil {
			return false, "", err
		}
		if !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.nodes))) ||
			!strings.Contains(info, "cluster_slots_ok:16384") {
			return false, info, nil
		}
		repl, err := n.admin.Info(ctx, "replication").Result()
		if err != nil {
			return false, "", err
		}
		if n.isPrimaryIn(c.primaries) {
			return strings.Contains(repl, "connected_slaves:1") && strings.Contains(repl, "state=online"), repl, nil
		}
		return strings.Contains(repl, "master_link_status:up"), repl, nil
	})
}

func (s *Server) isPrimaryIn(primaries []*Server) bool {
	for _, p := range primaries {
		if p == s {
			return true
		}
	}
	return false
}

// waitFor polls cond on every node until all are true or ctx expires.
func (c *Cluster) waitFor(ctx context.Context, what string, cond func(*Server) (bool, string, error)) error {
	return pollAll(ctx, what, c.nodes, cond)
}

func pollAll(ctx context.Context, what string, nodes []*Server, cond func(*Server) (bool, string, error)) error {
	for {
		var last string
		all := true
		for _, n := range nodes {
			ok, detail, err := cond(n)
			if err != nil {
				detail = err.Error()
			}
			if !ok {
				all = false
				last = n.Addr() + ": " + detail
				break
			}
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: timed out waiting for %s; last state %s", what, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Seeds returns the addresses of all nodes, usable as ClusterOptions.Addrs.
func (c *Cluster) Seeds() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Nodes returns all six nodes, primaries first (in start-up roles).
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// Primaries returns the three nodes that were primaries at start-up.
func (c *Cluster) Primaries() []*Server { return append([]*Server(nil), c.primaries...) }

// Replicas returns the three nodes that were replicas at start-up; Replicas()[i]
// replicates Primaries()[i].
func (c *Cluster) Replicas() []*Server { return append([]*Server(nil), c.nodes[clusterPrimaries:]...) }

// ShardOf returns the start-up primary whose slots hold key and its
// replica (for a failover test that kills the node serving a key). It
// fails the test when no start-up primary serves key's slot any more.
func (c *Cluster) ShardOf(t testing.TB, key string) (primary, replica *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	owner, err := c.admin.MasterForKey(ctx, key)
	if err != nil {
		t.Fatalf("redistest: the node serving %s: %v", key, err)
	}
	for i, p := range c.primaries {
		if p.Addr() == owner.Options().Addr {
			return p, c.nodes[clusterPrimaries+i]
		}
	}
	t.Fatalf("redistest: %s is served by %s, not a start-up primary", key, owner.Options().Addr)
	return nil, nil
}

// Admin returns the authenticated harness cluster client, for assertions only.
func (c *Cluster) Admin() *redis.ClusterClient { return c.admin }

// AdminUser returns the harness admin credentials (see Server.AdminUser).
func (c *Cluster) AdminUser() (user, pass string) { return c.d.adminCreds() }

// TLS returns the generated certificates, or nil without WithTLS.
func (c *Cluster) TLS() *TLSMaterial { return c.d.tls }

// CommandCalls sums Server.CommandCalls over all nodes. Replicas count the
// writes they apply from the replication stream as well, so use it to prove a
// command was never sent (0), and sum over Primaries() to count client calls.
func (c *Cluster) CommandCalls(t testing.TB, command string) int64 {
	t.Helper()
	var total int64
	for _, n := range c.nodes {
		total += n.CommandCalls(t, command)
	}
	return total
}
