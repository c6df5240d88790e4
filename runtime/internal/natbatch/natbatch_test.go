package natbatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// item is a call: its id, and the send that answered it.
type item struct {
	id     int
	sentBy string // "one", or "many" with the batch's size
	size   int
}

// sender records sends and can hold the next lone send until released,
// so a test fills the queue deterministically.
type sender struct {
	mu      sync.Mutex
	batches [][]int
	hold    chan struct{} // non-nil: the next one waits on it
	paused  chan struct{} // closed when the held send started
	// holdMany and pausedMany are hold and paused for the next batch.
	holdMany, pausedMany chan struct{}
}

func (s *sender) one(_ context.Context, it *item) {
	s.mu.Lock()
	hold, paused := s.hold, s.paused
	s.hold = nil
	s.batches = append(s.batches, []int{it.id})
	s.mu.Unlock()
	if hold != nil {
		close(paused)
		<-hold
	}
	it.sentBy, it.size = "one", 1
}

func (s *sender) many(ctx context.Context, its []*item) {
	if ctx.Done() != nil {
		panic("a batch is sent without its sender's cancellation")
	}
	s.mu.Lock()
	hold, paused := s.holdMany, s.pausedMany
	s.holdMany = nil
	s.mu.Unlock()
	if hold != nil {
		close(paused)
		<-hold
	}
	ids := make([]int, len(its))
	for i, it := range its {
		ids[i] = it.id
		it.sentBy, it.size = "many", len(its)
	}
	s.mu.Lock()
	s.batches = append(s.batches, ids)
	s.mu.Unlock()
}

// holdNext makes the next lone send wait until the returned release.
func (s *sender) holdNext() (release func(), paused <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, p := make(chan struct{}), make(chan struct{})
	s.hold, s.paused = h, p
	return func() { close(h) }, p
}

// holdNextMany makes the next batch send wait until the returned release.
func (s *sender) holdNextMany() (release func(), paused <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, p := make(chan struct{}), make(chan struct{})
	s.holdMany, s.pausedMany = h, p
	return func() { close(h) }, p
}

func (s *sender) take() [][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batches
	s.batches = nil
	return b
}

// waitQueued waits until q holds n calls.
func waitQueued(t *testing.T, q *Queue[*item], n int) {
	t.Helper()
	require.Eventually(t, func() bool { return q.Queued() == n }, 10*time.Second, time.Millisecond,
		"%d calls queued", n)
}

// start runs Do for each item in its own goroutine, one after another
// (each queued before the next starts), and returns their outcomes.
func start(t *testing.T, ctx context.Context, q *Queue[*item], queuedBefore int, its ...*item) <-chan map[int]Outcome {
	t.Helper()
	out := make(chan map[int]Outcome, 1)
	var (
		mu  sync.Mutex
		got = map[int]Outcome{}
		wg  sync.WaitGroup
	)
	for i, it := range its {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := q.Do(ctx, it)
			mu.Lock()
			got[it.id] = o
			mu.Unlock()
		}()
		waitQueued(t, q, queuedBefore+i+1)
	}
	go func() { wg.Wait(); out <- got }()
	return out
}

func TestLoneCallsAreSentAlone(t *testing.T) {
	s := &sender{}
	q := New(2, 8, s.one, s.many)
	for i := range 3 {
		it := &item{id: i}
		assert.Equal(t, Sent, q.Do(context.Background(), it))
		assert.Equal(t, "one", it.sentBy)
	}
	assert.Equal(t, [][]int{{0}, {1}, {2}}, s.take())
	assert.Equal(t, 0, q.Queued())
	assert.Equal(t, 0, q.InFlight(), "every flight handed back")
}

// TestQueuedCallsLeaveTogether: with every flight held, later calls
// queue and leave, oldest first, in batches of at most maxBatch, each
// sent by its first call when a send completes.
func TestQueuedCallsLeaveTogether(t *testing.T) {
	s := &sender{}
	q := New(2, 2, s.one, s.many)
	var held []chan Outcome
	var releases []func()
	for i := range 2 {
		release, paused := s.holdNext()
		done := make(chan Outcome, 1)
		go func() { done <- q.Do(context.Background(), &item{id: 10 + i}) }()
		<-paused
		held, releases = append(held, done), append(releases, release)
	}
	its := []*item{{id: 1}, {id: 2}, {id: 3}, {id: 4}}
	outs := start(t, context.Background(), q, 0, its...)
	releases[0]()
	assert.Equal(t, Sent, <-held[0])
	// The first flight's completion sent both batches, one after the
	// other, while the second flight stayed held.
	got := <-outs
	for _, it := range its {
		assert.Equal(t, Sent, got[it.id], "call %d", it.id)
		assert.Equal(t, "many", it.sentBy, "call %d", it.id)
		assert.Equal(t, 2, it.size, "call %d", it.id)
	}
	releases[1]()
	assert.Equal(t, Sent, <-held[1])
	assert.Equal(t, [][]int{{10}, {11}, {1, 2}, {3, 4}}, s.take())
	assert.Equal(t, 0, q.Queued())
	assert.Equal(t, 0, q.InFlight())

	// A batch of one (a single queued call) is still a batch send.
	release, paused := s.holdNext()
	done := make(chan Outcome, 1)
	go func() { done <- q.Do(context.Background(), &item{id: 20}) }()
	<-paused
	release2, paused2 := s.holdNext()
	done2 := make(chan Outcome, 1)
	go func() { done2 <- q.Do(context.Background(), &item{id: 21}) }()
	<-paused2
	last := &item{id: 5}
	outs = start(t, context.Background(), q, 0, last)
	release()
	release2()
	assert.Equal(t, Sent, <-done)
	assert.Equal(t, Sent, <-done2)
	assert.Equal(t, map[int]Outcome{5: Sent}, <-outs)
	assert.Equal(t, "many", last.sentBy)
}

