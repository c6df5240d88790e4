package flight_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/flight"
)

// Every test that blocks runs in a testing/synctest bubble: synctest.Wait
// returns once every other goroutine of the bubble is blocked, and the
// bubble's clock only moves when all of them are, so "the load has
// started", "every caller is attached" and "five seconds passed" are exact
// facts, not hopes about scheduling.

func testConfig() flight.Config {
	return flight.Config{MaxKeys: 8, MaxWaiters: 64, LoadTimeout: time.Minute}
}

// newGroup builds a Group that is closed when the test ends.
func newGroup(t *testing.T, cfg flight.Config) *flight.Group[string, string] {
	t.Helper()
	g, err := flight.New[string, string](cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g
}

// loadCall is one run of a loader's fn: its context, and the channel the
// test answers it on.
type loadCall struct {
	ctx context.Context
	ret chan string
}

// loader hands every fn run to the test and returns what the test sends.
// With honourCtx, fn returns ctx.Err() when its context ends; without it,
// fn ignores its context (a badly written source).
type loader struct {
	n         atomic.Int32
	calls     chan loadCall
	honourCtx bool
}

func newLoader(honourCtx bool) *loader {
	return &loader{calls: make(chan loadCall, 64), honourCtx: honourCtx}
}

func (l *loader) fn(ctx context.Context) (string, error) {
	l.n.Add(1)
	c := loadCall{ctx: ctx, ret: make(chan string)}
	l.calls <- c
	if !l.honourCtx {
		return <-c.ret, nil
	}
	select {
	case v := <-c.ret:
		return v, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// next returns the fn run that has started.
func (l *loader) next(t *testing.T) loadCall {
	t.Helper()
	select {
	case c := <-l.calls:
		return c
	default:
		t.Fatal("no load has started")
		return loadCall{}
	}
}

type outcome struct {
	v      string
	shared bool
	err    error
}

// do calls g.Do on a goroutine of its own.
func do(g *flight.Group[string, string], ctx context.Context, key string, fn func(context.Context) (string, error)) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		v, shared, err := g.Do(ctx, key, fn)
		ch <- outcome{v, shared, err}
	}()
	return ch
}

// ready returns the outcome of a call that must have returned.
func ready(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	default:
		t.Fatal("the call has not returned")
		return outcome{}
	}
}

// pending asserts that a call has not returned.
func pending(t *testing.T, ch <-chan outcome) {
	t.Helper()
	select {
	case o := <-ch:
		t.Fatalf("the call returned: %+v", o)
	default:
	}
}

// loadThrough runs one call of key that starts its own load to the end,
// the load returning v. It runs inside a synctest bubble.
func loadThrough(t *testing.T, g *flight.Group[string, string], l *loader, key, v string) outcome {
	t.Helper()
	out := do(g, t.Context(), key, l.fn)
	synctest.Wait()
	l.next(t).ret <- v
	synctest.Wait()
	return ready(t, out)
}

// assertIdle: nothing in flight, nothing running, nobody waiting.
func assertIdle(t *testing.T, g *flight.Group[string, string]) {
	t.Helper()
	s := g.Stats()
	assert.Zero(t, s.InFlight, "in flight")
	assert.Zero(t, s.Running, "running")
	assert.Zero(t, s.Waiters, "waiters")
}
