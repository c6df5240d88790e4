package runtime

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/internal/natbatch"
)

// pipeRecorder is a go-redis hook that records the length of every
// pipeline that reaches it (after the guard: only what is sent).
type pipeRecorder struct {
	mu   sync.Mutex
	lens []int
}

func (p *pipeRecorder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *pipeRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipeRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.mu.Lock()
		p.lens = append(p.lens, len(cmds))
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (p *pipeRecorder) take() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lens
	p.lens = nil
	return l
}

// heldReader is a ScopedReader with one flight whose next lone read waits
// until released, so the reads that follow queue deterministically.
type heldReader struct {
	*ScopedReader
	mu     sync.Mutex
	hold   chan struct{}
	paused chan struct{}
}

func newHeldReader(dep *Deployment, maxBatch int) *heldReader {
	h := &heldReader{}
	one := func(ctx context.Context, c scopedCall) {
		h.mu.Lock()
		hold, paused := h.hold, h.paused
		h.hold = nil
		h.mu.Unlock()
		if hold != nil {
			close(paused)
			<-hold
		}
		dep.sendRead(ctx, c)
	}
	h.ScopedReader = &ScopedReader{d: dep, q: natbatch.New(1, maxBatch, one, dep.sendReads)}
	return h
}

func (h *heldReader) holdNext() (release func(), paused <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hold, p := make(chan struct{}), make(chan struct{})
	h.hold, h.paused = hold, p
	return func() { close(hold) }, p
}

// readResult is one read's answer.
type readResult struct {
	rd  ScopedRead
	err error
}

// queueReads holds the reader's flight with a first read, queues reads
// behind it one by one, then releases the flight and returns every
// answer, the first's at index 0.
func queueReads(t *testing.T, h *heldReader, first func() (ScopedRead, error), reads ...func() (ScopedRead, error)) []readResult {
	t.Helper()
	release, paused := h.holdNext()
	out := make([]readResult, len(reads)+1)
	var wg sync.WaitGroup
	run := func(i int, f func() (ScopedRead, error)) {
		defer wg.Done()
		rd, err := f()
		out[i] = readResult{rd, err}
	}
	wg.Add(1)
	go run(0, first)
	<-paused
	for i, f := range reads {
		wg.Add(1)
		go run(i+1, f)
		require.Eventually(t, func() bool { return h.q.Queued() == i+1 }, 10*time.Second, time.Millisecond)
	}
	release()
	wg.Wait()
	return out
}

// TestScopedReaderBatchesReads: reads queued behind a busy flight leave as
// one pipeline, and each gets its own answer: found, absent, too large
// (sized afterwards), of the wrong type, with and without the anchor.
func TestScopedReaderBatchesReads(t *testing.T) {
	srv := redistest.StartStandalone(t)
	r := newRuntime(t, testConfig(testDeployment("main", standalone(srv.Addr()))))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	rec := &pipeRecorder{}
	dep.regular.client.AddHook(rec)
	ctx := ctxT(t, 30*time.Second)
	admin := srv.Admin()
	gen := []byte("generation-0123456789")
	const max = 64
	anchor, entry := scopedKeys(t, r.Keys(), "batched", "a", gen)
	_, absent := scopedKeys(t, r.Keys(), "batched", "b", gen)
	_, big := scopedKeys(t, r.Keys(), "batched", "c", gen)
	_, hash := scopedKeys(t, r.Keys(), "batched", "d", gen)
	require.NoError(t, admin.Set(ctx, anchor.Redis(), gen, 0).Err())
	require.NoError(t, admin.Set(ctx, entry.Redis(), "value-a", time.Minute).Err())
	require.NoError(t, admin.Set(ctx, big.Redis(), strings.Repeat("z", 1000), time.Minute).Err())
	require.NoError(t, admin.HSet(ctx, hash.Redis(), "f", "v").Err())
	require.NoError(t, dep.Ping(ctx))
	rec.take()

	h := newHeldReader(dep, 16)
	got := queueReads(t, h,
		func() (ScopedRead, error) { return h.ReadMember(ctx, entry, max) },
		func() (ScopedRead, error) { return h.ReadScoped(ctx, anchor, entry, max) },
		func() (ScopedRead, error) { return h.ReadMember(ctx, absent, max) },
		func() (ScopedRead, error) { return h.ReadMember(ctx, big, max) },
		func() (ScopedRead, error) { return h.ReadMember(ctx, hash, max) },
		func() (ScopedRead, error) { return h.ReadScoped(ctx, anchor, absent, max) },
	)
	value := ScopedRead{Length: 7, Found: true, Value: []byte("value-a")}
	require.NoError(t, got[0].err)
	assert.Equal(t, value, got[0].rd, "the held lone read")
	require.NoError(t, got[1].err)
	assert.Equal(t, ScopedRead{Anchor: gen, AnchorFound: true, Length: 7, Found: true, Value: []byte("value-a")}, got[1].rd)
	require.NoError(t, got[2].err)
	assert.Equal(t, ScopedRead{}, got[2].rd, "absent")
	require.NoError(t, got[3].err)
	assert.Equal(t, ScopedRead{Length: 1000, Found: true, Value: []byte(strings.Repeat("z", max+1))}, got[3].rd,
		"too large: its head, and its length from a STRLEN of its own")
	requireWrongType(t, got[4].err)
	require.NoError(t, got[5].err)
	assert.Equal(t, ScopedRead{Anchor: gen, AnchorFound: true}, got[5].rd)
	// Five queued reads, two of them with the anchor: one pipeline of 7.
	assert.Equal(t, []int{7}, rec.take(), "the queued reads left as one pipeline")
}

