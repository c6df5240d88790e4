package rateref

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func common(id string) Common {
	return Common{MaxClockStepMillis: 1000, CleanupGraceMillis: 5000, DedupTTLMillis: 60000, DedupMaxEntries: 16, EvaluationID: id}
}

// §20.10 fixed-window rows, exactly.
func TestFixedWindowNormative(t *testing.T) {
	p := FixedWindowParams{Limit: 2, Cost: 1, WindowMillis: 1000}
	st := FixedWindowState{Present: true, WindowID: 0, Used: 1, Observed: 999}
	d := &Dedup{}

	dec, err := FixedWindow(&st, d, 999, p, common("a"))
	require.NoError(t, err)
	assert.Equal(t, Decision{Status: Allowed, Allowed: true, Limit: 2, Remaining: 0, ResetAtMillis: 1000, StateTTLMillis: 5001}, dec)

	dec, err = FixedWindow(&st, d, 999, p, common("b"))
	require.NoError(t, err)
	assert.Equal(t, Decision{Status: Denied, Limit: 2, Remaining: 0, RetryAfterMillis: 1, ResetAtMillis: 1000}, dec)
	assert.Equal(t, int64(2), st.Used, "a denial consumes nothing")

	dec, err = FixedWindow(&st, d, 1000, p, common("c"))
	require.NoError(t, err)
	assert.Equal(t, Allowed, dec.Status, "new window")
	assert.Equal(t, int64(1), dec.Remaining)
	assert.Equal(t, FixedWindowState{Present: true, WindowID: 1, Used: 1, Observed: 1000}, st)
}

// §20.10 sliding-counter rows: weighted = 5 at elapsed 500/1000 with
// previous 10; a backward clock never regresses the window and beyond the
// threshold is CLOCK_UNSAFE.
func TestSlidingCounterNormative(t *testing.T) {
	st := SlidingCounterState{Present: true, WindowID: 4, Current: 10, Observed: 4999}
	d := &Dedup{}
	dec, err := SlidingCounter(&st, d, 5500, SlidingCounterParams{Limit: 10, Cost: 1, WindowMillis: 1000}, common("a"))
	require.NoError(t, err)
	assert.Equal(t, Allowed, dec.Status)
	assert.Equal(t, int64(4), dec.Remaining, "10 - weighted 5 - cost 1")
	assert.Equal(t, SlidingCounterState{Present: true, WindowID: 5, Current: 1, Previous: 10, Observed: 5500}, st)

	st = SlidingCounterState{Present: true, WindowID: 5, Previous: 10, Observed: 5500}
	dec, err = SlidingCounter(&st, d, 5500, SlidingCounterParams{Limit: 5, Cost: 1, WindowMillis: 1000}, common("b"))
	require.NoError(t, err)
	assert.Equal(t, Decision{Status: Denied, Limit: 5, Remaining: 0, RetryAfterMillis: 100, ResetAtMillis: 6000}, dec)
	// The retry is exact: 99 ms later still denied, 100 ms later admitted.
	dup := st
	dec, _ = SlidingCounter(&dup, &Dedup{}, 5599, SlidingCounterParams{Limit: 5, Cost: 1, WindowMillis: 1000}, common("c"))
	assert.Equal(t, Denied, dec.Status)
	dec, _ = SlidingCounter(&dup, &Dedup{}, 5600, SlidingCounterParams{Limit: 5, Cost: 1, WindowMillis: 1000}, common("c"))
	assert.Equal(t, Allowed, dec.Status)

	// Backward clock within the step: clamped, window id does not regress.
	st = SlidingCounterState{Present: true, WindowID: 5, Current: 3, Observed: 5000}
	dec, err = SlidingCounter(&st, d, 4200, SlidingCounterParams{Limit: 10, Cost: 1, WindowMillis: 1000}, common("d"))
	require.NoError(t, err)
	assert.Equal(t, Allowed, dec.Status)
	assert.Equal(t, SlidingCounterState{Present: true, WindowID: 5, Current: 4, Observed: 5000}, st)
	// Beyond the step: CLOCK_UNSAFE and nothing changes.
	dec, err = SlidingCounter(&st, d, 3999, SlidingCounterParams{Limit: 10, Cost: 1, WindowMillis: 1000}, common("e"))
	require.NoError(t, err)
	assert.Equal(t, ClockUnsafe, dec.Status)
	assert.Equal(t, SlidingCounterState{Present: true, WindowID: 5, Current: 4, Observed: 5000}, st)
	_, replayed := d.Entries["e"]
	assert.False(t, replayed, "CLOCK_UNSAFE is not a decision and is not remembered")
}

