package programs

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// gate is a go-redis hook that records command names (pipelined ones as
// "pipeline:<name>") and can hold the next single command or the next
// pipeline until released, so tests can fill a Batcher's queue
// deterministically.
type gate struct {
	mu          sync.Mutex
	names       []string
	holdOne     chan struct{} // non-nil: the next single command waits on it
	holdPipe    chan struct{} // non-nil: the next pipeline waits on it
	onePaused   chan struct{} // closed when a held command reached the hook
	pipePaused  chan struct{}
	beforePipe  func() // runs when a held pipeline is released
	pipelineLen []int
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmdName(cmd)
		g.mu.Lock()
		g.names = append(g.names, name)
		hold, paused := g.holdOne, g.onePaused
		if name == "evalsha" || name == "fcall" {
			g.holdOne = nil
		} else {
			hold = nil
		}
		g.mu.Unlock()
		if hold != nil {
			close(paused)
			<-hold
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.mu.Lock()
		for _, c := range cmds {
			g.names = append(g.names, "pipeline:"+cmdName(c))
		}
		g.pipelineLen = append(g.pipelineLen, len(cmds))
		hold, paused, before := g.holdPipe, g.pipePaused, g.beforePipe
		g.holdPipe = nil
		g.mu.Unlock()
		if hold != nil {
			close(paused)
			<-hold
			if before != nil {
				before()
			}
		}
		return next(ctx, cmds)
	}
}

// holdNextCommand makes the next EVALSHA/FCALL wait; it returns the release
// function and a channel closed once the command is held.
func (g *gate) holdNextCommand() (release func(), paused <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, p := make(chan struct{}), make(chan struct{})
	g.holdOne, g.onePaused = h, p
	return func() { close(h) }, p
}

func (g *gate) holdNextPipeline(before func()) (release func(), paused <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, p := make(chan struct{}), make(chan struct{})
	g.holdPipe, g.pipePaused, g.beforePipe = h, p, before
	return func() { close(h) }, p
}

func (g *gate) take() (names []string, pipelines []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range g.names {
		if n == "hello" || n == "auth" || n == "ping" || n == "client" || len(n) > 6 && n[:7] == "client " {
			continue
		}
		names = append(names, n)
	}
	pipelines = g.pipelineLen
	g.names, g.pipelineLen = nil, nil
	return names, pipelines
}

func gatedClient(t *testing.T, s *redistest.Server, g *gate) *redis.Client {
	t.Helper()
	c := standaloneClient(t, s)
	c.AddHook(g)
	return c
}

// eachBatcherMode runs body once per program mode with a Batcher(1, 64)
// over a gated client of one private server (the library deployed, so
// both modes find their programs).
func eachBatcherMode(t *testing.T, body func(t *testing.T, mode policy.ProgramMode, s *redistest.Server, g *gate, b *Batcher)) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			cat := mustCatalog(t)
			require.NoError(t, Deploy(context.Background(), cat, s.Admin()))
			e, err := NewExecutor(cat, mode, gatedClient(t, s, g))
			require.NoError(t, err)
			body(t, mode, s, g, e.NewBatcher(1, 64))
		})
	}
}

func (b *Batcher) queued() int { return b.q.Queued() }

// queuer is a Batcher or a Batched Executor: something calls queue in.
type queuer interface{ queued() int }

func (e *Executor) queued() int { return e.calls.Queued() }

func waitQueued(t *testing.T, b queuer, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.queued() == n }, 5*time.Second, time.Millisecond, "want %d queued", n)
}

// callResult is the outcome of one call started by goCall.
type callResult struct {
	r   RateResult
	err error
}

// goCall starts one call of plan on st (no dedup) and returns where its
// outcome arrives.
func goCall(ctx context.Context, b *Batcher, st keys.Key, plan *TokenBucketPlan) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		r, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
		ch <- callResult{r, err}
	}()
	return ch
}

// queueBehindHeld starts n calls: the first takes b's only flight and is
// held in g's hook until release; queueBehindHeld returns once the other
// n-1 are queued behind it. The outcomes arrive in calls, first call first.
func queueBehindHeld(t *testing.T, ctx context.Context, g *gate, b *Batcher, st keys.Key, plan *TokenBucketPlan, n int) (release func(), calls []<-chan callResult) {
	t.Helper()
	release, paused := g.holdNextCommand()
	calls = append(calls, goCall(ctx, b, st, plan))
	<-paused
	for range n - 1 {
		calls = append(calls, goCall(ctx, b, st, plan))
	}
	waitQueued(t, b, n-1)
	return release, calls
}

