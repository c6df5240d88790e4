package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestComputeTimeline(t *testing.T) {
	kill := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return kill.Add(time.Duration(ms) * time.Millisecond) }
	ok := func(startMs, subject int, allowed bool) decision {
		return decision{start: at(startMs), end: at(startMs + 2), subject: subject, evaluated: true, allowed: allowed, window: "w1"}
	}
	fail := func(startMs int) decision { return decision{start: at(startMs), end: at(startMs + 5)} }
	calls := []decision{
		ok(-100, 1, true), ok(-50, 1, true), // before the kill: counted for admission only
		fail(10), ok(20, 2, true), fail(900), // a Cluster-like mix: other slots still served
		ok(1000, 1, true), ok(1010, 1, false), ok(1020, 2, true),
	}
	probes := []probe{
		{at(-10), true}, {at(50), false}, {at(300), true}, {at(400), false}, {at(1003), true}, {at(1500), true},
	}
	tl := computeTimeline(kill, at(800), calls, probes, 2)

	assert.Equal(t, 800*time.Millisecond, tl.recovery)
	assert.Equal(t, 15*time.Millisecond, tl.firstFail)
	assert.Equal(t, 1002*time.Millisecond, tl.evaluates, "first success started after the last failure started")
	assert.Equal(t, 2, tl.failed)
	assert.Equal(t, 6, tl.calls)
	assert.Equal(t, 50*time.Millisecond, tl.down)
	assert.Equal(t, 1003*time.Millisecond, tl.ready)
	assert.Equal(t, 2, tl.upTransitions)
	assert.True(t, tl.flapped())
	assert.Equal(t, 1, tl.readyWhileFailing, "the 200 at +300 ms, while calls still failed")
	assert.Equal(t, 1, tl.overAdmitted, "subject 1 was allowed 3 times in a window of limit 2")
}

func TestComputeTimelineWithoutFailures(t *testing.T) {
	kill := time.Now()
	calls := []decision{{start: kill.Add(time.Millisecond), end: kill.Add(2 * time.Millisecond), evaluated: true, allowed: true}}
	tl := computeTimeline(kill, kill.Add(time.Second), calls, []probe{{kill.Add(time.Millisecond), true}}, 10)
	assert.Zero(t, tl.failed)
	assert.Zero(t, tl.evaluates)
	assert.Equal(t, time.Duration(-1), tl.down)
	assert.False(t, tl.flapped())
}
