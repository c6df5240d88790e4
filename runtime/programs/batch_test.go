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

func (b *Batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

func waitQueued(t *testing.T, b *Batcher, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.queued() == n }, 5*time.Second, time.Millisecond, "want %d queued", n)
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

			release, paused := g.holdNextCommand()
			var wg sync.WaitGroup
			results := make(chan RateResult, 21)
			errs := make(chan error, 21)
			run := func() {
				defer wg.Done()
				r, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
				results <- r
				errs <- err
			}
			wg.Add(1)
			go run() // takes the only flight and is held in the hook
			<-paused
			for range 20 {
				wg.Add(1)
				go run()
			}
			waitQueued(t, b, 20)
			release()
			wg.Wait()
			close(results)
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			var remaining []int
			for r := range results {
				require.Equal(t, RateAllowed, r.Status)
				remaining = append(remaining, int(r.Remaining/RateScale))
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
			assert.Zero(t, b.flights)
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

	release, paused := g.holdNextCommand()
	done := make(chan error, 1)
	go func() {
		_, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
		done <- err
	}()
	<-paused
	cctx, cancel := context.WithCancel(ctx)
	queuedErr := make(chan error, 1)
	go func() {
		_, err := b.RateTokenBucketPlan(cctx, st, keys.Key{}, plan, RateScale, "")
		queuedErr <- err
	}()
	waitQueued(t, b, 1)
	cancel()
	err = <-queuedErr
	require.Error(t, err)
	assert.Equal(t, certainty.OverloadedBeforeSend, certainty.Classify(err, true), "never sent")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, b.queued())
	release()
	require.NoError(t, <-done)
	names, pipes := g.take()
	assert.Empty(t, pipes)
	assert.Equal(t, 1, count(names, "evalsha"), "only the first call reached Redis")
	v, err := s.Admin().Get(ctx, st.Redis()).Result()
	require.NoError(t, err)
	assert.Regexp(t, `^1:8000000:\d+:r1$`, v, "the canceled call consumed nothing")
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

	releaseOne, onePaused := g.holdNextCommand()
	first := make(chan error, 1)
	go func() {
		_, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
		first <- err
	}()
	<-onePaused
	leader := make(chan RateResult, 1)
	go func() {
		r, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
		assert.NoError(t, err)
		leader <- r
	}()
	waitQueued(t, b, 1)
	cctx, cancel := context.WithCancel(ctx)
	member := make(chan error, 1)
	go func() {
		_, err := b.RateTokenBucketPlan(cctx, st, keys.Key{}, plan, RateScale, "")
		member <- err
	}()
	waitQueued(t, b, 2)
	releasePipe, pipePaused := g.holdNextPipeline(nil)
	releaseOne()
	require.NoError(t, <-first)
	<-pipePaused // the batch of two is taken and held on its way out
	cancel()
	err = <-member
	require.Error(t, err)
	assert.Equal(t, certainty.Indeterminate, certainty.Classify(err, true))
	releasePipe()
	r := <-leader
	assert.Equal(t, RateAllowed, r.Status)
	v, err := s.Admin().Get(ctx, st.Redis()).Result()
	require.NoError(t, err)
	assert.Regexp(t, `^1:6000000:\d+:r1$`, v, "the abandoned call was still sent and applied")
	_, pipes := g.take()
	assert.Equal(t, []int{2}, pipes)
	assert.Zero(t, b.flights)
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

	releaseOne, onePaused := g.holdNextCommand()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
			errs <- err
		}()
		if i == 0 {
			<-onePaused
		}
	}
	waitQueued(t, b, 5)
	releasePipe, _ := g.holdNextPipeline(func() { require.NoError(t, s.Admin().ScriptFlush(ctx).Err()) })
	releaseOne()
	releasePipe()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	v, err := s.Admin().Get(ctx, st.Redis()).Result()
	require.NoError(t, err)
	assert.Regexp(t, `^1:94000000:\d+:r1$`, v, "six calls, six tokens")
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

	releaseOne, onePaused := g.holdNextCommand()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
			errs <- err
		}()
		if i == 0 {
			<-onePaused
		}
	}
	waitQueued(t, b, 3)
	p.Stall()
	releaseOne()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.Error(t, err)
		assert.Equal(t, certainty.Indeterminate, certainty.Classify(err, true), "%v", err)
	}
	p.Passthrough()
	assert.Zero(t, b.queued())
	assert.Zero(t, b.flights)
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

	release, paused := g.holdNextCommand()
	first, queued := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
		first <- err
	}()
	<-paused
	go func() {
		_, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
		queued <- err
	}()
	waitQueued(t, b, 1)
	// The queue is full: this call goes out alone while the first is held.
	r, err := b.RateTokenBucketPlan(ctx, st, keys.Key{}, plan, RateScale, "")
	require.NoError(t, err)
	assert.Equal(t, RateAllowed, r.Status)
	assert.Equal(t, 1, b.queued(), "still queued behind the held flight")
	release()
	require.NoError(t, <-first)
	require.NoError(t, <-queued)
	v, err := s.Admin().Get(ctx, st.Redis()).Result()
	require.NoError(t, err)
	assert.Regexp(t, `^1:6000000:\d+:r1$`, v, "four calls, four tokens")
	_, pipes := g.take()
	assert.Equal(t, []int{1}, pipes, "the queued call left as a batch of one")
}
