package fence

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGuardAdmissionRule(t *testing.T) {
	g, err := NewGuard(7, 5, Repeatable)
	require.NoError(t, err)
	cases := []struct {
		tok  Token
		want Outcome
	}{
		{Token{7, 4}, Stale},
		{Token{7, 5}, Readmitted},
		{Token{7, 6}, Admitted},
		{Token{7, 6}, Readmitted}, // same holder again
		{Token{7, 5}, Stale},      // the previous holder, late
		{Token{6, MaxCounter}, EpochRetired},
		{Token{8, 1}, EpochUnregistered}, // a token never raises the epoch
		{Token{7, 0}, Invalid},
		{Token{}, Invalid},
		{Token{7, 9}, Admitted},
	}
	for _, c := range cases {
		got := g.Admit(c.tok)
		assert.Equal(t, c.want, got, "Admit(%v)", c.tok)
		assert.Equal(t, c.want.OK(), got.Err() == nil)
	}
	assert.Equal(t, Token{7, 9}, g.Watermark())
	assert.Equal(t, Active, g.State())
}

func TestGuardStrictMode(t *testing.T) {
	g, err := NewGuard(1, 0, Strict)
	require.NoError(t, err)
	assert.Equal(t, Admitted, g.Admit(Token{1, 1}))
	assert.Equal(t, Stale, g.Admit(Token{1, 1}), "Strict: each token once")
	assert.Equal(t, Admitted, g.Admit(Token{1, 2}))
	err = g.Do(Token{1, 2}, func() error { t.Fatal("ran a stale write"); return nil })
	assert.ErrorIs(t, err, ErrStaleToken)
}

func TestGuardDoRollsBackOnError(t *testing.T) {
	g, err := NewGuard(1, 3, Repeatable)
	require.NoError(t, err)
	boom := errors.New("write failed")
	assert.ErrorIs(t, g.Do(Token{1, 8}, func() error { return boom }), boom)
	assert.Equal(t, Token{1, 3}, g.Watermark(), "a failed write does not advance the watermark")
	assert.Panics(t, func() { _ = g.Do(Token{1, 9}, func() error { panic("boom") }) })
	assert.Equal(t, Token{1, 3}, g.Watermark(), "nor does a panicking one")
	require.NoError(t, g.Do(Token{1, 4}, func() error { return nil }))
	assert.Equal(t, Token{1, 4}, g.Watermark())
}

// The key scenario: A holds (e, 5) and pauses; B acquires (e, 6) and
// writes; A's late write is rejected and the state keeps B's value.
func TestGuardStaleHolderAfterPause(t *testing.T) {
	g, err := NewGuard(42, 4, Repeatable)
	require.NoError(t, err)
	value := "initial"
	a, b := Token{42, 5}, Token{42, 6}
	require.NoError(t, g.Do(b, func() error { value = "B"; return nil }))
	err = g.Do(a, func() error { value = "A"; return nil })
	require.ErrorIs(t, err, ErrStaleToken)
	var rej *RejectError
	require.ErrorAs(t, err, &rej)
	assert.Equal(t, Stale, rej.Outcome)
	assert.Equal(t, a, rej.Token)
	assert.Equal(t, Token{42, 6}, rej.Watermark)
	assert.Equal(t, Stale, OutcomeOf(err))
	assert.Equal(t, "B", value)
}

