package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// failoverRecovery is the documented bound on how long after the promoted
// replica reports itself master every slot is served again. The refresh
// path needs well under a second (topology.go: refreshInterval, go-redis's
// 200 ms cooldown, one CLUSTER SLOTS round trip, and the other nodes
// learning the promotion over the cluster bus); before the refresh existed
// it took the rest of go-redis's 60 s reload interval (~55 s measured).
const failoverRecovery = 5 * time.Second

// failoverObserver counts the runtime's CLUSTER SLOTS calls (go-redis's
// background slot-map loads run through the node clients' hooks as
// top-level calls) and the refreshes the runtime requested.
type failoverObserver struct {
	nopObserver
	slots     atomic.Int64
	refreshes atomic.Int64
}

func (o *failoverObserver) CommandDone(_ string, _ policy.Lane, command string, _ certainty.Outcome, _ time.Duration) {
	if command == "CLUSTER|SLOTS" {
		o.slots.Add(1)
	}
}

func (o *failoverObserver) SlotMapRefresh(string, policy.Lane) { o.refreshes.Add(1) }

// shardTally counts the outcomes of the SETs sent for one shard's keys:
// all of them, and those started after the promoted replica's baseline.
type shardTally struct {
	all, post [8]atomic.Int64
}

// answered is what the server must have counted: executed (APPLIED) or
// refused with a reply (NOT_APPLIED: CLUSTERDOWN, MOVED ... are counted by
// commandstats as rejected_calls). INDETERMINATE may or may not have
// reached it; the *_BEFORE_SEND outcomes never did.
func answered(o *[8]atomic.Int64) int64 {
	return o[certainty.Applied].Load() + o[certainty.NotApplied].Load() +
		o[certainty.Conflict].Load() + o[certainty.Rejected].Load()
}

