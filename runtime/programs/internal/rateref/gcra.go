package rateref

import "fmt"

// GCRAState mirrors the rate-gcra-v1 hash (v, rev, tat, ts).
type GCRAState struct {
	Present bool
	// TATMicros is the theoretical arrival time in microseconds.
	TATMicros int64
	Observed  int64
}

// GCRAParams are the parameters of rate-gcra-v1: Limit units per
// PeriodMillis, with a burst of Limit.
type GCRAParams struct {
	Limit        int64
	PeriodMillis int64
	Cost         int64
}

// EmissionMicros is the emission interval ceil(period*1000/limit) in
// microseconds; rounding up keeps GCRA conservative (and is why it is not
// identical to the token bucket).
func (p GCRAParams) EmissionMicros() int64 { return ceilDiv(p.PeriodMillis*1000, p.Limit) }

func (p GCRAParams) validate() error {
	if p.Limit < 1 || p.Limit > MaxLimit || p.Cost < 1 || p.Cost > p.Limit ||
		p.PeriodMillis < 1 || p.PeriodMillis > MaxWindowMillis {
		return fmt.Errorf("%w: gcra %+v", ErrInvalid, p)
	}
	return nil
}

// GCRA evaluates one request (§20.7): tat = max(storedTat, now);
// newTat = tat + emission*cost; admit iff newTat - now <= emission*limit.
// Times are microseconds so the emission interval keeps sub-millisecond
// precision; now*1000 stays below 2^53 until the year 2255.
func GCRA(st *GCRAState, d *Dedup, now int64, p GCRAParams, c Common) (Decision, error) {
	if err := firstErr(p.validate(), c.validate()); err != nil {
		return Decision{Status: Invalid}, err
	}
	return evaluate(now, c, d, st.Present, st.Observed, func(eff int64) Decision {
		e := p.EmissionMicros()
		tau := e * p.Limit
		nowU := eff * 1000
		tat := nowU
		if st.Present {
			tat = max(st.TATMicros, nowU)
		}
		next := tat + e*p.Cost
		if next-nowU <= tau {
			*st = GCRAState{Present: true, TATMicros: next, Observed: eff}
			return Decision{
				Status: Allowed, Allowed: true, Limit: p.Limit, Remaining: (tau - (next - nowU)) / e,
				ResetAtMillis: ceilDiv(next, 1000), StateTTLMillis: ceilDiv(next-nowU, 1000) + c.CleanupGraceMillis,
			}
		}
		return Decision{
			Status: Denied, Limit: p.Limit, Remaining: max(0, (tau-(tat-nowU))/e),
			RetryAfterMillis: ceilDiv(next-nowU-tau, 1000), ResetAtMillis: ceilDiv(tat, 1000),
		}
	})
}
