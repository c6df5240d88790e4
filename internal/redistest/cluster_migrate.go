package redistest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// migrateBatch is how many keys one MIGRATE moves; migrateTimeout its
// server-side timeout in milliseconds.
const (
	migrateBatch   = 100
	migrateTimeout = 5000
)

// SlotMigration is one hash slot being moved from one primary to another the
// way an operator (or redis-cli --cluster reshard) does it: IMPORTING on the
// target, MIGRATING on the source, MIGRATE of the keys, then SETSLOT NODE on
// every primary. While it is open, the source answers -ASK for keys it no
// longer holds and the target serves them to clients that send ASKING first.
type SlotMigration struct {
	c        *Cluster
	slot     int
	from, to *Server
	toID     string
}

// SlotOwner returns the primary that serves slot in the cluster's current
// configuration (after a failover, possibly one of Replicas()).
func (c *Cluster) SlotOwner(t testing.TB, slot int) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	slots, err := c.nodes[0].admin.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	for _, r := range slots {
		if slot < r.Start || slot > r.End || len(r.Nodes) == 0 {
			continue
		}
		for _, n := range c.nodes {
			if n.Addr() == r.Nodes[0].Addr {
				return n
			}
		}
		t.Fatalf("redistest: slot %d is served by unknown node %s", slot, r.Nodes[0].Addr)
	}
	t.Fatalf("redistest: slot %d is not assigned", slot)
	return nil
}

// BeginSlotMigration opens the migration of slot from its owner to the
// primary to: CLUSTER SETSLOT IMPORTING on to first, then MIGRATING on the
// source (the order redis-cli uses, so no client is ever redirected to a node
// that does not accept the slot yet). No key moves until MigrateKeys.
func (c *Cluster) BeginSlotMigration(t testing.TB, slot int, to *Server) *SlotMigration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	from := c.SlotOwner(t, slot)
	if from == to {
		t.Fatalf("redistest: slot %d is already served by %s", slot, to.Addr())
	}
	fromID, err := from.admin.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v", from.Addr(), err)
	}
	toID, err := to.admin.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v", to.Addr(), err)
	}
	if err := to.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		t.Fatalf("redistest: SETSLOT %d IMPORTING on %s: %v", slot, to.Addr(), err)
	}
	if err := from.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		t.Fatalf("redistest: SETSLOT %d MIGRATING on %s: %v", slot, from.Addr(), err)
	}
	return &SlotMigration{c: c, slot: slot, from: from, to: to, toID: toID}
}

// From returns the source primary; To the target.
func (m *SlotMigration) From() *Server { return m.from }

// To returns the target primary.
func (m *SlotMigration) To() *Server { return m.to }

// MigrateKeys moves at most n keys of the slot from the source to the target
// with MIGRATE (each key atomically: it exists on exactly one of them at any
// time) and returns how many it moved; n <= 0 moves them all.
func (m *SlotMigration) MigrateKeys(t testing.TB, n int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	moved := 0
	for n <= 0 || moved < n {
		batch := migrateBatch
		if n > 0 {
			batch = min(batch, n-moved)
		}
		keys, err := m.from.admin.ClusterGetKeysInSlot(ctx, m.slot, batch).Result()
		if err != nil {
			t.Fatalf("redistest: CLUSTER GETKEYSINSLOT %d on %s: %v", m.slot, m.from.Addr(), err)
		}
		if len(keys) == 0 {
			return moved
		}
		args := []any{"MIGRATE", "127.0.0.1", strconv.Itoa(m.to.port), "", 0, migrateTimeout}
		if user, pass := m.c.d.adminCreds(); user != "" {
			args = append(args, "AUTH2", user, pass)
		}
		args = append(args, "KEYS")
		for _, k := range keys {
			args = append(args, k)
		}
		if err := m.from.admin.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("redistest: MIGRATE of %d keys of slot %d from %s: %v", len(keys), m.slot, m.from.Addr(), err)
		}
		moved += len(keys)
	}
	return moved
}

// Finish moves the keys still left and assigns the slot to the target:
// SETSLOT NODE on the target, then the source, then every other primary (the
// redis-cli order), and waits until every node's CLUSTER SLOTS names the
// target. It returns how many keys it moved.
func (m *SlotMigration) Finish(t testing.TB) int {
	t.Helper()
	moved := m.MigrateKeys(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	order := []*Server{m.to, m.from}
	for _, n := range m.c.nodes {
		if n != m.to && n != m.from && m.c.isRunningPrimary(ctx, n) {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := n.admin.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID).Err(); err != nil {
			t.Fatalf("redistest: SETSLOT %d NODE on %s: %v", m.slot, n.Addr(), err)
		}
	}
	want := m.to.Addr()
	err := pollAll(ctx, fmt.Sprintf("slot %d served by %s everywhere", m.slot, want), m.c.running(ctx),
		func(n *Server) (bool, string, error) {
			slots, err := n.admin.ClusterSlots(ctx).Result()
			if err != nil {
				return false, "", err
			}
			for _, r := range slots {
				if m.slot >= r.Start && m.slot <= r.End && len(r.Nodes) > 0 {
					return r.Nodes[0].Addr == want, r.Nodes[0].Addr, nil
				}
			}
			return false, "unassigned", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return moved
}

// MigrateSlot moves slot to the primary to in one step (Begin + Finish) and
// returns how many keys moved.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, to *Server) int {
	t.Helper()
	return c.BeginSlotMigration(t, slot, to).Finish(t)
}

// running returns the nodes whose process is up.
func (c *Cluster) running(ctx context.Context) []*Server {
	var out []*Server
	for _, n := range c.nodes {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := n.admin.Ping(pctx).Err()
		cancel()
		if err == nil {
			out = append(out, n)
		}
	}
	return out
}

func (c *Cluster) isRunningPrimary(ctx context.Context, n *Server) bool {
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	role, err := n.admin.Do(pctx, "ROLE").Slice()
	return err == nil && len(role) > 0 && role[0] == "master"
}
