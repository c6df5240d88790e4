package health_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// probe is one readiness answer and when it was asked.
type probe struct {
	start, end time.Time
	ready      bool
	reason     string
}

// TestClusterReadinessFollowsSlotCoverage kills a primary of a 3+3 cluster
// (node timeout 1 s) under continuous readiness probes and checks the
// ordering the issue asks for: every probe that started after the kill and
// ended before the replica's promotion was seen is not ready (the dead
// primary still owns slots); readiness comes back after the promotion; then
// 40 consecutive probes over at least 2 s are all ready, although the dead
// node stays in the seeds and in the cluster as a failed entry. The status
// changes are logged once each and reported to OnTransition once each.
func TestClusterReadinessFollowsSlotCoverage(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithConfig("cluster-node-timeout", "1000"))
	dep := deployment("cl", "")
	dep.Topology = &policy.Cluster{Seeds: cl.Seeds()}
	dep.Timeouts.Command = 500 * time.Millisecond
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "cl", Required: true}}, dep)
	rt := newRuntime(t, cfg)
	logs := newLogs()
	tr := &transitions{}
	checker := health.NewChecker(health.RuntimeSource(rt), cfg, health.Options{
		MinInterval: -1, Timeout: time.Second, Handshake: true, Log: slog.New(logs), OnTransition: tr.observe,
		Startup: policy.StartupPolicy{OnFailure: policy.StartupRetry, RetryInitial: 50 * time.Millisecond,
			RetryMax: 200 * time.Millisecond, AttemptTimeout: 2 * time.Second},
	})
	checker.Start(context.Background())
	t.Cleanup(checker.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ask := func() probe {
		p := probe{start: time.Now()}
		rep := checker.Readiness(ctx)
		p.end, p.ready = time.Now(), rep.Ready
		if len(rep.Roles) > 0 {
			p.reason = rep.Roles[0].Reason
		}
		return p
	}
	require.Eventually(t, func() bool { return ask().ready }, 20*time.Second, 20*time.Millisecond, "ready before the kill:\n%s", logs.all())
	for range 10 {
		require.True(t, ask().ready, "steady before the kill")
	}

	before := len(tr.list())
	logsBefore := len(logs.matching(changed, ""))
	victim, heir := cl.Primaries()[0], cl.Replicas()[0]
	killedAt := time.Now()
	victim.Kill()

	// Probe until the heir is master, then until ready again.
	var probes []probe
	var promotedAt time.Time
	for promotedAt.IsZero() {
		require.Less(t, time.Since(killedAt), 20*time.Second, "no promotion")
		probes = append(probes, ask())
		time.Sleep(5 * time.Millisecond)
		role, err := heir.Admin().Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			promotedAt = time.Now()
		}
	}
	var readyAt time.Time
	for readyAt.IsZero() {
		require.Less(t, time.Since(promotedAt), 20*time.Second, "not ready after the promotion:\n%s", logs.all())
		p := ask()
		probes = append(probes, p)
		if p.ready {
			readyAt = p.end
		}
		time.Sleep(5 * time.Millisecond)
	}

	uncovered := 0
	for _, p := range probes {
		if p.end.Before(promotedAt) {
			uncovered++
			assert.False(t, p.ready, "a probe %v after the kill, before the promotion, said ready", p.start.Sub(killedAt))
		}
	}
	require.Positive(t, uncovered, "probes ran while the slots were uncovered")

	// No flap: 40 probes in a row, over at least 2 s, all ready.
	steadyFrom := time.Now()
	for i := 0; i < 40 || time.Since(steadyFrom) < 2*time.Second; i++ {
		p := ask()
		require.True(t, p.ready, "probe %d after recovery (%v after ready) not ready: %s", i, p.start.Sub(readyAt), p.reason)
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("kill → promotion %v → ready %v; %d probes not ready before the promotion (reasons %v)",
		promotedAt.Sub(killedAt).Round(time.Millisecond), readyAt.Sub(promotedAt).Round(time.Millisecond),
		uncovered, reasons(probes, promotedAt))

	// One DOWN and one UP, reported and logged once each.
	got := tr.list()[before:]
	require.Len(t, got, 2, "%v", got)
	assert.Equal(t, health.Transition{Role: policy.RoleCoordination, Deployment: "cl", From: health.Up, To: health.Down, Reason: got[0].Reason}, got[0])
	assert.Equal(t, health.Up, got[1].To)
	assert.Equal(t, health.Down, got[1].From)
	lines := logs.matching(changed, "")[logsBefore:]
	require.Len(t, lines, 2, "%s", logs.all())
	assert.Equal(t, slog.LevelWarn, lines[0].Level)
	assert.Equal(t, "DOWN", attr(lines[0], "status"))
	assert.Equal(t, slog.LevelInfo, lines[1].Level)
	assert.Equal(t, "UP", attr(lines[1], "status"))
}

func reasons(ps []probe, before time.Time) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range ps {
		if p.end.Before(before) && !p.ready && !seen[p.reason] {
			seen[p.reason] = true
			out = append(out, p.reason)
		}
	}
	return out
}
