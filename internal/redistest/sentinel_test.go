package redistest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	start := time.Now()
	s := StartSentinel(t, WithACL(ACLUser{Name: "app", Password: "pw", Rules: []string{"~*", "+@all"}}))
	t.Logf("sentinel up in %v", time.Since(start))
	require.Len(t, s.SentinelAddrs(), 3)
	require.Len(t, s.Replicas(), 2)
	old := s.Primary()

	duser, dpass := s.DiscoveryUser()
	assert.Equal(t, "discovery", duser)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:       s.MasterName(),
		SentinelAddrs:    s.SentinelAddrs(),
		SentinelUsername: duser,
		SentinelPassword: dpass,
		Username:         "app",
		Password:         "pw",
		DisableIdentity:  true,
	})
	t.Cleanup(func() { _ = fc.Close() })
	require.NoError(t, fc.Set(ctx, "k", "v", time.Minute).Err())
	assert.Equal(t, int64(1), old.CommandCalls(t, "set"))

	// The discovery user cannot run data or admin commands on a sentinel.
	sc := plainClient(t, s.SentinelAddrs()[0], func(o *redis.Options) { o.Username, o.Password = duser, dpass })
	require.NoError(t, sc.Ping(ctx).Err())
	assert.Error(t, sc.Do(ctx, "SENTINEL", "FAILOVER", s.MasterName()).Err())
	anon := plainClient(t, s.SentinelAddrs()[0], nil)
	assert.Error(t, anon.Ping(ctx).Err())

	start = time.Now()
	next := s.Failover(t)
	t.Logf("failover in %v", time.Since(start))
	require.NotSame(t, old, next)
	assert.Same(t, next, s.Primary())
	assert.NotContains(t, s.Replicas(), next)
	assert.Contains(t, s.Replicas(), old)
	role, err := next.Admin().Do(ctx, "ROLE").Slice()
	require.NoError(t, err)
	assert.Equal(t, "master", role[0])

	// The failover client follows the new primary.
	require.Eventually(t, func() bool {
		return fc.Set(ctx, "k2", "v", time.Minute).Err() == nil && next.CommandCalls(t, "set") >= 1
	}, 10*time.Second, 50*time.Millisecond)
}

func TestSentinelTLS(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := StartSentinel(t, WithTLS())
	u, p := s.DiscoveryUser()
	assert.Empty(t, u+p)
	require.NotNil(t, s.TLS())
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs(),
		DisableIdentity: true, TLSConfig: s.TLS().Config(),
	})
	t.Cleanup(func() { _ = fc.Close() })
	require.NoError(t, fc.Set(ctx, "k", "v", time.Minute).Err())
	assert.Equal(t, int64(1), s.Primary().CommandCalls(t, "set"))
	for _, r := range s.Replicas() {
		assert.Zero(t, r.ConnectedClients(t), "replication and sentinel links are not counted")
	}
	plain := plainClient(t, s.SentinelAddrs()[0], nil)
	assert.Error(t, plain.Ping(ctx).Err(), "sentinels listen on TLS only")
}
