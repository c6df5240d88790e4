package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

func TestTypedOps(t *testing.T) {
	srv := redistest.StartStandalone(t)
	d := testDeployment("main", standalone(srv.Addr()))
	d.Budgets.MaxReplyBytes = 1024
	r := newRuntime(t, testConfig(d))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	ctx := context.Background()
	k, err := r.Keys().Build(keys.Spec{Capability: keys.CapProbe, Region: "ops", KeyVersion: 1, Kind: "probe", Parts: [][]byte{[]byte("a")}})
	require.NoError(t, err)

	_, ok, err := dep.Get(ctx, k)
	require.NoError(t, err)
	assert.False(t, ok)

	set := time.Now()
	require.NoError(t, dep.SetWithTTL(ctx, k, []byte("v1"), time.Minute))
	v, ok, err := dep.Get(ctx, k)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, []byte("v1"), v)
	ttl := srv.Admin().PTTL(ctx, k.Redis()).Val()
	// At most a minute, less no more than what passed since the SET (whole
	// ms on Redis's clock): value and TTL in one command.
	assert.LessOrEqual(t, ttl, time.Minute, "value and TTL in one command")
	assert.GreaterOrEqual(t, ttl, time.Minute-time.Since(set)-time.Millisecond, "value and TTL in one command")

	// A reply over the budget is withheld (the guard measured it).
	require.NoError(t, srv.Admin().Set(ctx, k.Redis(), make([]byte, 4096), time.Minute).Err())
	_, _, err = dep.Get(ctx, k)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))

	deleted, err := dep.Delete(ctx, k)
	require.NoError(t, err)
	assert.True(t, deleted)

	// Caller mistakes are REJECTED before anything is sent.
	before := srv.CommandCalls(t, "set")
	assert.Equal(t, certainty.Rejected, outcomeOf(t, dep.SetWithTTL(ctx, k, []byte("x"), 0)))
	assert.Equal(t, certainty.Rejected, outcomeOf(t, dep.SetWithTTL(ctx, keys.Key{}, []byte("x"), time.Second)))
	assert.Equal(t, before, srv.CommandCalls(t, "set"))
}