// §20.10 token-bucket rows.
func TestTokenBucketNormative(t *testing.T) {
	p := TokenBucketParams{CapacityScaled: 10 * Scale, RefillScaled: 10 * Scale, PeriodMillis: 1000, CostScaled: 2_500_000}
	st := TokenBucketState{Present: true, TokensScaled: 0, Observed: 1000}
	d := &Dedup{}
	dec, err := TokenBucket(&st, d, 1250, p, common("a"))
	require.NoError(t, err)
	assert.Equal(t, Allowed, dec.Status, "2.5 scaled tokens before cost")
	assert.Equal(t, int64(0), dec.Remaining)
	assert.Equal(t, int64(2250), dec.ResetAtMillis)

	st = TokenBucketState{Present: true, TokensScaled: 0, Observed: 1000}
	p.CostScaled = 2_500_001
	dec, err = TokenBucket(&st, d, 1250, p, common("b"))
	require.NoError(t, err)
	assert.Equal(t, Decision{Status: Denied, Limit: 10 * Scale, Remaining: 2_500_000, RetryAfterMillis: 1, ResetAtMillis: 2000}, dec)
	assert.Equal(t, TokenBucketState{Present: true, TokensScaled: 0, Observed: 1000}, st, "balance not deducted, nothing written")

	// Saturation after a long idle, without overflow.
	dec, err = TokenBucket(&st, d, 1000+MaxWindowMillis*1000, p, common("c"))
	require.NoError(t, err)
	assert.Equal(t, int64(10*Scale-2_500_001), dec.Remaining)
}

func TestDedupReplayReturnsOriginal(t *testing.T) {
	p := FixedWindowParams{Limit: 1, Cost: 1, WindowMillis: 1000}
	var st FixedWindowState
	d := &Dedup{}
	first, err := FixedWindow(&st, d, 10, p, common("x"))
	require.NoError(t, err)
	again, err := FixedWindow(&st, d, 20, p, common("x"))
	require.NoError(t, err)
	assert.Equal(t, DedupReplay, again.Status)
	assert.True(t, again.Allowed)
	assert.Equal(t, first.Remaining, again.Remaining)
	assert.Equal(t, int64(1), st.Used, "a replay consumes nothing")
	// After the dedup TTL the id is evaluated again (and denied).
	late, err := FixedWindow(&st, d, 10+60000, p, common("x"))
	require.NoError(t, err)
	assert.Equal(t, Allowed, late.Status, "new window by then")
	// Dedup off: a repeat charges again.
	c := common("y")
	c.DedupTTLMillis = 0
	_, _ = FixedWindow(&st, d, 70000, p, c)
	dec, _ := FixedWindow(&st, d, 70000, p, c)
	assert.Equal(t, Denied, dec.Status)
}