// TestClusterFailoverRefreshesTheSlotMap kills a primary under steady SET
// traffic over keys on all three shards and checks that every slot is
// served again within failoverRecovery after the replica's promotion, and
// that no SET was sent twice: on each node that can have received the
// test's SETs, commandstats counts every answered SET exactly once and at
// most every ambiguous one besides.
func TestClusterFailoverRefreshesTheSlotMap(t *testing.T) {
	// A 1 s node timeout (the setup) keeps the failover short.
	cl := redistest.StartCluster(t, redistest.WithConfig("cluster-node-timeout", "1000"))
	d := testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})
	d.Timeouts.Command = time.Second
	d.Lanes[policy.LaneRegular] = policy.LaneConfig{PoolSize: 8, MaxInFlight: 16}
	obs := &failoverObserver{}
	logs := &logRecords{}
	r := newRuntime(t, testConfig(d), WithObserver(obs), WithLogger(slog.New(logs)))
	c := laneClient(t, r, policy.RoleCoordination, policy.LaneRegular)
	ctx := ctxT(t, 50*time.Second)

	primaries, replicas := cl.Primaries(), cl.Replicas()
	const victim = 0 // primaries[victim] dies, replicas[victim] takes over
	shardOf := map[string]int{}
	for i, p := range primaries {
		shardOf[p.Addr()] = i
	}
	// Two keys per shard.
	var keys []string
	var keyShard []int
	perShard := make([]int, len(primaries))
	for i := 0; len(keys) < 2*len(primaries); i++ {
		require.Less(t, i, 1000, "no keys found for every shard")
		key := testKey(fmt.Sprintf("failover-%d", i))
		owner, err := cl.Admin().MasterForKey(ctx, key)
		require.NoError(t, err)
		s, ok := shardOf[owner.Options().Addr]
		require.True(t, ok, "slot owner %s is not a primary", owner.Options().Addr)
		if perShard[s] < 2 {
			perShard[s]++
			keys, keyShard = append(keys, key), append(keyShard, s)
		}
	}

	// The surviving primaries only ever receive the test's SETs (a primary
	// is not fed by replication), so their counters start now.
	base := make([]int64, len(primaries))
	for i, p := range primaries {
		base[i] = p.CommandCalls(t, "set")
	}

	tallies := make([]shardTally, len(primaries))
	lastOK := make([]atomic.Int64, len(keys)) // UnixNano of the key's latest APPLIED SET
	var post atomic.Bool                      // set once the promoted replica's baseline is taken
	var untyped atomic.Int64
	var seq atomic.Int64
	halt := runWorkers(t, 4, func(i int) {
		k := i % len(keys)
		counted := post.Load()
		err := c.Set(ctx, keys[k], seq.Add(1), time.Minute).Err()
		o, typed := setOutcome(err)
		if !typed {
			untyped.Add(1)
		}
		tallies[keyShard[k]].all[o].Add(1)
		if counted {
			tallies[keyShard[k]].post[o].Add(1)
		}
		if o == certainty.Applied {
			lastOK[k].Store(time.Now().UnixNano())
		}
		time.Sleep(time.Millisecond) // pacing: a steady load, not a busy loop of refused dials
	})

	servedSince := func(since time.Time) bool {
		for k := range keys {
			if lastOK[k].Load() <= since.UnixNano() {
				return false
			}
		}
		return true
	}
	start := time.Now()
	require.Eventually(t, func() bool { return servedSince(start) }, 10*time.Second, 10*time.Millisecond,
		"steady state: every key written")
	require.Zero(t, obs.refreshes.Load(), "no refresh while healthy")

	killedAt := time.Now()
	slotsAtKill := obs.slots.Load()
	primaries[victim].Kill()
	promoted := replicas[victim]
	// Nothing reaches the replica from here until it is promoted: its
	// primary is dead (no more replicated SETs) and the runtime's slot map
	// names the dead primary until the promotion. (A SET counted below
	// starts after this point; one started before it picked its node
	// before the promotion, at least a node timeout away.)
	promotedBase := promoted.CommandCalls(t, "set")
	post.Store(true)

	var promotedAt time.Time
	require.Eventually(t, func() bool {
		role, err := promoted.Admin().Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			promotedAt = time.Now()
			return true
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "replica promotion")

	var recoveredAt time.Time
	require.Eventually(t, func() bool {
		if servedSince(promotedAt) {
			recoveredAt = time.Now()
			return true
		}
		return false
	}, 2*failoverRecovery, 10*time.Millisecond, "every slot served again after the promotion")
	slotsCalls, refreshes := obs.slots.Load()-slotsAtKill, obs.refreshes.Load()
	halt()

	storm := recoveredAt.Sub(killedAt)
	t.Logf("promotion %v after kill; every slot served %v after promotion; during the %v storm: %d refreshes, %d CLUSTER SLOTS",
		promotedAt.Sub(killedAt).Round(time.Millisecond), recoveredAt.Sub(promotedAt).Round(time.Millisecond),
		storm.Round(time.Millisecond), refreshes, slotsCalls)
	for s := range tallies {
		var b []string
		for _, o := range certainty.Outcomes() {
			if n := tallies[s].all[o].Load(); n > 0 {
				b = append(b, fmt.Sprintf("%s=%d", o, n))
			}
		}
		t.Logf("shard %d SETs: %v", s, b)
	}

	assert.LessOrEqual(t, recoveredAt.Sub(promotedAt), failoverRecovery, "recovery after promotion")
	assert.Zero(t, untyped.Load(), "every error carries its certainty")
	// The refresh bound (topology.go): at most one per interval per lane,
	// and only the regular lane carried traffic.
	assert.Positive(t, refreshes)
	assert.LessOrEqual(t, refreshes, int64(storm/refreshInterval)+2, "refreshes are spaced by refreshInterval")
	assert.Equal(t, 1, logs.count(slog.LevelWarn, refreshWarn), "one WARN for the failover")
	// Calls to the dead primary failed before send (refused dials), and
	// kept that certainty.
	assert.Positive(t, tallies[victim].all[certainty.UnavailableBeforeSend].Load())

	// No SET was sent twice: per node, answered ≤ counted ≤ answered + ambiguous.
	check := func(name string, got int64, o *[8]atomic.Int64) {
		t.Helper()
		ans, amb := answered(o), o[certainty.Indeterminate].Load()
		assert.GreaterOrEqual(t, got, ans, "%s: every answered SET reached the node", name)
		assert.LessOrEqual(t, got, ans+amb, "%s: no SET executed twice (%d answered, %d ambiguous)", name, ans, amb)
	}
	for s, p := range primaries {
		if s != victim {
			check(fmt.Sprintf("primary %d", s), p.CommandCalls(t, "set")-base[s], &tallies[s].all)
		}
	}
	check("promoted replica", promoted.CommandCalls(t, "set")-promotedBase, &tallies[victim].post)

	// The failed-over keys are readable on their new primary.
	for k, key := range keys {
		require.NoError(t, c.Get(ctx, key).Err(), "key %d (shard %d)", k, keyShard[k])
	}
}

// setOutcome is the certainty of a SET's error and whether the error was
// typed (a *certainty.Error).
func setOutcome(err error) (certainty.Outcome, bool) {
	if err == nil || errors.Is(err, redis.Nil) {
		return certainty.Applied, true
	}
	var ce *certainty.Error
	if !errors.As(err, &ce) || !ce.Outcome.Valid() {
		return certainty.Indeterminate, false
	}
	return ce.Outcome, true
}