func TestGuardRetireAndActivate(t *testing.T) {
	g, err := NewGuard(10, 3, Repeatable)
	require.NoError(t, err)
	assert.ErrorIs(t, g.Retire(9), ErrRegistrationConflict)
	require.NoError(t, g.Retire(10))
	require.NoError(t, g.Retire(10), "idempotent")
	assert.Equal(t, Retired, g.State())
	assert.Equal(t, NotActive, g.Admit(Token{10, 4}))
	assert.ErrorIs(t, g.Do(Token{10, 4}, func() error { return nil }), ErrResourceNotActive)

	assert.ErrorIs(t, g.Activate(10, 0), ErrRegistrationConflict, "a retired epoch is never reused")
	assert.ErrorIs(t, g.Activate(9, 0), ErrRegistrationConflict)
	require.NoError(t, g.Activate(11, 0))
	assert.Equal(t, Admitted, g.Admit(Token{11, 1}))
	assert.Equal(t, EpochRetired, g.Admit(Token{10, MaxCounter}), "old-epoch tokens never pass again")

	_, err = NewGuard(0, 0, Repeatable)
	assert.ErrorIs(t, err, ErrRange)
	_, err = NewGuard(1, MaxCounter+1, Repeatable)
	assert.ErrorIs(t, err, ErrRange)
	_, err = NewGuard(1, 0, Mode(9))
	assert.Error(t, err)
}

// raceWriters starts one writer per counter 1..writers, in a seeded
// shuffled order, releases them all at once and returns their errors.
func raceWriters(writers int, seed uint64, write func(counter int64) error) []error {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, writers)
	)
	for i, c := range rand.New(rand.NewPCG(seed, 1)).Perm(writers) {
		wg.Go(func() {
			<-start
			errs[i] = write(int64(c) + 1)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// checkAdmissions: whatever the schedule, every rejection is
// ErrStaleToken, the admitted writes (log, in the order they took effect)
// are exactly the successes and in increasing counter order, and the
// largest counter is always admitted.
func checkAdmissions(t *testing.T, errs []error, log []int64) {
	t.Helper()
	admitted := 0
	for _, err := range errs {
		if err == nil {
			admitted++
			continue
		}
		require.ErrorIs(t, err, ErrStaleToken)
	}
	require.Len(t, log, admitted)
	for i := 1; i < len(log); i++ {
		require.Less(t, log[i-1], log[i], "admitted out of token order: %v", log)
	}
	require.Equal(t, int64(len(errs)), log[len(log)-1], "the newest holder always writes")
}

// Concurrent writers on a Guard, under -race.
func TestGuardConcurrentWriters(t *testing.T) {
	const writers = 64
	for round := range 20 {
		g, err := NewGuard(3, 0, Repeatable)
		require.NoError(t, err)
		var log []int64 // appended only inside Do: the Guard is its lock
		errs := raceWriters(writers, uint64(round), func(c int64) error {
			return g.Do(Token{3, c}, func() error { log = append(log, c); return nil })
		})
		checkAdmissions(t, errs, log)
		require.Equal(t, Token{3, writers}, g.Watermark())
	}
}

func TestOutcomeNames(t *testing.T) {
	for o := Admitted; o <= Invalid; o++ {
		assert.NotContains(t, o.String(), "Outcome(")
		if !o.OK() {
			assert.Error(t, o.Err())
			assert.ErrorIs(t, &RejectError{Outcome: o}, o.Err())
		}
	}
	assert.Equal(t, "Outcome(0)", Outcome(0).String())
	assert.Error(t, Outcome(0).Err())
	assert.Equal(t, Outcome(0), OutcomeOf(errors.New("x")))
	assert.Equal(t, "PENDING", Pending.String())
	assert.Equal(t, "State(9)", State(9).String())
}

func TestEpochs(t *testing.T) {
	for range 1000 {
		e := firstEpoch()
		require.GreaterOrEqual(t, e, uint64(1))
		require.LessOrEqual(t, e, uint64(1)<<48)
		n, ok := nextEpoch(e)
		require.True(t, ok)
		require.Greater(t, n, e)
		require.LessOrEqual(t, n-e, uint64(1)<<20)
	}
	for _, top := range []uint64{MaxEpoch, MaxEpoch + 1, ^uint64(0)} {
		_, ok := nextEpoch(top)
		assert.False(t, ok, "no epoch above %d", top)
	}
	n, ok := nextEpoch(MaxEpoch - 1)
	assert.True(t, ok)
	assert.Equal(t, MaxEpoch, n, "never past MaxEpoch")
}