func bucketPlan(capacity int64) *TokenBucketPlan {
	// Two tokens per 12.5 h: far below one token during a test.
	return NewTokenBucketPlan(TokenBucketRequest{CapacityScaled: capacity * RateScale, RefillScaled: 2 * RateScale,
		RefillPeriod: 45_000 * time.Second, CostScaled: RateScale,
		RateOptions: RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second}})
}

// A lone caller never pipelines; calls that arrive while the only flight is
// busy queue and go out as one pipeline sent by the first of them, and
// every call gets its own exact decision.
func TestBatcherBatchesOnlyUnderLoad(t *testing.T) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			cat := mustCatalog(t)
			require.NoError(t, Deploy(ctx, cat, s.Admin()))
			e, err := NewExecutor(cat, mode, gatedClient(t, s, g))
			require.NoError(t, err)
			b := e.NewBatcher(1, 64)
			st, _ := rateKeys(t, testBuilder(t), "batch-"+string(mode), "bucket")
			plan := bucketPlan(100)
			call := map[policy.ProgramMode]string{policy.ProgramsEvalshaManaged: "evalsha", policy.ProgramsFunctionsProvisioned: "fcall"}[mode]

			for i := range 5 {
				r, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
				require.NoError(t, err)
				require.Equal(t, RateAllowed, r.Status)
				// Whole tokens: the bucket refills a micro-token every 22.5 ms,
				// which a slow runner can see between two calls.
				assert.Equal(t, int64(100-1-i), r.Remaining/RateScale)
			}
			names, pipes := g.take()
			assert.Empty(t, pipes, "a lone caller is never pipelined")
			for _, n := range names {
				assert.Contains(t, []string{call, "script load"}, n)
			}

			release, calls := queueBehindHeld(t, ctx, g, b, st, plan, 21)
			release()
			var remaining []int
			for _, c := range calls {
				res := <-c
				require.NoError(t, res.err)
				require.Equal(t, RateAllowed, res.r.Status)
				remaining = append(remaining, int(res.r.Remaining/RateScale))
			}
			sort.Ints(remaining)
			want := make([]int, 21)
			for i := range want {
				want[i] = 74 + i // 95 down to 74: each call consumed exactly one token
			}
			assert.Equal(t, want, remaining)
			names, pipes = g.take()
			assert.Equal(t, []int{20}, pipes, "the 20 queued calls went out as one pipeline")
			assert.Equal(t, 1, count(names, call))
			assert.Equal(t, 20, count(names, "pipeline:"+call))
			assert.Zero(t, b.queued())
			assert.Zero(t, b.q.InFlight())
		})
	}
}

func count(names []string, n string) int {
	c := 0
	for _, x := range names {
		if x == n {
			c++
		}
	}
	return c
}

// A queued call whose context ends before its batch is taken is removed and
// reported never sent; it never reaches Redis.
func TestBatcherQueuedCallCanceledIsNeverSent(t *testing.T) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, gatedClient(t, s, g))
	require.NoError(t, err)
	b := e.NewBatcher(1, 64)
	st, _ := rateKeys(t, testBuilder(t), "batch-cancel", "bucket")
	plan := bucketPlan(10)
	ctx := context.Background()
	_, err = b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "") // loads the script
	require.NoError(t, err)
	g.take()

	release, calls := queueBehindHeld(t, ctx, g, b, st, plan, 1)
	cctx, cancel := context.WithCancel(ctx)
	queued := goCall(cctx, b, st, plan)
	waitQueued(t, b, 1)
	cancel()
	err = (<-queued).err
	require.Error(t, err)
	assert.Equal(t, certainty.OverloadedBeforeSend, certainty.Classify(err, true), "never sent")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, b.queued())
	release()
	require.NoError(t, (<-calls[0]).err)
	names, pipes := g.take()
	assert.Empty(t, pipes)
	assert.Equal(t, 1, count(names, "evalsha"), "only the first call reached Redis")
	v, err := s.Admin().Get(ctx, st.Redis()).Result()
	require.NoError(t, err)
	// Whole tokens (the state is micro-tokens): the bucket refills a
	// micro-token every 22.5 ms, which a loaded machine sees between calls.
	assert.Regexp(t, `^1:8\d{6}:\d+:r1$`, v, "the canceled call consumed nothing")
}

