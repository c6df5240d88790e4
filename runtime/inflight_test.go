package runtime

import (
	"context"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInflightBoundUnderChurn: many goroutines acquiring and releasing a
// small bound never hold more than the bound, and every one of them gets
// through (a lost wake-up would leave a waiter stuck until its hour-long
// wait ends, which the completion deadline below catches).
func TestInflightBoundUnderChurn(t *testing.T) {
	for _, bound := range []int{1, 2, 7} {
		f := newInflight(bound)
		var holders, peak atomic.Int64
		var wg sync.WaitGroup
		for range 48 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 300 {
					if !f.acquire(context.Background(), time.Hour) {
						t.Error("acquire with an hour to wait failed")
						return
					}
					h := holders.Add(1)
					for {
						p := peak.Load()
						if h <= p || peak.CompareAndSwap(p, h) {
							break
						}
					}
					holders.Add(-1)
					f.release()
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("bound %d: waiters still stuck after 60s with slots free: a wake-up was lost (in flight %d, waiters %d)",
				bound, f.load(), f.waiters.Load())
		}
		assert.LessOrEqual(t, peak.Load(), int64(bound))
		assert.Equal(t, 0, f.load())
		assert.Zero(t, f.waiters.Load())
	}
}

// TestInflightWaitersAdmittedOneByOne: with the lane full, each release
// admits exactly one waiter.
func TestInflightWaitersAdmittedOneByOne(t *testing.T) {
	f := newInflight(2)
	require.True(t, f.tryAcquire())
	require.True(t, f.tryAcquire())
	require.False(t, f.tryAcquire(), "full")

	admitted := make(chan struct{}, 5)
	for range 5 {
		go func() {
			if f.acquire(context.Background(), time.Hour) {
				admitted <- struct{}{}
			}
		}()
	}
	require.Eventually(t, func() bool { return f.waiters.Load() == 5 }, 10*time.Second, time.Millisecond)
	for i := range 5 {
		f.release()
		select {
		case <-admitted:
		case <-time.After(10 * time.Second):
			t.Fatalf("release %d admitted no waiter", i)
		}
		select {
		case <-admitted:
			t.Fatalf("release %d admitted two waiters", i)
		case <-time.After(20 * time.Millisecond):
		}
	}
	assert.Equal(t, 2, f.load())
}

// TestInflightGivesUp: a full lane refuses after the wait or when the
// caller's context ends, and leaves no registration or slot behind.
func TestInflightGivesUp(t *testing.T) {
	f := newInflight(1)
	require.True(t, f.tryAcquire())

	start := time.Now()
	assert.False(t, f.acquire(context.Background(), 30*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	assert.False(t, f.acquire(ctx, time.Hour))

	assert.Equal(t, 1, f.load())
	assert.Zero(t, f.waiters.Load())
	f.release()
	assert.True(t, f.acquire(context.Background(), time.Millisecond), "the freed slot is usable")
}

// TestInflightBurstOfReleases: releases arriving before any waiter runs
// each admit a waiter (none is left behind while slots are free).
func TestInflightBurstOfReleases(t *testing.T) {
	// One P: the releasing goroutine runs all its releases before any
	// waiter is scheduled.
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1))
	const bound = 3
	f := newInflight(bound)
	for range bound {
		require.True(t, f.tryAcquire())
	}
	admitted := make(chan struct{}, bound)
	for range bound {
		go func() {
			if f.acquire(context.Background(), time.Hour) {
				admitted <- struct{}{}
			}
		}()
	}
	require.Eventually(t, func() bool { return f.waiters.Load() == bound }, 10*time.Second, time.Millisecond)
	for range bound {
		f.release()
	}
	for i := range bound {
		select {
		case <-admitted:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d waiters admitted; %d slots stayed free", i, bound, bound-f.load())
		}
	}
}
