package runtime

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// TestClusterReshardUnderProgramTraffic reshards one slot as an operator
// does (SETSLOT IMPORTING/MIGRATING, MIGRATE key by key, SETSLOT NODE) while
// four workers run the increment program (EVALSHA, not retry-safe) on five
// counters in that slot. The target primary has never seen the program, so
// the first ASK'd call there meets NOSCRIPT. Every call must succeed —
// served by the source, through ASK during the migration, through MOVED
// after it — and each counter must end exactly at the number of increments
// reported APPLIED: no increment ran twice, none was lost.
func TestClusterReshardUnderProgramTraffic(t *testing.T) {
	cl := redistest.StartCluster(t)
	d := testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})
	d.Lanes[policy.LaneScript] = policy.LaneConfig{PoolSize: 4, MaxInFlight: 8}
	obs := newRedirectCounter()
	r := newRuntime(t, testConfig(d), WithObserver(obs))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	ex := dep.Programs()
	ctx := ctxT(t, 60*time.Second)

	counters, err := r.Keys().Group(keys.Spec{Capability: keys.CapRate, Region: "reshard", KeyVersion: 1,
		Kind: "bucket", Parts: [][]byte{[]byte("subject")}}, "bucket", "window", "log", "dedup", "concurrency")
	require.NoError(t, err)
	slot := int(counters[0].Slot())
	for _, k := range counters {
		require.Equal(t, slot, int(k.Slot()), "one hash tag")
	}
	from := cl.SlotOwner(t, slot)
	var to *redistest.Server
	for _, p := range cl.Primaries() {
		if p != from {
			to = p
			break
		}
	}

	const limit = 1 << 40
	applied := make([]atomic.Int64, len(counters))
	var failures sync.Map // outcome → *atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Value
	halt := runWorkers(t, 4, func(i int) {
		k := i % len(counters)
		res, err := ex.IncrementWithInitialTTL(ctx, counters[k], 1, limit, 10*time.Minute)
		if err == nil && res.Status == programs.IncrementIncremented {
			applied[k].Add(1)
			return
		}
		o := certainty.Indeterminate
		if err == nil {
			o = res.Outcome()
			err = fmt.Errorf("status %v", res.Status)
		} else if oc, ok := setOutcome(err); ok {
			o = oc
		}
		n, _ := failures.LoadOrStore(o, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		failed.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	})

	// progress waits until every counter got `more` further APPLIED
	// increments: traffic ran on every key through the phase.
	progress := func(phase string, more int64) {
		t.Helper()
		base := make([]int64, len(counters))
		for k := range counters {
			base[k] = applied[k].Load()
		}
		require.Eventually(t, func() bool {
			for k := range counters {
				if applied[k].Load() < base[k]+more {
					return false
				}
			}
			return true
		}, 20*time.Second, 5*time.Millisecond, "traffic on every counter during %s", phase)
	}

	progress("steady state on the source", 20)
	m := cl.BeginSlotMigration(t, slot, to)
	progress("slot open, keys still on the source", 20)
	for range counters {
		require.Equal(t, 1, m.MigrateKeys(t, 1))
		progress("keys split between source and target", 20)
	}
	m.Finish(t)
	progress("slot on the target", 50)
	halt()

	followed, unfollowed := obs.counts()
	t.Logf("increments applied %v; failures %d (first: %v); redirects followed %v, not followed %v",
		loads(applied), failed.Load(), firstErr.Load(), followed, unfollowed)
	failures.Range(func(o, n any) bool {
		t.Logf("failed calls %v: %d", o, n.(*atomic.Int64).Load())
		return true
	})
	assert.Zero(t, failed.Load(), "every call succeeded during the reshard")
	assert.Positive(t, followed[RedirectAsk], "calls were served through ASK while the slot was migrating")
	assert.Empty(t, unfollowed)

	// Exactly once: each counter on the target equals its APPLIED count.
	assert.Same(t, to, cl.SlotOwner(t, slot))
	for k, key := range counters {
		v, err := to.Admin().Get(ctx, key.Redis()).Result()
		require.NoError(t, err, "counter %d", k)
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		assert.Equal(t, applied[k].Load(), n, "counter %d: server value == increments reported APPLIED", k)
	}
}