// A call whose batch was already taken stops waiting when its context
// ends and reports INDETERMINATE (its command is still sent and applies),
// while the batch completes for the others.
func TestBatcherAbandonedMemberIsIndeterminate(t *testing.T) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, gatedClient(t, s, g))
	require.NoError(t, err)
	b := e.NewBatcher(1, 64)
	st, _ := rateKeys(t, testBuilder(t), "batch-abandon", "bucket")
	plan := bucketPlan(10)
	ctx := context.Background()
	// Load the script first so the held pipeline is the only thing in flight.
	_, err = b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
	require.NoError(t, err)

	releaseOne, calls := queueBehindHeld(t, ctx, g, b, st, plan, 2) // calls[1] will lead the batch
	cctx, cancel := context.WithCancel(ctx)
	member := goCall(cctx, b, st, plan)
	waitQueued(t, b, 2)
	releasePipe, pipePaused := g.holdNextPipeline(nil)
	releaseOne()
	require.NoError(t, (<-calls[0]).err)
	<-pipePaused // the batch of two is taken and held on its way out
	cancel()
	err = (<-member).err
	require.Error(t, err)
	assert.Equal(t, certainty.Indeterminate, certainty.Classify(err, true))
	releasePipe()
	leader := <-calls[1]
	require.NoError(t, leader.err)
	assert.Equal(t, RateAllowed, leader.r.Status)
	v, err := s.Admin().Get(ctx, st.Redis()).Result()
	require.NoError(t, err)
	assert.Regexp(t, `^1:6\d{6}:\d+:r1$`, v, "the abandoned call was still sent and applied")
	_, pipes := g.take()
	assert.Equal(t, []int{2}, pipes)
	assert.Zero(t, b.q.InFlight())
}

// An exact NOSCRIPT inside a pipeline ran nothing: each affected call is
// loaded and sent again alone, and every decision is exact.
func TestBatcherNoScriptInPipeline(t *testing.T) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, gatedClient(t, s, g))
	require.NoError(t, err)
	b := e.NewBatcher(1, 64)
	st, _ := rateKeys(t, testBuilder(t), "batch-noscript", "bucket")
	plan := bucketPlan(100)
	ctx := context.Background()

	releaseOne, calls := queueBehindHeld(t, ctx, g, b, st, plan, 6)
	releasePipe, _ := g.holdNextPipeline(func() { require.NoError(t, s.Admin().ScriptFlush(ctx).Err()) })
	releaseOne()
	releasePipe()
	for _, c := range calls {
		require.NoError(t, (<-c).err)
	}
	v, err := s.Admin().Get(ctx, st.Redis()).Result()
	require.NoError(t, err)
	assert.Regexp(t, `^1:94\d{6}:\d+:r1$`, v, "six calls, six tokens")
	names, pipes := g.take()
	assert.Equal(t, []int{5}, pipes)
	assert.Equal(t, 5, count(names, "pipeline:evalsha"))
	assert.Positive(t, count(names, "script load"))
	assert.Zero(t, s.CommandCalls(t, "eval"), "never EVAL")
}

// A pipeline whose replies never come (a stalled connection) leaves each of
// its calls INDETERMINATE, and the Batcher serves normally afterwards.
func TestBatcherStalledPipelineIsIndeterminate(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, s.Addr())
	user, pass := s.AdminUser()
	g := &gate{}
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), Username: user, Password: pass, DisableIdentity: true, MaxRetries: -1,
		PoolSize: 4, DialTimeout: time.Second, ReadTimeout: 300 * time.Millisecond, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(g)
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, c)
	require.NoError(t, err)
	b := e.NewBatcher(1, 64)
	st, _ := rateKeys(t, testBuilder(t), "batch-stall", "bucket")
	plan := bucketPlan(100)
	ctx := context.Background()
	_, err = b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "") // loads the script
	require.NoError(t, err)

	releaseOne, calls := queueBehindHeld(t, ctx, g, b, st, plan, 4)
	p.Stall()
	releaseOne()
	for _, c := range calls {
		err := (<-c).err
		require.Error(t, err)
		assert.Equal(t, certainty.Indeterminate, certainty.Classify(err, true), "%v", err)
	}
	p.Passthrough()
	assert.Zero(t, b.queued())
	assert.Zero(t, b.q.InFlight())
	r, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
	require.NoError(t, err)
	assert.Equal(t, RateAllowed, r.Status)
}

