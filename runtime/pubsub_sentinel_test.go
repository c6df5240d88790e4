package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestPubSubSentinel: after SENTINEL FAILOVER the old primary keeps its
// subscribers while it still believes it is primary (about 10 s here), so
// the connection stays healthy and receives nothing; the health check
// notices that the lane now dials another primary, goes down and
// resubscribes there. Then the new primary is killed: down at once, up on
// the primary Sentinel promotes next.
func TestPubSubSentinel(t *testing.T) {
	sen := redistest.StartSentinel(t)
	d := testDeployment("sen", &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()})
	f := subscribed(t, d, SubscribeOptions{})
	dep, ch, rec, s := f.dep, f.ch, f.rec, f.sub
	old := sen.Primary()
	require.Equal(t, 1, shardSubscribers(t, old, ch))

	started := time.Now()
	next := sen.Failover(t)
	switched := time.Now()
	down := rec.waitState(2, false)
	up := rec.waitState(3, true)
	t.Logf("sentinel failover: SENTINEL FAILOVER → sentinels agree %s; State(false) %s after that, State(true) %s later",
		switched.Sub(started).Round(time.Millisecond), down.Sub(switched).Round(time.Millisecond), up.Sub(down).Round(time.Millisecond))
	assert.Equal(t, 1, shardSubscribers(t, next, ch), "resubscribed on the new primary")
	publishUntilReceived(t, dep, ch, rec, "after-failover")

	killed := time.Now()
	next.Kill()
	down = rec.waitState(4, false)
	up = rec.waitState(5, true)
	t.Logf("sentinel kill: State(false) %s after the kill, State(true) %s after the kill (%d reconnects)",
		down.Sub(killed).Round(time.Millisecond), up.Sub(killed).Round(time.Millisecond), s.Stats().Reconnects)
	publishUntilReceived(t, dep, ch, rec, "after-kill")
	subscribed := 0
	for _, srv := range sen.Replicas() { // every data node but the killed one
		subscribed += shardSubscribers(t, srv, ch)
	}
	assert.Equal(t, 1, subscribed, "one subscription, on the node Sentinel promoted")
}