// TestCanceledWhileQueued: a call whose context ends before its batch is
// taken leaves the queue and is never sent.
func TestCanceledWhileQueued(t *testing.T) {
	s := &sender{}
	q := New(1, 8, s.one, s.many)
	release, paused := s.holdNext()
	done := make(chan Outcome, 1)
	go func() { done <- q.Do(context.Background(), &item{id: 0}) }()
	<-paused
	ctx, cancel := context.WithCancel(context.Background())
	gone := &item{id: 1}
	outs := start(t, ctx, q, 0, gone)
	kept := start(t, context.Background(), q, 1, &item{id: 2})
	cancel()
	assert.Equal(t, map[int]Outcome{1: Abandoned}, <-outs)
	waitQueued(t, q, 1)
	release()
	assert.Equal(t, Sent, <-done)
	assert.Equal(t, map[int]Outcome{2: Sent}, <-kept)
	assert.Equal(t, [][]int{{0}, {2}}, s.take(), "the abandoned call was never sent")
	assert.Empty(t, gone.sentBy)
}

// TestCanceledAfterTaken: once a batch is taken, a call that is not its
// sender returns Left at once, and the sender still sends the batch for
// it, even when the sender's own context ends meanwhile.
func TestCanceledAfterTaken(t *testing.T) {
	s := &sender{}
	q := New(1, 8, s.one, s.many)
	release, paused := s.holdNext()
	done := make(chan Outcome, 1)
	go func() { done <- q.Do(context.Background(), &item{id: 0}) }()
	<-paused

	leadCtx, cancelLead := context.WithCancel(context.Background())
	otherCtx, cancelOther := context.WithCancel(context.Background())
	lead, other := &item{id: 1}, &item{id: 2}
	leadOut := start(t, leadCtx, q, 0, lead)
	otherOut := start(t, otherCtx, q, 1, other)
	releaseMany, inMany := s.holdNextMany()
	release()
	assert.Equal(t, Sent, <-done)
	<-inMany // the batch is taken and being sent
	cancelOther()
	assert.Equal(t, map[int]Outcome{2: Left}, <-otherOut)
	cancelLead()
	releaseMany()
	assert.Equal(t, map[int]Outcome{1: Sent}, <-leadOut)
	assert.Equal(t, [][]int{{0}, {1, 2}}, s.take())
	assert.Equal(t, "many", other.sentBy, "the sender filled the call that left")
}

// TestFullQueueSendsAlone: a call that finds the queue full is sent at
// once, alone, without taking a flight.
func TestFullQueueSendsAlone(t *testing.T) {
	s := &sender{}
	q := New(1, 2, s.one, s.many)
	release, paused := s.holdNext()
	done := make(chan Outcome, 1)
	go func() { done <- q.Do(context.Background(), &item{id: 0}) }()
	<-paused
	outs := start(t, context.Background(), q, 0, &item{id: 1}, &item{id: 2})
	extra := &item{id: 3}
	assert.Equal(t, Sent, q.Do(context.Background(), extra), "not queued: the queue holds maxFlights*maxBatch")
	assert.Equal(t, "one", extra.sentBy)
	release()
	assert.Equal(t, Sent, <-done)
	assert.Equal(t, map[int]Outcome{1: Sent, 2: Sent}, <-outs)
	assert.Equal(t, [][]int{{0}, {3}, {1, 2}}, s.take())
}

// TestConcurrentCallsAllAnswered: many goroutines, every call answered
// once, each by exactly one send (run with -race).
func TestConcurrentCallsAllAnswered(t *testing.T) {
	s := &sender{}
	q := New(2, 4, s.one, s.many)
	const n = 400
	its := make([]*item, n)
	var wg sync.WaitGroup
	for i := range its {
		its[i] = &item{id: i}
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.Equal(t, Sent, q.Do(context.Background(), its[i]))
		}()
	}
	wg.Wait()
	seen := map[int]int{}
	for _, b := range s.take() {
		assert.LessOrEqual(t, len(b), 4)
		for _, id := range b {
			seen[id]++
		}
	}
	assert.Len(t, seen, n)
	for id, c := range seen {
		assert.Equal(t, 1, c, "call %d sent %d times", id, c)
		assert.NotEmpty(t, its[id].sentBy)
	}
	assert.Equal(t, 0, q.Queued())
}