// Many goroutines through a Batcher admit exactly the capacity on one
// subject, with and without dedup (race detector recommended), and the
// decisions of a batched retry with the same evaluation id replay.
func TestBatcherExactAdmission(t *testing.T) {
	s := redistest.StartStandalone(t)
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, standaloneClient(t, s))
	require.NoError(t, err)
	b := e.NewBatcher(2, 8)
	ctx := context.Background()
	const workers, perWorker, limit = 16, 25, 100
	for _, dedup := range []bool{false, true} {
		t.Run("dedup="+strconv.FormatBool(dedup), func(t *testing.T) {
			req := TokenBucketRequest{CapacityScaled: limit * RateScale, RefillScaled: 2 * RateScale, RefillPeriod: 45_000 * time.Second,
				CostScaled: RateScale, RateOptions: RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second}}
			if dedup {
				req.DedupTTL, req.DedupMaxEntries = time.Minute, 4096
			}
			plan := NewTokenBucketPlan(req)
			st, dd := rateKeys(t, testBuilder(t), "batch-exact-"+strconv.FormatBool(dedup), "bucket")
			var mu sync.Mutex
			counts := map[RateStatus]int{}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWorker {
						id := fmt.Sprintf("w%d-%d", w, i)
						r, err := b.RateTokenBucketPlan(ctx, st, dd, plan, RateScale, id)
						if !assert.NoError(t, err) {
							return
						}
						mu.Lock()
						counts[r.Status]++
						mu.Unlock()
						if dedup && i%5 == 0 {
							again, err := b.RateTokenBucketPlan(ctx, st, dd, plan, RateScale, id)
							if assert.NoError(t, err) {
								assert.Equal(t, RateDedupReplay, again.Status)
								assert.Equal(t, r.Allowed, again.Allowed)
								assert.Equal(t, r.Remaining, again.Remaining)
							}
						}
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, limit, counts[RateAllowed], "exactly the limit is admitted")
			assert.Equal(t, workers*perWorker-limit, counts[RateDenied])
			assert.Zero(t, b.queued())
		})
	}
}

// On Cluster a batch spans subjects on different primaries: go-redis splits
// the pipeline by slot, and every decision is exact.
func TestBatcherCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, cl.Admin()))
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := NewExecutor(cat, mode, clusterClient(t, cl))
			require.NoError(t, err)
			b := e.NewBatcher(1, 32)
			plan := bucketPlan(10)
			const subjects, workers = 12, 24
			states := make([]keys.Key, subjects)
			slots := map[uint16]bool{}
			for i := range states {
				states[i], _ = rateKeys(t, testBuilder(t), fmt.Sprintf("batch-cluster-%s-%d", mode, i), "bucket")
				slots[states[i].Slot()] = true
			}
			require.Greater(t, len(slots), 1)
			var (
				mu      sync.Mutex
				allowed = map[string]int64{}
				wg      sync.WaitGroup
			)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range subjects {
						k := states[(i+w)%subjects]
						r, err := b.RateTokenBucketPlan(ctx, k, keys.Key{}, plan, RateScale, "")
						if !assert.NoError(t, err) {
							return
						}
						if r.Status == RateAllowed {
							mu.Lock()
							allowed[k.Redis()]++
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			for _, k := range states {
				assert.Equal(t, int64(10), allowed[k.Redis()], "capacity 10 per subject, 24 requests each")
			}
		})
	}
}

// The queue is bounded (maxFlights*maxBatch): a call that finds it full is
// sent alone at once, under the lane's own in-flight bound, instead of
// waiting.
func TestBatcherFullQueueSendsAlone(t *testing.T) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, gatedClient(t, s, g))
	require.NoError(t, err)
	b := e.NewBatcher(1, 1)
	st, _ := rateKeys(t, testBuilder(t), "batch-full", "bucket")
	plan := bucketPlan(10)
	ctx := context.Background()
	_, err = b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "") // loads the script
	require.NoError(t, err)

	release, calls := queueBehindHeld(t, ctx, g, b, st, plan, 2)
	// The queue is full: this call goes out alone while the first is held.
	r, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
	require.NoError(t, err)
	assert.Equal(t, RateAllowed, r.Status)
	assert.Equal(t, 1, b.queued(), "still queued behind the held flight")
	release()
	for _, c := range calls {
		require.NoError(t, (<-c).err)
	}
	v, err := s.Admin().Get(ctx, st.Redis()).Result()
	require.NoError(t, err)
	assert.Regexp(t, `^1:6\d{6}:\d+:r1$`, v, "four calls, four tokens")
	_, pipes := g.take()
	assert.Equal(t, []int{1}, pipes, "the queued call left as a batch of one")
}