// TestScopedReaderRefusedReadAlone: the guard refuses a pipeline whole when
// one of its commands is refused; a batch refused so is sent again read by
// read, so only the read whose GETRANGE exceeds the reply budget fails.
func TestScopedReaderRefusedReadAlone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	d := testDeployment("main", standalone(srv.Addr()))
	d.Budgets.MaxReplyBytes = 4096
	r := newRuntime(t, testConfig(d))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	ctx := ctxT(t, 30*time.Second)
	gen := []byte("generation-0123456789")
	h := newHeldReader(dep, 16)
	_, first := scopedKeys(t, r.Keys(), "refused", "first", gen)
	batched := make([]func() (ScopedRead, error), 4)
	for i := range batched {
		_, m := scopedKeys(t, r.Keys(), "refused", "k"+strconv.Itoa(i), gen)
		require.NoError(t, srv.Admin().Set(ctx, m.Redis(), "v"+strconv.Itoa(i), time.Minute).Err())
		maxBytes := 64
		if i == 2 {
			maxBytes = 4096 // asks for 4097 bytes: over the reply budget
		}
		batched[i] = func() (ScopedRead, error) { return h.ReadMember(ctx, m, maxBytes) }
	}
	got := queueReads(t, h, func() (ScopedRead, error) { return h.ReadMember(ctx, first, 64) }, batched...)
	require.NoError(t, got[0].err)
	for i, g := range got[1:] {
		if i == 2 {
			var rej *guard.Rejection
			require.ErrorAs(t, g.err, &rej, "the oversized read is refused")
			assert.Equal(t, certainty.Rejected, outcomeOf(t, g.err))
			continue
		}
		require.NoError(t, g.err, "read %d is not refused for another read's command", i)
		assert.Equal(t, "v"+strconv.Itoa(i), string(g.rd.Value))
	}
}

// TestScopedReaderCanceledWhileQueued: a queued read whose context ends is
// never sent and reports OVERLOADED_BEFORE_SEND.
func TestScopedReaderCanceledWhileQueued(t *testing.T) {
	srv := redistest.StartStandalone(t)
	r := newRuntime(t, testConfig(testDeployment("main", standalone(srv.Addr()))))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	ctx := ctxT(t, 30*time.Second)
	gen := []byte("generation-0123456789")
	_, m := scopedKeys(t, r.Keys(), "canceled", "k", gen)
	h := newHeldReader(dep, 16)
	release, paused := h.holdNext()
	done := make(chan error, 1)
	go func() { _, err := h.ReadMember(ctx, m, 64); done <- err }()
	<-paused
	before := srv.CommandCalls(t, "getrange")
	qctx, cancel := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() { _, err := h.ReadMember(qctx, m, 64); queued <- err }()
	require.Eventually(t, func() bool { return h.q.Queued() == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	err = <-queued
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, certainty.OverloadedBeforeSend, outcomeOf(t, err))
	release()
	require.NoError(t, <-done)
	assert.Equal(t, int64(1), srv.CommandCalls(t, "getrange")-before, "only the held read reached the server")
}
