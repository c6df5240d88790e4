package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// countingObserver is a real (non-no-op) observer, so the admission hook
// takes its timed, labelled path.
type countingObserver struct {
	nopObserver
	done int
	last string
	out  certainty.Outcome
}

func (o *countingObserver) CommandDone(_ string, _ policy.Lane, command string, outcome certainty.Outcome, _ time.Duration) {
	o.done++
	o.last, o.out = command, outcome
}

// The whole hook path of a GET (admission: gate, in-flight slot, marker,
// certainty; guard: catalog, lane, namespace, budgets, reply measurement)
// costs one allocation: the call marker, which is also the call's context.
func TestHookPathAllocations(t *testing.T) {
	ctx := context.Background()
	for _, obs := range []Observer{nopObserver{}, &countingObserver{}} {
		hook, key := hookChainObserved(t, obs)
		cmd := redis.NewStringCmd(ctx, "get", key)
		var err error
		allocs := testing.AllocsPerRun(200, func() { err = hook(ctx, cmd) })
		require.NoError(t, err)
		assert.LessOrEqual(t, allocs, 1.0, "%T", obs)
		assert.Len(t, cmd.Val(), 256)
	}
}

// With a real observer every command is still reported with its catalog
// label and outcome (the no-op fast path must not leak into it).
func TestHookPathReportsToObserver(t *testing.T) {
	obs := &countingObserver{}
	hook, key := hookChainObserved(t, obs)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		require.NoError(t, hook(ctx, redis.NewStringCmd(ctx, "get", key)))
	}
	assert.Equal(t, 3, obs.done)
	assert.Equal(t, "GET", obs.last)
	assert.Equal(t, certainty.Applied, obs.out)
}
