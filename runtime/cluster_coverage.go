package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
)

// This file owns what "covered" means for a Cluster deployment, for the
// startup handshake (probe.go, check cluster-coverage) and the live check
// readiness runs (Runtime.Live).
//
// A decision on a key needs the primary its slot routes to. So the check
// reads the slot map afresh (go-redis's CLUSTER SLOTS, from the first node
// that answers) and asks every primary in it — the nodes decisions are sent
// to — for ROLE and CLUSTER INFO: each must answer, be a master, and see
// cluster_state ok with all 16384 slots served. A dead primary that still
// owns slots fails the check from the moment it stops answering (before the
// cluster itself has marked it failed); once a replica is promoted, the new
// slot map no longer lists it. Nothing here goes to a node outside that
// map: a failed or forgotten node entry (a seed address that is down, a
// dead ex-primary now shown as a failed replica) cannot fail the check, which
// is what made readiness flap after a failover when CLUSTER INFO went to a
// random known node.

// fullCoverage is the number of hash slots.
const fullCoverage = 16384

// coverage is one look at a Cluster deployment's slot coverage.
type coverage struct {
	primaries   int // primaries in the slot map that was read
	unreachable int // of them, those that did not answer
	notPrimary  int // answered, but not as master
	stateNotOK  int // answered cluster_state other than ok
	minSlotsOK  int // the lowest cluster_slots_ok among those that answered
	err         error
}

// checkCoverage reads the slot map on cc and asks each primary in it, one
// at a time (one in-flight slot of cc's lane).
func checkCoverage(ctx context.Context, cc *redis.ClusterClient) coverage {
	c := coverage{minSlotsOK: fullCoverage}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		c.primaries++
		p := node.Pipeline()
		role := p.Do(ctx, "ROLE")
		info := p.ClusterInfo(ctx)
		_, _ = p.Exec(ctx)
		if err := errors.Join(role.Err(), info.Err()); err != nil {
			c.unreachable++
			if c.err == nil {
				c.err = err
			}
			return nil
		}
		if r, _ := role.Slice(); len(r) == 0 || r[0] != "master" {
			c.notPrimary++
		}
		if infoField(info.Val(), "cluster_state") != "ok" {
			c.stateNotOK++
		}
		n, err := strconv.Atoi(infoField(info.Val(), "cluster_slots_ok"))
		if err != nil {
			n = 0
		}
		c.minSlotsOK = min(c.minSlotsOK, n)
		return nil
	})
	if err != nil && c.err == nil {
		c.err = err
	}
	return c
}

func (c coverage) ok() bool {
	return c.err == nil && c.primaries > 0 && c.unreachable == 0 && c.notPrimary == 0 &&
		c.stateNotOK == 0 && c.minSlotsOK == fullCoverage
}

// liveReason is the LiveError reason of a coverage that is not ok.
func (c coverage) liveReason() string {
	switch {
	case c.err != nil:
		return reasonWord(c.err)
	case c.primaries == 0:
		return "slots-uncovered"
	case c.notPrimary > 0:
		return "not-primary"
	case c.stateNotOK > 0:
		return "cluster-down"
	}
	return "slots-uncovered"
}

// class is the failure class of a coverage that is not ok.
func (c coverage) class(topo policy.TopologyKind) Class {
	if c.err != nil {
		return classOf(c.err, topo)
	}
	return ClassOutage
}

// detail is the probe's bounded detail line.
func (c coverage) detail() string {
	if c.ok() {
		return fmt.Sprintf("%d slots served by %d primar%s, each answering as master with cluster_state ok",
			fullCoverage, c.primaries, plural(c.primaries, "y", "ies"))
	}
	if c.err != nil && c.primaries == 0 {
		return "slot map unreadable: " + errCode(c.err)
	}
	s := fmt.Sprintf("%d primar%s in the slot map: %d not answering, %d not master, %d not cluster_state ok; fewest slots served %d of %d",
		c.primaries, plural(c.primaries, "y", "ies"), c.unreachable, c.notPrimary, c.stateNotOK, c.minSlotsOK, fullCoverage)
	if c.err != nil {
		s += " (" + errCode(c.err) + ")"
	}
	return s
}

// pingLane is the startup probe's authentication check of one lane: a PING
// on a plain client; on a Cluster client, a PING to every primary of a
// freshly read slot map, one at a time. ClusterClient.Ping would go to a
// random known node, which after a failover may be the dead ex-primary
// still listed in the seeds: the handshake failed at random then, and
// readiness stayed down for its retries.
func pingLane(ctx context.Context, c redis.UniversalClient) error {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return c.Ping(ctx).Err()
	}
	var mu sync.Mutex
	return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return node.Ping(ctx).Err()
	})
}
