package rateref

import (
	"fmt"
	"sort"
)

// MaxLogLimit bounds the sliding log: its members (and so the per-call trim)
// never exceed the limit.
const MaxLogLimit = 10_000

// LogEvent is one accepted request of the sliding log.
type LogEvent struct {
	Score  int64
	Member string
}

// SlidingLogState mirrors the rate-sliding-log-v1 ZSET: accepted events
// (member "<effectiveNow>:<count before admit>", score effectiveNow) plus a
// sentinel member "!v1:<revision>" whose score is minus the last effective
// time, so the clamp memory survives trimming.
type SlidingLogState struct {
	Present  bool
	Events   []LogEvent // ascending by score
	Observed int64
}

// SlidingLogParams are the parameters of rate-sliding-log-v1 (cost is
// always 1 in v1).
type SlidingLogParams struct {
	Limit        int64
	WindowMillis int64
}

func (p SlidingLogParams) validate() error {
	if p.Limit < 1 || p.Limit > MaxLogLimit || p.WindowMillis < 1 || p.WindowMillis > MaxWindowMillis {
		return fmt.Errorf("%w: sliding log %+v", ErrInvalid, p)
	}
	return nil
}

// SlidingLog evaluates one request (§20.3): the window is (now-window, now]
// (an event scored exactly now-window no longer counts); admit iff fewer
// than limit events are live; an admit trims the expired events and adds
// one; a denial writes nothing. retryAfter = max(1, oldest+window-now).
func SlidingLog(st *SlidingLogState, d *Dedup, now int64, p SlidingLogParams, c Common) (Decision, error) {
	if err := firstErr(p.validate(), c.validate()); err != nil {
		return Decision{Status: Invalid}, err
	}
	return evaluate(now, c, d, st.Present, st.Observed, func(eff int64) Decision {
		cutoff := eff - p.WindowMillis
		i := sort.Search(len(st.Events), func(i int) bool { return st.Events[i].Score > cutoff })
		live := st.Events[i:]
		count := int64(len(live))
		if count < p.Limit {
			events := append(append([]LogEvent(nil), live...), LogEvent{Score: eff, Member: fmt.Sprintf("%d:%d", eff, count)})
			*st = SlidingLogState{Present: true, Events: events, Observed: eff}
			return Decision{
				Status: Allowed, Allowed: true, Limit: p.Limit, Remaining: p.Limit - count - 1,
				ResetAtMillis: eff + p.WindowMillis, StateTTLMillis: p.WindowMillis + c.CleanupGraceMillis,
			}
		}
		return Decision{
			Status: Denied, Limit: p.Limit, Remaining: max(0, p.Limit-count),
			RetryAfterMillis: max(1, live[0].Score+p.WindowMillis-eff),
			ResetAtMillis:    live[len(live)-1].Score + p.WindowMillis,
		}
	})
}