// One pipeline may carry calls of every lean rate program: each is its own
// EVALSHA/FCALL of its own program, decoded on its own, and every decision
// is exact.
func TestBatcherMixesPrograms(t *testing.T) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			cat := mustCatalog(t)
			require.NoError(t, Deploy(ctx, cat, s.Admin()))
			e, err := NewExecutor(cat, mode, gatedClient(t, s, g))
			require.NoError(t, err)
			b := e.NewBatcher(1, 64)
			bld := testBuilder(t)
			opts := RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second}
			const limit = 100
			month := 30 * 24 * time.Hour
			type side struct {
				name string
				plan *RatePlan
				kind string
				unit int64
			}
			sides := []side{
				{"token-bucket", bucketPlan(limit), "bucket", RateScale},
				{"fixed-window", NewFixedWindowPlan(FixedWindowRequest{Limit: limit, Cost: 1, Window: month, RateOptions: opts}), "window", 1},
				{"sliding-counter", NewSlidingCounterPlan(SlidingCounterRequest{Limit: limit, Cost: 1, Window: month, RateOptions: opts}), "window", 1},
				{"gcra", NewGCRAPlan(GCRARequest{Limit: limit, Period: month, Cost: 1, RateOptions: opts}), "bucket", 1},
				{"fixed-window-v3", NewFixedWindowV3Plan(FixedWindowRequest{Limit: limit, Cost: 1, Window: 365 * 24 * time.Hour, RateOptions: opts}), "window", 1},
			}
			// Warm every program (loads the scripts) before holding the lane.
			stateOf := map[string]keys.Key{}
			for _, sd := range sides {
				st, _ := rateKeys(t, bld, "mix-"+string(mode)+"-"+sd.name, sd.kind)
				stateOf[sd.name] = st
				r, err := b.RatePlan(ctx, st, keys.Key{}, sd.plan, sd.unit, "")
				require.NoError(t, err)
				require.Equal(t, RateAllowed, r.Status, sd.name)
			}
			g.take()

			release, paused := g.holdNextCommand()
			first := goCall(ctx, b, stateOf["token-bucket"], sides[0].plan)
			<-paused
			const perSide = 5
			results := map[string][]<-chan callResult{}
			for range perSide {
				for _, sd := range sides {
					ch := make(chan callResult, 1)
					go func() {
						r, err := b.RatePlan(ctx, stateOf[sd.name], keys.Key{}, sd.plan, sd.unit, "")
						ch <- callResult{r, err}
					}()
					results[sd.name] = append(results[sd.name], ch)
				}
			}
			waitQueued(t, b, perSide*len(sides))
			release()
			require.NoError(t, (<-first).err)
			for _, sd := range sides {
				var remaining []int
				for _, ch := range results[sd.name] {
					res := <-ch
					require.NoError(t, res.err, sd.name)
					require.Equal(t, RateAllowed, res.r.Status, sd.name)
					remaining = append(remaining, int(res.r.Remaining/sd.unit))
				}
				sort.Ints(remaining)
				// Each side had one warm-up call (the bucket two: the held
				// one too), then exactly one unit per call.
				top := limit - 2
				if sd.name == "token-bucket" {
					top = limit - 3
				}
				want := make([]int, perSide)
				for i := range want {
					want[i] = top - perSide + 1 + i
				}
				assert.Equal(t, want, remaining, sd.name)
			}
			_, pipes := g.take()
			assert.Equal(t, []int{perSide * len(sides)}, pipes, "the queued calls of five programs went out as one pipeline")
		})
	}
}

// raceInOnePipeline holds b's one flight with call(n, 0), queues call(i, 1)
// and call(i, 2) for every i < n behind it, lets the flight go, checks
// that the 2n queued calls left as one pipeline and returns, for every i,
// its owners by the status they got.
func raceInOnePipeline(t *testing.T, g *gate, b queuer, n int, call func(i, owner int) (string, error)) map[int]map[string][]int {
	t.Helper()
	type res struct {
		i, owner int
		status   string
		err      error
	}
	g.take()
	release, paused := g.holdNextCommand()
	out := make(chan res, 2*n+1)
	run := func(i, owner int) {
		go func() {
			st, err := call(i, owner)
			out <- res{i, owner, st, err}
		}()
	}
	run(n, 0)
	<-paused
	for i := range n {
		run(i, 1)
		run(i, 2)
	}
	waitQueued(t, b, 2*n)
	release()
	got := map[int]map[string][]int{}
	for range 2*n + 1 {
		x := <-out
		require.NoError(t, x.err)
		if got[x.i] == nil {
			got[x.i] = map[string][]int{}
		}
		got[x.i][x.status] = append(got[x.i][x.status], x.owner)
	}
	_, pipes := g.take()
	assert.Equal(t, []int{2 * n}, pipes, "the queued calls went out as one pipeline")
	return got
}
