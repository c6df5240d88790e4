package redistest

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func checkCluster(t *testing.T, c *Cluster) {
	ctx := ctxT(t)
	require.Len(t, c.Nodes(), 6)
	require.Len(t, c.Primaries(), 3)
	require.Len(t, c.Seeds(), 6)
	for _, n := range c.Nodes() {
		info, err := n.Admin().ClusterInfo(ctx).Result()
		require.NoError(t, err)
		assert.Contains(t, info, "cluster_state:ok")
		assert.Contains(t, info, "cluster_slots_assigned:16384")
	}
	for _, p := range c.Primaries() {
		role, err := p.Admin().Do(ctx, "ROLE").Slice()
		require.NoError(t, err)
		assert.Equal(t, "master", role[0])
	}
	for _, r := range c.Replicas() {
		role, err := r.Admin().Do(ctx, "ROLE").Slice()
		require.NoError(t, err)
		assert.Equal(t, "slave", role[0])
	}
	slot, err := c.Admin().ClusterKeySlot(ctx, "{user1}:a").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(8106), slot) // CRC16("user1") % 16384

	// Writes through the cluster client land on all three shards (replicas
	// count the replicated SETs too, so count on primaries only).
	primaryCalls := func() (sum int64) {
		for _, p := range c.Primaries() {
			sum += p.CommandCalls(t, "set")
		}
		return sum
	}
	before := primaryCalls()
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		require.NoError(t, c.Admin().Set(ctx, k, "1", time.Minute).Err())
	}
	assert.Equal(t, before+8, primaryCalls())
	for _, p := range c.Primaries() {
		assert.Positive(t, p.CommandCalls(t, "set"), p.Addr())
	}
	assert.GreaterOrEqual(t, c.CommandCalls(t, "set"), before+8)
	assert.Zero(t, c.CommandCalls(t, "flushall"))
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t)
	t.Logf("cluster up in %v", time.Since(start))
	checkCluster(t, c)

	// A killed replica comes back with its cluster identity and resyncs.
	r := c.Replicas()[0]
	r.Kill()
	r.Restart(t)
	require.Eventually(t, func() bool {
		repl, err := r.Admin().Info(ctxT(t), "replication").Result()
		return err == nil && strings.Contains(repl, "master_link_status:up")
	}, 10*time.Second, 50*time.Millisecond)

	// A plain go-redis cluster client built only from Seeds works.
	ctx := ctxT(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Seeds()[:1], DisableIdentity: true})
	t.Cleanup(func() { _ = cc.Close() })
	require.NoError(t, cc.Set(ctx, "x", "y", time.Minute).Err())
	assert.Equal(t, "y", cc.Get(ctx, "x").Val())
}

func TestClusterACLAndTLS(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, WithACL(ACLUser{Name: "app", Password: "pw", Rules: []string{"~*", "+@all"}}), WithTLS())
	checkCluster(t, c)
	ctx := ctxT(t)
	user, pass := c.AdminUser()
	assert.Equal(t, "admin", user)
	assert.NotEmpty(t, pass)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Seeds(), DisableIdentity: true, Username: "app", Password: "pw", TLSConfig: c.TLS().Config()})
	t.Cleanup(func() { _ = cc.Close() })
	require.NoError(t, cc.Set(ctx, "x", "y", time.Minute).Err())
	anon := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Seeds(), DisableIdentity: true, TLSConfig: c.TLS().Config()})
	t.Cleanup(func() { _ = anon.Close() })
	err := anon.Set(ctx, "x", "y", time.Minute).Err()
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "NOAUTH") || strings.Contains(err.Error(), "WRONGPASS"), err.Error())
}
