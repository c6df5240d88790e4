package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

const testNS = "ca:demo:test:"

func testKey(s string) string { return testNS + "t:{" + s + "}:k" }

// testDeployment returns a valid deployment for topo with small bounds.
func testDeployment(id string, topo policy.Topology) policy.Deployment {
	lanes := make(map[policy.Lane]policy.LaneConfig)
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 2, MaxInFlight: 4}
	}
	return policy.Deployment{
		ID:         id,
		Topology:   topo,
		ClientName: "caphost-test",
		Timeouts: policy.Timeouts{
			Connect: time.Second, Command: 2 * time.Second, Acquire: 300 * time.Millisecond, Shutdown: 3 * time.Second,
		},
		Lanes:   lanes,
		Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20},
		// No auth: every lane, admin included, is the default user, by choice.
		AdminShared: true,
	}
}

// testConfig binds every given role to the first deployment.
func testConfig(deps ...policy.Deployment) policy.RedisConfig {
	cfg := policy.RedisConfig{
		Deployments: make(map[string]policy.Deployment),
		Roles:       map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: deps[0].ID, Required: true}},
		Programs:    policy.ProgramsConfig{Mode: policy.ProgramsEvalshaManaged},
		Keys: policy.KeysConfig{App: "demo", Env: "test", HMAC: policy.KeyMaterial{
			WriteVersion: 1,
			Versions:     map[int]policy.Secret{1: policy.NewSecret([]byte("0123456789abcdef0123456789abcdef"))},
		}},
	}
	for _, d := range deps {
		cfg.Deployments[d.ID] = d
	}
	return cfg
}

func standalone(addr string) policy.Topology { return &policy.Standalone{Endpoint: addr} }

func newRuntime(t *testing.T, cfg policy.RedisConfig, opts ...Option) *Runtime {
	t.Helper()
	r, err := New(context.Background(), cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func laneClient(t *testing.T, r *Runtime, role policy.Role, l policy.Lane) redis.UniversalClient {
	t.Helper()
	d, err := r.Role(role)
	require.NoError(t, err)
	c := d.client(l)
	require.NotNil(t, c)
	return c
}

// outcomeOf returns the certainty of a call error, asserting it is typed.
func outcomeOf(t *testing.T, err error) certainty.Outcome {
	t.Helper()
	if err == nil || errors.Is(err, redis.Nil) {
		return certainty.Applied
	}
	var ce *certainty.Error
	require.ErrorAs(t, err, &ce, "untyped error %T %v", err, err)
	require.False(t, ce.Retryable() && ce.Ambiguous())
	return ce.Outcome
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
