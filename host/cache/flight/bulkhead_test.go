package flight_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/flight"
)

type acquired struct {
	release func()
	err     error
}

func acquire(b *flight.Bulkhead, ctx context.Context) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		r, err := b.Acquire(ctx)
		ch <- acquired{r, err}
	}()
	return ch
}

func granted(t *testing.T, ch <-chan acquired) func() {
	t.Helper()
	select {
	case a := <-ch:
		require.NoError(t, a.err)
		return a.release
	default:
		t.Fatal("Acquire has not returned")
		return nil
	}
}

func newBulkhead(t *testing.T, maxConcurrent, maxQueued int) *flight.Bulkhead {
	t.Helper()
	b, err := flight.NewBulkhead(maxConcurrent, maxQueued)
	require.NoError(t, err)
	return b
}

func TestBulkheadSaturation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkhead(t, 2, 2)
		r1, err := b.Acquire(t.Context())
		require.NoError(t, err)
		r2, err := b.Acquire(t.Context())
		require.NoError(t, err)
		q1, q2 := acquire(b, t.Context()), acquire(b, t.Context())
		synctest.Wait()
		s := b.Stats()
		assert.Equal(t, 2, s.InUse)
		assert.Equal(t, 2, s.Queued)

		_, err = b.Acquire(t.Context())
		require.ErrorIs(t, err, flight.ErrBulkheadFull, "permits and queue full: refused at once")
		assert.ErrorIs(t, err, flight.ErrOverloaded)
		assert.Equal(t, uint64(1), b.Stats().RefusedFull)

		r1()
		r2()
		synctest.Wait()
		granted(t, q1)()
		granted(t, q2)()
		s = b.Stats()
		assert.Zero(t, s.InUse)
		assert.Zero(t, s.Queued)
		assert.Equal(t, uint64(4), s.Acquired)
		assert.Equal(t, uint64(2), s.Waited)
		assert.Equal(t, 2, s.MaxConcurrent)
		assert.Equal(t, 2, s.MaxQueued)
	})
}

func TestBulkheadFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkhead(t, 1, 8)
		hold, err := b.Acquire(t.Context())
		require.NoError(t, err)
		order := make(chan int, 5)
		for i := range 5 {
			go func() {
				r, err := b.Acquire(t.Context())
				if err != nil {
					order <- -1
					return
				}
				order <- i
				r()
			}()
			synctest.Wait() // queued before the next one arrives
		}
		assert.Equal(t, 5, b.Stats().Queued)
		hold()
		synctest.Wait()
		for i := range 5 {
			assert.Equal(t, i, <-order, "permits go to the oldest waiter")
		}
		assert.Zero(t, b.Stats().InUse)
	})
}

// A newcomer never overtakes the queue, even when it arrives the moment a
// permit is freed.
func TestBulkheadNewcomerQueuesBehindWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkhead(t, 1, 1)
		hold, err := b.Acquire(t.Context())
		require.NoError(t, err)
		first := acquire(b, t.Context())
		synctest.Wait()
		hold()
		newcomer := acquire(b, t.Context())
		synctest.Wait()
		releaseFirst := granted(t, first)
		select {
		case a := <-newcomer:
			t.Fatalf("the newcomer overtook the waiter: %+v", a)
		default:
		}
		assert.Equal(t, 1, b.Stats().Queued)
		releaseFirst()
		synctest.Wait()
		granted(t, newcomer)()
		assert.Zero(t, b.Stats().InUse)
	})
}

func TestBulkheadDeadlineWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBulkhead(t, 1, 4)
		hold, err := b.Acquire(t.Context())
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		q := acquire(b, ctx)
		synctest.Wait()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		a := <-q
		require.ErrorIs(t, a.err, flight.ErrBulkheadTimeout)
		assert.ErrorIs(t, a.err, context.DeadlineExceeded)
		assert.ErrorIs(t, a.err, flight.ErrOverloaded)
		assert.Nil(t, a.release)
		assert.Equal(t, 3*time.Second, time.Since(start))
		s := b.Stats()
		assert.Zero(t, s.Queued, "a timed-out waiter leaves the queue")
		assert.Equal(t, uint64(1), s.TimedOut)

		// Cancellation is the caller's own: ctx.Err(), not a timeout.
		cctx, ccancel := context.WithCancel(t.Context())
		q = acquire(b, cctx)
		synctest.Wait()
		ccancel()
		synctest.Wait()
		a = <-q
		require.ErrorIs(t, a.err, context.Canceled)
		assert.NotErrorIs(t, a.err, flight.ErrBulkheadTimeout)
		assert.Equal(t, uint64(1), b.Stats().Canceled)

		// The permit still works as before.
		hold()
		r, err := b.Acquire(t.Context())
		require.NoError(t, err)
		r()
		assert.Zero(t, b.Stats().InUse)
	})
}

func TestBulkheadEndedContext(t *testing.T) {
	b := newBulkhead(t, 1, 1)
	ctx, cancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel()
	_, err := b.Acquire(ctx)
	require.ErrorIs(t, err, flight.ErrBulkheadTimeout)
	assert.Zero(t, b.Stats().InUse, "no permit for a caller whose deadline passed")
}

func TestBulkheadReleaseIsIdempotent(t *testing.T) {
	b := newBulkhead(t, 1, 0)
	r, err := b.Acquire(t.Context())
	require.NoError(t, err)
	r()
	r()
	r2, err := b.Acquire(t.Context())
	require.NoError(t, err)
	_, err = b.Acquire(t.Context())
	require.ErrorIs(t, err, flight.ErrBulkheadFull, "the double release freed no second permit")
	s := b.Stats()
	assert.Equal(t, 1, s.InUse)
	assert.Equal(t, uint64(1), s.DoubleReleases)
	r2()
	assert.Zero(t, b.Stats().InUse)
}

func TestBulkheadValidation(t *testing.T) {
	for _, tc := range []struct {
		conc, queued int
		want         flight.Reason
	}{
		{0, 0, flight.ErrConcurrencyOutOfRange},
		{flight.MaxConcurrencyLimit + 1, 0, flight.ErrConcurrencyOutOfRange},
		{1, -1, flight.ErrQueueOutOfRange},
		{1, flight.MaxQueuedLimit + 1, flight.ErrQueueOutOfRange},
	} {
		b, err := flight.NewBulkhead(tc.conc, tc.queued)
		require.ErrorIs(t, err, tc.want)
		assert.ErrorIs(t, err, flight.ErrInvalid)
		assert.Nil(t, b)
	}
	_, err := flight.NewBulkhead(flight.MaxConcurrencyLimit, flight.MaxQueuedLimit)
	require.NoError(t, err)
}
