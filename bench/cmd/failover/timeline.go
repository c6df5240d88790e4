package main

import (
	"fmt"
	"time"
)

// decision is one evaluate call as the client saw it.
type decision struct {
	start, end time.Time
	subject    int
	evaluated  bool   // HTTP 200 with kind "evaluated"
	allowed    bool   // the answer's allowed (only with evaluated)
	window     string // the answer's reset: which fixed window counted it
}

// probe is one GET /readyz.
type probe struct {
	at    time.Time
	ready bool // HTTP 200
}

// timeline is one run's result, every offset relative to the kill.
type timeline struct {
	// recovery is Redis's own: +switch-master (Sentinel) or the replica
	// reporting ROLE master (Cluster).
	recovery time.Duration
	// firstFail is when the first call failed; zero when none failed.
	firstFail time.Duration
	// evaluates is the end of the first evaluated call started after the
	// last failed one started: from there on every call was evaluated.
	// Zero when no call failed.
	evaluates time.Duration
	failed    int // calls after the kill without an evaluated answer
	calls     int // calls started after the kill
	// ready is the last transition of /readyz to 200 (zero: never down).
	ready time.Duration
	// down is the first non-200 /readyz after the kill (-1: never).
	down time.Duration
	// upTransitions counts /readyz transitions to 200 after the kill: 1
	// is one outage and one recovery; more is flapping.
	upTransitions int
	// readyWhileFailing counts 200 probes between the first and the last
	// failed call: readiness claiming what decisions did not see.
	readyWhileFailing int
	// overAdmitted sums, per subject and fixed window, the allowed
	// decisions beyond the limit.
	overAdmitted int
}

func (tl timeline) flapped() bool { return tl.upTransitions > 1 }

// computeTimeline derives a run's timeline from what the clients and the
// readiness poller recorded.
func computeTimeline(kill, recovered time.Time, calls []decision, probes []probe, limit int) timeline {
	tl := timeline{recovery: recovered.Sub(kill), down: -1}
	var firstFail, lastFail, lastFailStart time.Time
	allowed := map[string]int{}
	for _, c := range calls {
		if c.evaluated && c.allowed {
			allowed[fmt.Sprintf("%d/%s", c.subject, c.window)]++
		}
		if c.start.Before(kill) {
			continue
		}
		tl.calls++
		if c.evaluated {
			continue
		}
		tl.failed++
		if firstFail.IsZero() || c.end.Before(firstFail) {
			firstFail = c.end
		}
		if c.end.After(lastFail) {
			lastFail = c.end
		}
		if c.start.After(lastFailStart) {
			lastFailStart = c.start
		}
	}
	for _, n := range allowed {
		tl.overAdmitted += max(0, n-limit)
	}
	if !firstFail.IsZero() {
		tl.firstFail = firstFail.Sub(kill)
		var first time.Time
		for _, c := range calls {
			if c.evaluated && c.start.After(lastFailStart) && (first.IsZero() || c.end.Before(first)) {
				first = c.end
			}
		}
		if !first.IsZero() {
			tl.evaluates = first.Sub(kill)
		}
	}
	prev := true
	for _, p := range probes {
		if p.at.Before(kill) {
			prev = p.ready
			continue
		}
		if !p.ready && tl.down < 0 {
			tl.down = p.at.Sub(kill)
		}
		if p.ready && !prev {
			tl.upTransitions++
			tl.ready = p.at.Sub(kill)
		}
		if p.ready && !firstFail.IsZero() && !p.at.Before(firstFail) && !p.at.After(lastFail) {
			tl.readyWhileFailing++
		}
		prev = p.ready
	}
	return tl
}
