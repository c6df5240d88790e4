package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestClusterDeadSeedNeverFailsTheChecks kills a replica that is one of the
// configured seeds: decisions never go to it, so neither the startup probe
// nor the live check may fail because of it. Both used to send their
// keyless commands (PING per lane, CLUSTER INFO) to a random known node and
// failed whenever that was the dead one (about 2 probes in 3 and 1 live
// check in 6); now they ask the primaries of the slot map only.
func TestClusterDeadSeedNeverFailsTheChecks(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithConfig("maxmemory-policy", "noeviction"))
	d := testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})
	r := newRuntime(t, testConfig(d))
	ctx := ctxT(t, 60*time.Second)

	dp, err := r.ProbeDeployment(ctx, "cl")
	require.NoError(t, err)
	require.Empty(t, dp.Class(), "%+v", dp.Checks)
	cl.Replicas()[1].Kill()

	for i := range 12 {
		dp, err := r.ProbeDeployment(ctx, "cl")
		require.NoError(t, err)
		require.Empty(t, dp.Class(), "probe %d: %+v", i, dp.Checks)
	}
	for i := range 40 {
		require.NoError(t, r.Live(ctx, "cl", ""), "live check %d", i)
	}
	for _, c := range dp.Checks {
		if c.Name == CheckClusterCoverage {
			assert.Equal(t, "16384 slots served by 3 primaries, each answering as master with cluster_state ok", c.Detail)
		}
	}

	// A dead primary fails both at once, with a bounded detail.
	cl.Primaries()[2].Kill()
	dp, err = r.ProbeDeployment(ctx, "cl")
	require.NoError(t, err)
	assert.Equal(t, ClassOutage, dp.Class())
	var le *LiveError
	require.ErrorAs(t, r.Live(ctx, "cl", ""), &le)
	assert.Equal(t, ClassOutage, le.Class)
	assert.Contains(t, []string{"unreachable", "timeout"}, le.Reason)
}