func TestInvalidParameters(t *testing.T) {
	var fw FixedWindowState
	var tb TokenBucketState
	d := &Dedup{}
	for _, p := range []FixedWindowParams{{0, 1, 1}, {2, 3, 1}, {2, 1, 0}, {MaxLimit + 1, 1, 1}, {2, 1, MaxWindowMillis + 1}} {
		dec, err := FixedWindow(&fw, d, 1, p, common("a"))
		require.ErrorIs(t, err, ErrInvalid, "%+v", p)
		assert.Equal(t, Invalid, dec.Status)
	}
	for _, p := range []TokenBucketParams{
		{CapacityScaled: 1 << 52, RefillScaled: 1, PeriodMillis: 2, CostScaled: 1},         // product overflow
		{CapacityScaled: 1e15, RefillScaled: 1, PeriodMillis: 1, CostScaled: 1},            // horizon > 30 days
		{CapacityScaled: 10, RefillScaled: 10, PeriodMillis: 1, CostScaled: 11},            // cost > capacity
		{CapacityScaled: 10, RefillScaled: 0, PeriodMillis: 1, CostScaled: 1},              // no refill
		{CapacityScaled: 1<<52 + 1, RefillScaled: 1 << 52, PeriodMillis: 1, CostScaled: 1}, // capacity bound
	} {
		_, err := TokenBucket(&tb, d, 1, p, common("a"))
		require.ErrorIs(t, err, ErrInvalid, "%+v", p)
	}
	c := common("")
	_, err := FixedWindow(&fw, d, 1, FixedWindowParams{2, 1, 1}, c)
	require.ErrorIs(t, err, ErrInvalid)
}

func TestDedupEvictionIsReported(t *testing.T) {
	var st FixedWindowState
	d := &Dedup{}
	c := common("a")
	c.DedupMaxEntries = 1
	_, err := FixedWindow(&st, d, 1, FixedWindowParams{10, 1, 1000}, c)
	require.NoError(t, err)
	c.EvaluationID = "b"
	_, err = FixedWindow(&st, d, 1, FixedWindowParams{10, 1, 1000}, c)
	require.ErrorIs(t, err, ErrEviction)
}

