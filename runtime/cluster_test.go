package runtime

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// TestClusterNeverResendsAnAmbiguousWrite pins maxRedirects: with go-redis'
// default (3) a read timeout on a non-blocking SET makes the Cluster loop
// send it again (same node, then another). The slot owner is paused so the
// SET times out after it was written; after resuming, the node must have
// executed exactly one SET.
func TestClusterNeverResendsAnAmbiguousWrite(t *testing.T) {
	cl := redistest.StartCluster(t)
	d := testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})
	d.Timeouts.Command = 300 * time.Millisecond
	d.Timeouts.Acquire = 100 * time.Millisecond
	r := newRuntime(t, testConfig(d))
	c := laneClient(t, r, policy.RoleCoordination, policy.LaneRegular)
	ctx := ctxT(t, 20*time.Second)

	key := testKey("resend")
	require.ErrorIs(t, c.Get(ctx, key).Err(), redis.Nil) // loads the slot map, opens a connection
	owner, err := cl.Admin().MasterForKey(ctx, key)
	require.NoError(t, err)
	var node *redistest.Server
	for _, p := range cl.Primaries() {
		if p.Addr() == owner.Options().Addr {
			node = p
		}
	}
	require.NotNil(t, node, "slot owner %s not among primaries", owner.Options().Addr)
	before := node.CommandCalls(t, "set")

	node.Pause()
	err = c.Set(ctx, key, "v", time.Minute).Err()
	time.Sleep(300 * time.Millisecond) // room for a (forbidden) resend to be queued
	node.Resume()
	assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err))
	require.Eventually(t, func() bool { return node.CommandCalls(t, "set") > before }, 5*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, before+1, node.CommandCalls(t, "set"), "the ambiguous SET was sent exactly once")
}