// runWorkers runs step(i) in n goroutines (worker w passes i = w, w+n,
// w+2n ...) until the returned halt, which waits for them; the test's
// cleanup halts them too.
func runWorkers(t *testing.T, n int, step func(i int)) (halt func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i += n {
				select {
				case <-stop:
					return
				default:
					step(i)
				}
			}
		}()
	}
	var once sync.Once
	halt = func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(halt)
	return halt
}

func loads(a []atomic.Int64) []int64 {
	out := make([]int64, len(a))
	for i := range a {
		out[i] = a[i].Load()
	}
	return out
}

// TestClusterSplitProgramDuringMigrationIsNotApplied: a program whose keys
// the migration has split — one already on the target, one still on the
// source — is refused with TRYAGAIN before it runs. The runtime reports it
// NOT_APPLIED (code TRYAGAIN) and does not resend it; INFO commandstats on
// both primaries proves that neither executed it. Once the slot is
// finished the same call runs on the target through MOVED, once.
func TestClusterSplitProgramDuringMigrationIsNotApplied(t *testing.T) {
	cl := redistest.StartCluster(t)
	d := testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})
	r := newRuntime(t, testConfig(d))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	ctx := ctxT(t, 60*time.Second)

	ks, err := r.Keys().Group(keys.Spec{Capability: keys.CapRate, Region: "split", KeyVersion: 1,
		Kind: "window", Parts: [][]byte{[]byte("subject")}}, "window", "dedup")
	require.NoError(t, err)
	state, dedup := ks[0], ks[1]
	slot := int(state.Slot())
	from := cl.SlotOwner(t, slot)
	var to *redistest.Server
	for _, p := range cl.Primaries() {
		if p != from {
			to = p
			break
		}
	}
	req := func(id string) programs.FixedWindowRequest {
		return programs.FixedWindowRequest{Limit: 100, Cost: 1, Window: time.Hour, RateOptions: programs.RateOptions{
			PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second,
			DedupTTL: time.Minute, DedupMaxEntries: 16, EvaluationID: []byte(id)}}
	}
	res, err := dep.Programs().RateFixedWindow(ctx, state, dedup, req("first"))
	require.NoError(t, err)
	require.Equal(t, programs.RateAllowed, res.Status)
	require.Equal(t, int64(2), from.Admin().Exists(ctx, state.Redis(), dedup.Redis()).Val(), "both keys written")

	m := cl.BeginSlotMigration(t, slot, to)
	require.Equal(t, 1, m.MigrateKeys(t, 1), "one of the two keys moved: the program's keys are split")
	fromBefore, toBefore := from.CommandStats(t, "evalsha"), to.CommandStats(t, "evalsha")

	_, err = dep.Programs().RateFixedWindow(ctx, state, dedup, req("split"))
	require.Error(t, err)
	var ce *certainty.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, certainty.NotApplied, ce.Outcome)
	assert.Equal(t, "TRYAGAIN", ce.Code)
	fromAfter := from.CommandStats(t, "evalsha")
	assert.Equal(t, fromBefore.Rejected+1, fromAfter.Rejected, "the source refused it once")
	assert.Equal(t, fromBefore.Calls, fromAfter.Calls, "and did not execute it")
	assert.Equal(t, toBefore, to.CommandStats(t, "evalsha"), "it never reached the target: not resent")

	m.Finish(t)
	res, err = dep.Programs().RateFixedWindow(ctx, state, dedup, req("after"))
	require.NoError(t, err)
	assert.Equal(t, programs.RateAllowed, res.Status)
	assert.Equal(t, int64(98), res.Remaining, "two increments applied: the refused one never counted")
	toAfter := to.CommandStats(t, "evalsha")
	assert.Equal(t, int64(1), (toAfter.Calls-toAfter.Failed)-(toBefore.Calls-toBefore.Failed),
		"executed once on the new owner (a NOSCRIPT there is a failed call, then the program is loaded)")
}
