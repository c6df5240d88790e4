package rateref

import "fmt"

// FixedWindowState mirrors the rate-fixed-window-v1 hash (v, rev, wid, used, ts).
type FixedWindowState struct {
	Present  bool
	WindowID int64
	Used     int64
	// Observed is the effective time of the last write (field ts).
	Observed int64
}

// FixedWindowParams are the algorithm parameters of rate-fixed-window-v1.
type FixedWindowParams struct {
	Limit        int64
	Cost         int64
	WindowMillis int64
}

func (p FixedWindowParams) validate() error { return p.validateUpTo(MaxWindowMillis) }

// validateUpTo checks p with maxWindow as the longest window.
func (p FixedWindowParams) validateUpTo(maxWindow int64) error {
	if p.Limit < 1 || p.Limit > MaxLimit || p.Cost < 1 || p.Cost > p.Limit ||
		p.WindowMillis < 1 || p.WindowMillis > maxWindow {
		return fmt.Errorf("%w: fixed window %+v", ErrInvalid, p)
	}
	return nil
}

// FixedWindow evaluates one request at server time now (§20.2): windowId =
// floor(effectiveNow/window), never below the stored window; admit iff
// consumed+cost <= limit; a denial writes no state. It is the reference of
// rate-fixed-window-v1 and -v2 (windows up to MaxWindowMillis).
func FixedWindow(st *FixedWindowState, d *Dedup, now int64, p FixedWindowParams, c Common) (Decision, error) {
	if err := firstErr(p.validate(), c.validate()); err != nil {
		return Decision{Status: Invalid}, err
	}
	return fixedWindow(st, d, now, p, c)
}

// FixedWindowV3 is FixedWindow with windows up to MaxFixedWindowV3Millis:
// the reference of rate-fixed-window-v3, whose formulas, state and dedup
// are v2's.
func FixedWindowV3(st *FixedWindowState, d *Dedup, now int64, p FixedWindowParams, c Common) (Decision, error) {
	if err := firstErr(p.validateUpTo(MaxFixedWindowV3Millis), c.validate()); err != nil {
		return Decision{Status: Invalid}, err
	}
	return fixedWindow(st, d, now, p, c)
}

func fixedWindow(st *FixedWindowState, d *Dedup, now int64, p FixedWindowParams, c Common) (Decision, error) {
	return evaluate(now, c, d, st.Present, st.Observed, func(eff int64) Decision {
		wid := eff / p.WindowMillis
		if st.Present && st.WindowID > wid {
			wid = st.WindowID
		}
		var used int64
		if st.Present && st.WindowID == wid {
			used = st.Used
		}
		end := (wid + 1) * p.WindowMillis
		if used+p.Cost <= p.Limit {
			used += p.Cost
			*st = FixedWindowState{Present: true, WindowID: wid, Used: used, Observed: eff}
			return Decision{
				Status: Allowed, Allowed: true, Limit: p.Limit, Remaining: p.Limit - used,
				ResetAtMillis: end, StateTTLMillis: end - eff + c.CleanupGraceMillis,
			}
		}
		return Decision{
			Status: Denied, Limit: p.Limit, Remaining: max(0, p.Limit-used),
			RetryAfterMillis: end - eff, ResetAtMillis: end,
		}
	})
}

// SlidingCounterState mirrors the rate-sliding-counter-v1 hash (v, rev,
// wid, cur, prev, ts).
type SlidingCounterState struct {
	Present  bool
	WindowID int64
	Current  int64
	Previous int64
	Observed int64
}

// SlidingCounterParams are the algorithm parameters of rate-sliding-counter-v1.
type SlidingCounterParams = FixedWindowParams

// SlidingCounter evaluates one request (§20.4): previousWeight =
// ceil((window-elapsed)*SCALE/window), weighted = current*SCALE +
// previous*previousWeight, admit iff weighted + cost*SCALE <= limit*SCALE.
func SlidingCounter(st *SlidingCounterState, d *Dedup, now int64, p SlidingCounterParams, c Common) (Decision, error) {
	if err := firstErr(p.validate(), c.validate()); err != nil {
		return Decision{Status: Invalid}, err
	}
	return evaluate(now, c, d, st.Present, st.Observed, func(eff int64) Decision {
		w := p.WindowMillis
		wid := eff / w
		if st.Present && st.WindowID > wid {
			wid = st.WindowID
		}
		var cur, prev int64
		if st.Present {
			switch st.WindowID {
			case wid:
				cur, prev = st.Current, st.Previous
			case wid - 1:
				prev = st.Current
			}
		}
		elapsed := min(max(eff-wid*w, 0), w)
		weight := ceilDiv((w-elapsed)*Scale, w)
		weighted := cur*Scale + prev*weight
		after := p.Limit*Scale - p.Cost*Scale - weighted
		if after >= 0 {
			cur += p.Cost
			*st = SlidingCounterState{Present: true, WindowID: wid, Current: cur, Previous: prev, Observed: eff}
			return Decision{
				Status: Allowed, Allowed: true, Limit: p.Limit, Remaining: after / Scale,
				ResetAtMillis: (wid + 2) * w, StateTTLMillis: 2*w + c.CleanupGraceMillis,
			}
		}
		// Deny: the earliest time the same request would pass with no other
		// traffic. budget is what the previous window may still weigh.
		var retry int64
		if budget := p.Limit*Scale - p.Cost*Scale - cur*Scale; budget >= 0 {
			retry = max(1, w-weightFloor(budget/prev, w)-elapsed)
		} else {
			// The current window alone is over: wait for the next window,
			// where today's count becomes the previous one.
			retry = (wid+1)*w - eff + w - weightFloor((p.Limit-p.Cost)*Scale/cur, w)
		}
		reset := eff
		switch {
		case cur > 0:
			reset = (wid + 2) * w
		case prev > 0:
			reset = (wid + 1) * w
		}
		return Decision{
			Status: Denied, Limit: p.Limit, Remaining: max(0, (p.Limit*Scale-weighted)/Scale),
			RetryAfterMillis: retry, ResetAtMillis: reset,
		}
	})
}

