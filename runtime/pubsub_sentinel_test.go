package runtime

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestPubSubSentinel: after SENTINEL FAILOVER the old primary keeps its
// subscribers while it still believes it is primary (about 10 s here), so
// the connection stays healthy and receives nothing; the route's switch to
// the new primary ends it, and the subscription resubscribes there. Then the new primary is killed: down at once, up on
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

// TestPubSubSentinelKillFollowsTheSwitch kills the primary under a
// subscription. Ordering, not speed: the subscription goes down, comes up
// again only after caphost installed the primary the Sentinels promoted,
// on that node, and receives what is published there after the switch.
// The delay from +switch-master to State(true) is logged, never asserted.
func TestPubSubSentinelKillFollowsTheSwitch(t *testing.T) {
	sen := redistest.StartSentinel(t)
	watch := watchSwitchMaster(t, sen)
	f := subscribed(t, sentinelTestDeployment(sen), SubscribeOptions{})
	route := f.r.sentinels[0]
	old := sen.Primary()
	require.Equal(t, 1, shardSubscribers(t, old, f.ch))

	killed := time.Now()
	old.Kill()
	down := f.rec.waitState(2, false)
	up := f.rec.waitState(3, true)
	<-watch.seen // closed before caphost can switch: caphost acts on +switch-master
	switched := watch.at()
	cur := awaitSwitch(t, route)
	next := sen.AwaitFailover(t, old)
	require.Equal(t, next.Addr(), cur.addr)
	assert.True(t, up.After(cur.at), "State(true) %s before caphost installed the new primary", cur.at.Sub(up))
	assert.Equal(t, 3, f.rec.states(), "no up on the dead primary")
	require.Equal(t, 1, shardSubscribers(t, next, f.ch), "subscribed on the promoted node")

	// Published straight on the new primary, after the switch.
	n, err := next.Admin().Do(ctxT(t, eventually), "SPUBLISH", f.ch.Redis(), "from-new-primary").Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	f.rec.waitMessage("from-new-primary")
	t.Logf("pubsub timeline: kill → State(false) +%s → +switch-master +%s → caphost switched +%s → State(true) +%s "+
		"(%s after +switch-master, %s after the switch; %d reconnects)",
		down.Sub(killed).Round(time.Millisecond), switched.Sub(killed).Round(time.Millisecond),
		cur.at.Sub(killed).Round(time.Millisecond), up.Sub(killed).Round(time.Millisecond),
		up.Sub(switched).Round(time.Millisecond), up.Sub(cur.at).Round(time.Millisecond), f.sub.Stats().Reconnects)
}

// TestPubSubSentinelPausedPrimaryDeliversNothingAfterTheSwitch pauses the
// primary under a subscription whose health check would not notice for a
// minute: its connection to the old primary stays open through the
// failover. A message is published on the old primary after caphost
// switched (written to it while paused, executed on resume, when it still
// believes it is primary). The subscription must have left the old
// primary at the switch: that message is never delivered, and one
// published on the new primary is.
func TestPubSubSentinelPausedPrimaryDeliversNothingAfterTheSwitch(t *testing.T) {
	sen := redistest.StartSentinel(t)
	f := subscribed(t, sentinelTestDeployment(sen), SubscribeOptions{HealthInterval: time.Minute})
	route := f.r.sentinels[0]
	old := sen.Primary()
	require.Equal(t, 1, shardSubscribers(t, old, f.ch))
	raw, err := net.DialTimeout("tcp", old.Addr(), 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })

	old.Pause()
	t.Cleanup(old.Resume)
	cur := awaitSwitch(t, route)
	next := sen.AwaitFailover(t, old)
	require.Equal(t, next.Addr(), cur.addr)
	_, err = raw.Write([]byte(respCommand("SPUBLISH", f.ch.Redis(), "stale-from-old-primary")))
	require.NoError(t, err)
	old.Resume()
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(eventually)))
	reply, err := bufio.NewReader(raw).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(reply, ":"), "SPUBLISH on the old primary executed: %q", reply)

	// A new subscription starts only after the old one's reader returned,
	// so anything the old connection delivered precedes this State(true).
	up := f.rec.waitFor("up after the switch", func(ev []subEvent) bool {
		n := len(ev)
		return n > 0 && ev[n-1].up != nil && *ev[n-1].up && ev[n-1].at.After(cur.at)
	})
	require.Equal(t, 1, shardSubscribers(t, next, f.ch), "subscribed on the promoted node")
	n, err := next.Admin().Do(ctxT(t, eventually), "SPUBLISH", f.ch.Redis(), "from-new-primary").Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	f.rec.waitMessage("from-new-primary")
	assert.NotContains(t, f.rec.messages(), "stale-from-old-primary",
		"a message published on the replaced primary after the switch was delivered")
	t.Logf("pause → caphost switched; State(true) %s after the switch; old primary counted %s receivers",
		up.Sub(cur.at).Round(time.Millisecond), strings.TrimSpace(reply))
}

// respCommand encodes one command as a RESP array of bulk strings.
func respCommand(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}
