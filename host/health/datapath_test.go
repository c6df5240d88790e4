package health_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/policy"
)

// TestDataPathFailureDropsTheCachedReport: a cached "ready" report is not
// served once a call could not reach the deployment; the next probe checks
// it live and says DOWN. Before DataPath, /readyz kept answering ready from
// the cache for up to MinInterval after the primary died.
func TestDataPathFailureDropsTheCachedReport(t *testing.T) {
	ctx := context.Background()
	srv := noevict(t)
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		deployment("coord", srv.Addr()))
	c := health.NewChecker(health.RuntimeSource(newRuntime(t, cfg)), cfg, health.Options{
		MinInterval: time.Hour, Clock: newStepClock(), Log: slog.New(slog.DiscardHandler)})
	require.True(t, c.Readiness(ctx).Ready)

	srv.Kill()
	assert.True(t, c.Readiness(ctx).Ready, "within MinInterval the cached report stands")
	c.DataPath("other", false) // not a selected deployment: ignored
	assert.True(t, c.Readiness(ctx).Ready)

	c.DataPath("coord", false)
	rep := c.Readiness(ctx)
	assert.False(t, rep.Ready, "a failed call drops the cached report")
	assert.Equal(t, health.Down, roleOf(t, rep, policy.RoleCoordination).Status)
	c.DataPath("coord", false) // no change of verdict: the new report is cached again
	assert.False(t, c.Readiness(ctx).Ready)
}

// TestDataPathSuccessWakesTheHandshake: after a live failure the handshake
// retries with backoff; the first call that reaches the deployment again
// runs it at once, so readiness does not lag the data path by a backoff.
// The step clock never releases the backoff here: only the wake can end it.
func TestDataPathSuccessWakesTheHandshake(t *testing.T) {
	ctx := context.Background()
	srv := noevict(t)
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		deployment("coord", srv.Addr()))
	f := start(t, newRuntime(t, cfg), cfg, true, policy.StartupPolicy{})
	f.logs.await(t, passed, "coord", 1)
	require.True(t, f.checker.Readiness(ctx).Ready)

	srv.Kill()
	f.checker.DataPath("coord", false)
	assert.Equal(t, health.Down, roleOf(t, f.checker.Readiness(ctx), policy.RoleCoordination).Status)
	f.clock.nextSleep(t) // the re-run handshake failed and backs off

	srv.Restart(t)
	f.checker.DataPath("coord", true)
	// Woken without a release: the loop attempts again, and either passes
	// or (go-redis may still answer with the last dial error for about a
	// second) backs off once more — both prove the backoff was cut short.
	deadline := time.After(30 * time.Second)
	for woke := false; !woke; {
		select {
		case <-f.clock.sleeps:
			woke = true
			f.clock.release <- struct{}{}
		case <-f.logs.added:
			woke = len(f.logs.matching(passed, "coord")) == 2
		case <-deadline:
			t.Fatalf("the handshake loop was not woken:\n%s", f.logs.all())
		}
	}
	for len(f.logs.matching(passed, "coord")) < 2 {
		select {
		case <-f.clock.sleeps:
			f.clock.release <- struct{}{}
		case <-f.logs.added:
		case <-deadline:
			t.Fatalf("the handshake never passed again:\n%s", f.logs.all())
		}
	}
	assert.True(t, f.checker.Readiness(ctx).Ready)
}
