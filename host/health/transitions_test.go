package health_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// transitions records OnTransition calls.
type transitions struct {
	mu  sync.Mutex
	all []health.Transition
}

func (tr *transitions) observe(t health.Transition) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.all = append(tr.all, t)
}

func (tr *transitions) list() []health.Transition {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]health.Transition(nil), tr.all...)
}

const changed = "redis role readiness changed"

// switchSource is a Source whose live check fails while down is set. It
// stands in for Redis only to drive the checker's own bookkeeping (what is
// logged and reported per transition), not as evidence of Redis behaviour.
type switchSource struct{ down atomic.Bool }

func (s *switchSource) ProbeDeployment(context.Context, string) (runtime.DeploymentProbe, error) {
	return runtime.DeploymentProbe{}, nil
}

func (s *switchSource) Live(context.Context, string, string) error {
	if s.down.Load() {
		return &runtime.LiveError{Deployment: "main", Class: runtime.ClassOutage, Reason: "unreachable"}
	}
	return nil
}

// TestTransitionLogsAreRateLimited flaps a required role: every change
// reaches OnTransition, but at most 4 lines per role per LogInterval are
// logged, and the next line after the window carries the suppressed count.
func TestTransitionLogsAreRateLimited(t *testing.T) {
	src := &switchSource{}
	clock := newStepClock()
	logs := newLogs()
	tr := &transitions{}
	cfg := redisConfig(map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "main", Required: true}},
		deployment("main", "127.0.0.1:1"))
	c := health.NewChecker(src, cfg, health.Options{
		MinInterval: -1, LogInterval: time.Minute, Clock: clock, Log: slog.New(logs), OnTransition: tr.observe,
	})
	ctx := context.Background()
	require.True(t, c.Readiness(ctx).Ready) // first report: logged, not a transition

	// 10 changes within one minute.
	for i := range 10 {
		src.down.Store(i%2 == 0)
		clock.Advance(time.Second)
		c.Readiness(ctx)
	}
	got := tr.list()
	require.Len(t, got, 10)
	assert.Equal(t, health.Transition{Role: policy.RoleCoordination, Deployment: "main", From: health.Up, To: health.Down, Reason: "unreachable"}, got[0])
	assert.Equal(t, health.Transition{Role: policy.RoleCoordination, Deployment: "main", From: health.Down, To: health.Up, Reason: "ok"}, got[1])
	lines := logs.matching(changed, "main")
	assert.Len(t, lines, 1+3, "the first report and 3 changes fill the burst of 4")

	// A steady role logs nothing more; the next change after the window is
	// logged with the count it stood for.
	for range 5 {
		clock.Advance(10 * time.Second)
		c.Readiness(ctx)
	}
	src.down.Store(true)
	c.Readiness(ctx)
	lines = logs.matching(changed, "main")
	require.Len(t, lines, 5)
	last := lines[4]
	assert.Equal(t, slog.LevelWarn, last.Level)
	assert.Equal(t, "DOWN", attr(last, "status"))
	assert.Equal(t, "7", attr(last, "suppressed_transitions"))
	assert.Len(t, tr.list(), 11)
}