// weightFloor is floor(min(maxWeight, SCALE)*window/SCALE): the longest
// remaining part of a window whose weight does not exceed maxWeight.
func weightFloor(maxWeight, w int64) int64 {
	return min(maxWeight, Scale) * w / Scale
}

// TokenBucketState mirrors the rate-token-bucket-v1 hash (v, rev, tok, ts)
// and the rate-token-bucket-v2 string (1:tok:ts:rev).
type TokenBucketState struct {
	Present bool
	// TokensScaled is the balance in micro-tokens.
	TokensScaled int64
	// Observed is the effective time of the last refill (field ts).
	Observed int64
}

// TokenBucketParams are the algorithm parameters of rate-token-bucket-v1,
// all token amounts scaled by Scale.
type TokenBucketParams struct {
	CapacityScaled int64
	RefillScaled   int64
	PeriodMillis   int64
	CostScaled     int64
}

// HorizonMillis is ceil(capacity*period/refill): the time an empty bucket
// takes to fill, which bounds the state TTL.
func (p TokenBucketParams) HorizonMillis() int64 {
	return ceilDiv(p.CapacityScaled*p.PeriodMillis, p.RefillScaled)
}

func (p TokenBucketParams) validate() error {
	if p.CapacityScaled < 1 || p.CapacityScaled > MaxScaledCapacity ||
		p.RefillScaled < 1 || p.RefillScaled > MaxScaledCapacity ||
		p.PeriodMillis < 1 || p.PeriodMillis > MaxWindowMillis ||
		p.CostScaled < 1 || p.CostScaled > p.CapacityScaled ||
		p.CapacityScaled > MaxBucketProduct/p.PeriodMillis ||
		p.HorizonMillis() > MaxWindowMillis {
		return fmt.Errorf("%w: token bucket %+v", ErrInvalid, p)
	}
	return nil
}

// TokenBucket evaluates one request (§20.5). A fresh bucket is full. After
// elapsed >= horizon the refill saturates at capacity without multiplying,
// which is exactly min(capacity, tokens+floor(elapsed*refill/period)).
func TokenBucket(st *TokenBucketState, d *Dedup, now int64, p TokenBucketParams, c Common) (Decision, error) {
	if err := firstErr(p.validate(), c.validate()); err != nil {
		return Decision{Status: Invalid}, err
	}
	return evaluate(now, c, d, st.Present, st.Observed, func(eff int64) Decision {
		tokens, last := p.CapacityScaled, eff
		if st.Present {
			tokens, last = st.TokensScaled, st.Observed
		}
		elapsed := max(0, eff-last)
		horizon := p.HorizonMillis()
		available := p.CapacityScaled
		if elapsed < horizon {
			available = min(p.CapacityScaled, tokens+elapsed*p.RefillScaled/p.PeriodMillis)
		}
		if available >= p.CostScaled {
			left := available - p.CostScaled
			*st = TokenBucketState{Present: true, TokensScaled: left, Observed: eff}
			return Decision{
				Status: Allowed, Allowed: true, Limit: p.CapacityScaled, Remaining: left,
				ResetAtMillis:  eff + ceilDiv((p.CapacityScaled-left)*p.PeriodMillis, p.RefillScaled),
				StateTTLMillis: horizon + c.CleanupGraceMillis,
			}
		}
		return Decision{
			Status: Denied, Limit: p.CapacityScaled, Remaining: available,
			RetryAfterMillis: ceilDiv((p.CostScaled-available)*p.PeriodMillis, p.RefillScaled),
			ResetAtMillis:    eff + ceilDiv((p.CapacityScaled-available)*p.PeriodMillis, p.RefillScaled),
		}
	})
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