// FuzzTokenBucket checks the arithmetic invariants over arbitrary valid
// parameters and times: no overflow, remaining within [0, capacity], a
// denial always has a positive retry and never changes state.
func FuzzTokenBucket(f *testing.F) {
	f.Add(int64(10*Scale), int64(10*Scale), int64(1000), int64(Scale), int64(0), int64(1000), int64(250))
	f.Add(int64(1<<40), int64(1<<30), int64(4096), int64(1<<39), int64(1<<39), int64(1), int64(MaxWindowMillis))
	f.Fuzz(func(t *testing.T, capacity, refill, period, cost, tokens, last, gap int64) {
		p := TokenBucketParams{CapacityScaled: capacity, RefillScaled: refill, PeriodMillis: period, CostScaled: cost}
		if p.validate() != nil || tokens < 0 || tokens > capacity || last < 0 || last > 1<<45 || gap < 0 || gap > 1<<45 {
			return
		}
		st := TokenBucketState{Present: true, TokensScaled: tokens, Observed: last}
		before := st
		dec, err := TokenBucket(&st, &Dedup{}, last+gap, p, common("f"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, dec.Remaining, int64(0))
		require.LessOrEqual(t, dec.Remaining, capacity)
		require.GreaterOrEqual(t, dec.ResetAtMillis, last+gap)
		if dec.Status == Denied {
			require.Positive(t, dec.RetryAfterMillis)
			require.Equal(t, before, st)
		} else {
			require.Equal(t, Allowed, dec.Status)
			require.LessOrEqual(t, dec.StateTTLMillis, int64(MaxWindowMillis+MaxGraceMillis))
		}
	})
}

// FuzzSlidingCounter checks that a denial's retry is exact: at now+retry
// the same request passes, one millisecond earlier it does not.
func FuzzSlidingCounter(f *testing.F) {
	f.Add(int64(5), int64(1), int64(1000), int64(0), int64(10), int64(5500))
	f.Add(int64(10), int64(1), int64(1000), int64(10), int64(0), int64(5000))
	f.Fuzz(func(t *testing.T, limit, cost, window, cur, prev, now int64) {
		p := SlidingCounterParams{Limit: limit, Cost: cost, WindowMillis: window}
		if p.validate() != nil || window > 100_000 || cur < 0 || cur > limit || prev < 0 || prev > limit || now < window || now > 1<<42 {
			return
		}
		st := SlidingCounterState{Present: true, WindowID: now / window, Current: cur, Previous: prev, Observed: now}
		c := common("f")
		c.DedupTTLMillis = 0
		dec, err := SlidingCounter(&st, &Dedup{}, now, p, c)
		require.NoError(t, err)
		if dec.Status != Denied {
			return
		}
		at := st
		later, _ := SlidingCounter(&at, &Dedup{}, now+dec.RetryAfterMillis, p, c)
		require.Equal(t, Allowed, later.Status, "retry %d must admit", dec.RetryAfterMillis)
		if dec.RetryAfterMillis > 1 {
			at = st
			early, _ := SlidingCounter(&at, &Dedup{}, now+dec.RetryAfterMillis-1, p, c)
			require.Equal(t, Denied, early.Status, "retry %d must be the earliest", dec.RetryAfterMillis)
		}
	})
}

// §20.7: a contract test pins that GCRA is NOT the token bucket. Both allow
// 3 per second with a burst of 3; after the burst, at exactly one period,
// the bucket is full again (3 admitted) while GCRA's rounded-up emission
// interval admits only 2.
func TestGCRAIsNotTokenBucket(t *testing.T) {
	c := common("")
	c.DedupTTLMillis = 0
	c.EvaluationID = "-"
	var g GCRAState
	tb := TokenBucketState{}
	gp := GCRAParams{Limit: 3, PeriodMillis: 1000, Cost: 1}
	tp := TokenBucketParams{CapacityScaled: 3 * Scale, RefillScaled: 3 * Scale, PeriodMillis: 1000, CostScaled: Scale}
	admitted := func(now int64) (gcra, bucket int) {
		for range 3 {
			if d, _ := GCRA(&g, &Dedup{}, now, gp, c); d.Allowed {
				gcra++
			}
			if d, _ := TokenBucket(&tb, &Dedup{}, now, tp, c); d.Allowed {
				bucket++
			}
		}
		return gcra, bucket
	}
	gn, bn := admitted(10_000)
	assert.Equal(t, 3, gn)
	assert.Equal(t, 3, bn)
	gn, bn = admitted(11_000)
	assert.Equal(t, 2, gn, "GCRA")
	assert.Equal(t, 3, bn, "token bucket")
}

func TestGCRA(t *testing.T) {
	p := GCRAParams{Limit: 2, PeriodMillis: 1000, Cost: 1}
	var st GCRAState
	d := &Dedup{}
	dec, err := GCRA(&st, d, 5000, p, common("a"))
	require.NoError(t, err)
	assert.Equal(t, Decision{Status: Allowed, Allowed: true, Limit: 2, Remaining: 1, ResetAtMillis: 5500, StateTTLMillis: 5500}, dec)
	dec, _ = GCRA(&st, d, 5000, p, common("b"))
	assert.Equal(t, int64(0), dec.Remaining)
	dec, _ = GCRA(&st, d, 5000, p, common("c"))
	assert.Equal(t, Decision{Status: Denied, Limit: 2, Remaining: 0, RetryAfterMillis: 500, ResetAtMillis: 6000}, dec)
	dec, _ = GCRA(&st, d, 5500, p, common("d"))
	assert.Equal(t, Allowed, dec.Status, "exactly one emission interval later")
	_, err = GCRA(&st, d, 1, GCRAParams{Limit: 2, PeriodMillis: 1000, Cost: 3}, common("e"))
	require.ErrorIs(t, err, ErrInvalid)
}

// §20.10 sliding-log row: an event scored exactly now-window is trimmed
// (the interval's lower bound is exclusive).
func TestSlidingLogNormative(t *testing.T) {
	p := SlidingLogParams{Limit: 2, WindowMillis: 1000}
	st := SlidingLogState{Present: true, Observed: 4000, Events: []LogEvent{{4000, "4000:0"}, {4500, "4500:1"}}}
	d := &Dedup{}
	dec, err := SlidingLog(&st, d, 4999, p, common("a"))
	require.NoError(t, err)
	assert.Equal(t, Decision{Status: Denied, Limit: 2, RetryAfterMillis: 1, ResetAtMillis: 5500}, dec)
	dec, err = SlidingLog(&st, d, 5000, p, common("b"))
	require.NoError(t, err)
	assert.Equal(t, Allowed, dec.Status, "the event at exactly now-window no longer counts")
	assert.Equal(t, int64(0), dec.Remaining)
	assert.Equal(t, []LogEvent{{4500, "4500:1"}, {5000, "5000:1"}}, st.Events, "trimmed on admit")
	_, err = SlidingLog(&st, d, 5000, SlidingLogParams{Limit: MaxLogLimit + 1, WindowMillis: 1}, common("c"))
	require.ErrorIs(t, err, ErrInvalid)
}

// FixedWindowV3 decides as FixedWindow up to 30 days and admits windows up
// to 366 days, aligned to the Unix epoch: a 365-day window (a year as
// envoyproxy/ratelimit counts it) resets at the next multiple of 365 days.
func TestFixedWindowV3(t *testing.T) {
	for _, p := range []FixedWindowParams{{2, 1, 1000}, {5, 2, MaxWindowMillis}} {
		st1, st3 := FixedWindowState{}, FixedWindowState{}
		d1, d3 := &Dedup{}, &Dedup{}
		for i, now := range []int64{1_000, 1_500, 2_000, 2_001, MaxWindowMillis + 7} {
			id := string(rune('a' + i))
			want, err1 := FixedWindow(&st1, d1, now, p, common(id))
			got, err3 := FixedWindowV3(&st3, d3, now, p, common(id))
			require.NoError(t, err1)
			require.NoError(t, err3)
			assert.Equal(t, want, got, "%+v at %d", p, now)
			assert.Equal(t, st1, st3)
		}
	}

	const year = 365 * 24 * 3600 * 1000
	now := int64(1_796_000_000_123) // 2026-11-30; its 365-day window (the 57th since the epoch) ends 2026-12-18
	p := FixedWindowParams{Limit: 1, Cost: 1, WindowMillis: year}
	var st FixedWindowState
	dec, err := FixedWindowV3(&st, &Dedup{}, now, p, common("a"))
	require.NoError(t, err)
	end := (now/year + 1) * year
	assert.Equal(t, Decision{Status: Allowed, Allowed: true, Limit: 1, ResetAtMillis: end, StateTTLMillis: end - now + 5000}, dec)
	dec, err = FixedWindowV3(&st, &Dedup{}, now+1, p, common("b"))
	require.NoError(t, err)
	assert.Equal(t, Decision{Status: Denied, Limit: 1, RetryAfterMillis: end - now - 1, ResetAtMillis: end}, dec)
	dec, err = FixedWindowV3(&st, &Dedup{}, end, p, common("c"))
	require.NoError(t, err)
	assert.Equal(t, Allowed, dec.Status, "the next year's window")

	// The bound: 366 days is admitted, one millisecond more is not (nor by
	// FixedWindow, beyond 30 days). The longest TTL is window + grace.
	var fw FixedWindowState
	c := common("x")
	c.CleanupGraceMillis, c.MaxClockStepMillis = MaxGraceMillis, MaxClockStepMillis
	fw = FixedWindowState{Present: true, WindowID: 0, Observed: MaxFixedWindowV3Millis*56 + MaxClockStepMillis}
	dec, err = FixedWindowV3(&fw, &Dedup{}, MaxFixedWindowV3Millis*56, FixedWindowParams{1, 1, MaxFixedWindowV3Millis}, c)
	require.NoError(t, err)
	assert.Equal(t, Allowed, dec.Status)
	assert.Equal(t, int64(MaxFixedWindowV3Millis*57), dec.ResetAtMillis)
	assert.Equal(t, int64(MaxFixedWindowV3Millis-MaxClockStepMillis+MaxGraceMillis), dec.StateTTLMillis)
	for _, w := range []int64{MaxFixedWindowV3Millis + 1, 0} {
		dec, err = FixedWindowV3(&fw, &Dedup{}, 1, FixedWindowParams{1, 1, w}, common("y"))
		require.ErrorIs(t, err, ErrInvalid)
		assert.Equal(t, Invalid, dec.Status)
	}
	_, err = FixedWindow(&fw, &Dedup{}, 1, FixedWindowParams{1, 1, MaxWindowMillis + 1}, common("z"))
	require.ErrorIs(t, err, ErrInvalid)
}
