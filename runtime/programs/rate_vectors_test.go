package programs

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// vectorClock pins a vector to server time without any test-only path in
// the programs: the runner computes an anchor T from Redis TIME —
// T = floor((now+ahead)/align)*align + phase — and the vector stores T as the
// state's last observation. T lies ahead of the server clock by less than
// the vector's max clock step, so the program's own clamp makes
// effectiveNow exactly T and every decision is deterministic.
type vectorClock struct {
	Align int64 `json:"align"`
	Phase int64 `json:"phase"`
	Ahead int64 `json:"ahead"`
}

// vectorAnchor returns T (0 when the vector has no clock).
func vectorAnchor(ctx context.Context, t *testing.T, admin redis.UniversalClient, c *vectorClock) int64 {
	t.Helper()
	if c == nil {
		return 0
	}
	now, err := admin.Time(ctx).Result()
	require.NoError(t, err)
	align, ahead := max(c.Align, 1), c.Ahead
	if ahead == 0 {
		ahead = 30_000
	}
	return (now.UnixMilli()+ahead)/align*align + c.Phase
}

// reAnchor matches {T}, {T+5}, {T-250}, {T/1000} and {T/1000-1}: T, optionally
// floor-divided, plus an optional offset; and, for windows too long to align
// T to (T must stay within a max clock step of the server's clock),
// {T/W*W+W} (the end of T's window of W ms: floor-divided, multiplied, plus
// an offset) and {-T%W+W} (the time from T to that end: minus T mod W, plus
// an offset).
var reAnchor = regexp.MustCompile(`\{(-)?T(?:([/%])([0-9]+))?(?:\*([0-9]+))?([+-][0-9]+)?\}`)

func expandAnchor(s string, anchor int64) string {
	return reAnchor.ReplaceAllStringFunc(s, func(m string) string {
		sub := reAnchor.FindStringSubmatch(m)
		v := anchor
		if sub[3] != "" {
			d, _ := strconv.ParseInt(sub[3], 10, 64)
			if sub[2] == "%" {
				v %= d
			} else {
				v /= d
			}
		}
		if sub[4] != "" {
			f, _ := strconv.ParseInt(sub[4], 10, 64)
			v *= f
		}
		if sub[1] != "" {
			v = -v
		}
		if sub[5] != "" {
			o, _ := strconv.ParseInt(sub[5], 10, 64)
			v += o
		}
		return strconv.FormatInt(v, 10)
	})
}

func expandItem(it stateItem, anchor int64) stateItem {
	expand := func(m map[string]string) map[string]string {
		if m == nil {
			return nil
		}
		out := make(map[string]string, len(m))
		for k, v := range m {
			out[expandAnchor(k, anchor)] = expandAnchor(v, anchor)
		}
		return out
	}
	it.Hash, it.ZSet = expand(it.Hash), expand(it.ZSet)
	if a := it.PTTLAnchored; a != nil {
		lo, _ := strconv.ParseInt(expandAnchor(a.Min, anchor), 10, 64)
		hi, _ := strconv.ParseInt(expandAnchor(a.Max, anchor), 10, 64)
		it.PTTL = &struct {
			Min int64 `json:"min"`
			Max int64 `json:"max"`
		}{lo, hi}
		it.PTTLAnchored = nil
	}
	if str, ok := it.String.(string); ok {
		it.String = expandAnchor(str, anchor)
	}
	return it
}

// expandWant turns a whole-string anchor expression into an exact integer
// expectation (also inside {"min","max"}).
func expandWant(t *testing.T, want any, anchor int64) any {
	t.Helper()
	switch w := want.(type) {
	case string:
		if reAnchor.MatchString(w) && reAnchor.FindString(w) == w {
			return json.Number(expandAnchor(w, anchor))
		}
	case map[string]any:
		out := make(map[string]any, len(w))
		for k, v := range w {
			out[k] = expandWant(t, v, anchor)
		}
		return out
	}
	return want
}

// rateFixtureOptions decodes the common ARGV tail of a rate vector step.
func rateFixtureOptions(a []any) (RateOptions, error) {
	rev, err1 := fixtureBytes(a[0])
	step, err2 := fixtureInt(a[len(a)-5])
	grace, err3 := fixtureInt(a[len(a)-4])
	dttl, err4 := fixtureInt(a[len(a)-3])
	dmax, err5 := fixtureInt(a[len(a)-2])
	id, err6 := fixtureBytes(a[len(a)-1])
	if err := firstErr(err1, err2, err3, err4, err5, err6); err != nil {
		return RateOptions{}, err
	}
	return RateOptions{
		PolicyRevision: string(rev), MaxClockStep: time.Duration(step) * time.Millisecond,
		CleanupGrace: time.Duration(grace) * time.Millisecond, DedupTTL: time.Duration(dttl) * time.Millisecond,
		DedupMaxEntries: int(dmax), EvaluationID: id,
	}, nil
}

func rateValues(r RateResult) []any {
	return []any{b2i(r.Allowed), r.Limit, r.Remaining, ms(r.RetryAfter), r.ResetAtMillis}
}

// ints decodes the n integer arguments after a rate vector step's revision.
func ints(a []any, n int) ([]int64, error) {
	out := make([]int64, n)
	for i := range out {
		v, err := fixtureInt(a[1+i])
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func rateFacades() map[string]facadeCall {
	return map[string]facadeCall{
		"rate-fixed-window-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if len(a) != 9 {
				return "", 0, nil, fmt.Errorf("want 9 args, have %d", len(a))
			}
			n, err1 := ints(a, 3)
			o, err2 := rateFixtureOptions(a)
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.RateFixedWindow(ctx, ks[0], ks[1], FixedWindowRequest{
				Limit: n[0], Cost: n[1], Window: time.Duration(n[2]) * time.Millisecond, RateOptions: o,
			})
			return r.Status.String(), r.Outcome(), rateValues(r), err
		},
		"rate-sliding-counter-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if len(a) != 9 {
				return "", 0, nil, fmt.Errorf("want 9 args, have %d", len(a))
			}
			n, err1 := ints(a, 3)
			o, err2 := rateFixtureOptions(a)
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.RateSlidingCounter(ctx, ks[0], ks[1], SlidingCounterRequest{
				Limit: n[0], Cost: n[1], Window: time.Duration(n[2]) * time.Millisecond, RateOptions: o,
			})
			return r.Status.String(), r.Outcome(), rateValues(r), err
		},
		"rate-gcra-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if len(a) != 9 {
				return "", 0, nil, fmt.Errorf("want 9 args, have %d", len(a))
			}
			n, err1 := ints(a, 3)
			o, err2 := rateFixtureOptions(a)
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.RateGCRA(ctx, ks[0], ks[1], GCRARequest{
				Limit: n[0], Period: time.Duration(n[1]) * time.Millisecond, Cost: n[2], RateOptions: o,
			})
			return r.Status.String(), r.Outcome(), rateValues(r), err
		},
		"rate-sliding-log-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if len(a) != 8 {
				return "", 0, nil, fmt.Errorf("want 8 args, have %d", len(a))
			}
			n, err1 := ints(a, 2)
			o, err2 := rateFixtureOptions(a)
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.RateSlidingLog(ctx, ks[0], ks[1], SlidingLogRequest{
				Limit: n[0], Window: time.Duration(n[1]) * time.Millisecond, RateOptions: o,
			})
			return r.Status.String(), r.Outcome(), rateValues(r), err
		},
		"rate-concurrency-acquire-v1": permitAcquireFacade((*Executor).RateConcurrencyAcquire),
		"rate-concurrency-acquire-v2": permitAcquireFacade((*Executor).RateConcurrencyAcquireV2),
		"rate-concurrency-renew-v1":   permitRenewFacade((*Executor).RateConcurrencyRenew),
		"rate-concurrency-renew-v2":   permitRenewFacade((*Executor).RateConcurrencyRenewV2),
		"rate-concurrency-release-v1": permitReleaseFacade((*Executor).RateConcurrencyRelease),
		"rate-concurrency-release-v2": permitReleaseFacade((*Executor).RateConcurrencyReleaseV2),
		"rate-concurrency-acquire-v3": permitAcquireFacade((*Executor).RateConcurrencyAcquireV3),
		"rate-concurrency-renew-v3":   permitRenewFacade((*Executor).RateConcurrencyRenewV3),
		"rate-concurrency-release-v3": permitReleaseFacade((*Executor).RateConcurrencyReleaseV3),
		"rate-token-bucket-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if len(a) != 10 {
				return "", 0, nil, fmt.Errorf("want 10 args, have %d", len(a))
			}
			n, err1 := ints(a, 4)
			o, err2 := rateFixtureOptions(a)
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.RateTokenBucket(ctx, ks[0], ks[1], TokenBucketRequest{
				CapacityScaled: n[0], RefillScaled: n[1], RefillPeriod: time.Duration(n[2]) * time.Millisecond,
				CostScaled: n[3], RateOptions: o,
			})
			return r.Status.String(), r.Outcome(), rateValues(r), err
		},
		"rate-fixed-window-v2": leanRateFacade(func(ctx context.Context, e *Executor, st, dd keys.Key, n []int64, o RateOptions) (RateResult, error) {
			return e.RateFixedWindowV2(ctx, st, dd, FixedWindowRequest{Limit: n[0], Cost: n[1], Window: time.Duration(n[2]) * time.Millisecond, RateOptions: o})
		}),
		"rate-fixed-window-v3": leanRateFacade(func(ctx context.Context, e *Executor, st, dd keys.Key, n []int64, o RateOptions) (RateResult, error) {
			return e.RateFixedWindowV3(ctx, st, dd, FixedWindowRequest{Limit: n[0], Cost: n[1], Window: time.Duration(n[2]) * time.Millisecond, RateOptions: o})
		}),
		"rate-sliding-counter-v2": leanRateFacade(func(ctx context.Context, e *Executor, st, dd keys.Key, n []int64, o RateOptions) (RateResult, error) {
			return e.RateSlidingCounterV2(ctx, st, dd, SlidingCounterRequest{Limit: n[0], Cost: n[1], Window: time.Duration(n[2]) * time.Millisecond, RateOptions: o})
		}),
		"rate-gcra-v2": leanRateFacade(func(ctx context.Context, e *Executor, st, dd keys.Key, n []int64, o RateOptions) (RateResult, error) {
			return e.RateGCRAV2(ctx, st, dd, GCRARequest{Limit: n[0], Period: time.Duration(n[1]) * time.Millisecond, Cost: n[2], RateOptions: o})
		}),
		// 5 arguments without dedup (one key), 8 with (two).
		"rate-sliding-log-v2": slidingLogFacade((*Executor).RateSlidingLogV2),
		"rate-sliding-log-v3": slidingLogFacade((*Executor).RateSlidingLogV3),
		// v2 takes 7 arguments without dedup (one key) and 10 with (two).
		"rate-token-bucket-v2": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if len(a) != 7 && len(a) != 10 {
				return "", 0, nil, fmt.Errorf("want 7 or 10 args, have %d", len(a))
			}
			n, err1 := ints(a, 6)
			rev, err2 := fixtureBytes(a[0])
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			req := TokenBucketRequest{
				CapacityScaled: n[0], RefillScaled: n[1], RefillPeriod: time.Duration(n[2]) * time.Millisecond, CostScaled: n[3],
				RateOptions: RateOptions{PolicyRevision: string(rev), MaxClockStep: time.Duration(n[4]) * time.Millisecond,
					CleanupGrace: time.Duration(n[5]) * time.Millisecond},
			}
			dedup := keys.Key{}
			if len(a) == 10 {
				o, err := rateFixtureOptions(a)
				if err != nil {
					return "", 0, nil, err
				}
				req.DedupTTL, req.DedupMaxEntries, req.EvaluationID = o.DedupTTL, o.DedupMaxEntries, o.EvaluationID
				dedup = ks[1]
			}
			r, err := e.RateTokenBucketV2(ctx, ks[0], dedup, req)
			return r.Status.String(), r.Outcome(), rateValues(r), err
		},
	}
}

// leanRateFacade adapts a v2 window/GCRA facade to the vectors: ARGV is
// revision, three algorithm integers, max clock step and grace (6, one
// key), plus dedup TTL, max entries and evaluation id with dedup (9, two
// keys).
func leanRateFacade(call func(ctx context.Context, e *Executor, st, dd keys.Key, n []int64, o RateOptions) (RateResult, error)) facadeCall {
	return func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
		if len(a) != 6 && len(a) != 9 {
			return "", 0, nil, fmt.Errorf("want 6 or 9 args, have %d", len(a))
		}
		n := make([]int64, 5)
		for i := range n {
			v, err := fixtureInt(a[1+i])
			if err != nil {
				return "", 0, nil, err
			}
			n[i] = v
		}
		rev, err := fixtureBytes(a[0])
		if err != nil {
			return "", 0, nil, err
		}
		o := RateOptions{PolicyRevision: string(rev), MaxClockStep: time.Duration(n[3]) * time.Millisecond,
			CleanupGrace: time.Duration(n[4]) * time.Millisecond}
		dedup := keys.Key{}
		if len(a) == 9 {
			full, err := rateFixtureOptions(a)
			if err != nil {
				return "", 0, nil, err
			}
			o.DedupTTL, o.DedupMaxEntries, o.EvaluationID = full.DedupTTL, full.DedupMaxEntries, full.EvaluationID
			dedup = ks[1]
		}
		r, err := call(ctx, e, ks[0], dedup, n[:3], o)
		return r.Status.String(), r.Outcome(), rateValues(r), err
	}
}

// permitAcquireFacade adapts a RateConcurrencyAcquire-shaped facade (v1, v2 or v3) to the vectors.
func permitAcquireFacade(call func(*Executor, context.Context, keys.Key, PermitAcquireRequest) (PermitAcquireResult, error)) facadeCall {
	return func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
		if len(a) != 6 {
			return "", 0, nil, fmt.Errorf("want 6 args, have %d", len(a))
		}
		rev, err1 := fixtureBytes(a[0])
		maxPermits, err2 := fixtureInt(a[1])
		owner, err3 := fixtureBytes(a[2])
		ttl, err4 := fixtureInt(a[3])
		step, err5 := fixtureInt(a[4])
		grace, err6 := fixtureInt(a[5])
		if err := firstErr(err1, err2, err3, err4, err5, err6); err != nil {
			return "", 0, nil, err
		}
		r, err := call(e, ctx, ks[0], PermitAcquireRequest{
			PolicyRevision: string(rev), MaxPermits: maxPermits, Owner: owner, TTL: time.Duration(ttl) * time.Millisecond,
			MaxClockStep: time.Duration(step) * time.Millisecond, CleanupGrace: time.Duration(grace) * time.Millisecond,
		})
		return r.Status.String(), r.Outcome(), []any{r.InUse, r.MaxPermits, r.ExpiresAtMillis, ms(r.RetryAfter)}, err
	}
}

// permitRenewFacade adapts a RateConcurrencyRenew-shaped facade (v1, v2 or v3) to the vectors.
func permitRenewFacade(call func(*Executor, context.Context, keys.Key, PermitRenewRequest) (PermitRenewResult, error)) facadeCall {
	return func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
		if len(a) != 5 {
			return "", 0, nil, fmt.Errorf("want 5 args, have %d", len(a))
		}
		rev, err1 := fixtureBytes(a[0])
		owner, err2 := fixtureBytes(a[1])
		ttl, err3 := fixtureInt(a[2])
		step, err4 := fixtureInt(a[3])
		grace, err5 := fixtureInt(a[4])
		if err := firstErr(err1, err2, err3, err4, err5); err != nil {
			return "", 0, nil, err
		}
		r, err := call(e, ctx, ks[0], PermitRenewRequest{
			PolicyRevision: string(rev), Owner: owner, TTL: time.Duration(ttl) * time.Millisecond,
			MaxClockStep: time.Duration(step) * time.Millisecond, CleanupGrace: time.Duration(grace) * time.Millisecond,
		})
		return r.Status.String(), r.Outcome(), []any{r.InUse, r.ExpiresAtMillis}, err
	}
}

// permitReleaseFacade adapts a RateConcurrencyRelease-shaped facade (v1, v2 or v3) to the vectors.
func permitReleaseFacade(call func(*Executor, context.Context, keys.Key, PermitReleaseRequest) (PermitReleaseResult, error)) facadeCall {
	return func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
		if len(a) != 3 {
			return "", 0, nil, fmt.Errorf("want 3 args, have %d", len(a))
		}
		rev, err1 := fixtureBytes(a[0])
		owner, err2 := fixtureBytes(a[1])
		step, err3 := fixtureInt(a[2])
		if err := firstErr(err1, err2, err3); err != nil {
			return "", 0, nil, err
		}
		r, err := call(e, ctx, ks[0], PermitReleaseRequest{
			PolicyRevision: string(rev), Owner: owner, MaxClockStep: time.Duration(step) * time.Millisecond,
		})
		return r.Status.String(), r.Outcome(), []any{r.InUse}, err
	}
}

// slidingLogFacade adapts a lean sliding-log facade (v2, v3) to the vector
// runner: 5 arguments without dedup (one key), 8 with (two).
func slidingLogFacade(call func(*Executor, context.Context, keys.Key, keys.Key, SlidingLogRequest) (RateResult, error)) facadeCall {
	return func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
		if len(a) != 5 && len(a) != 8 {
			return "", 0, nil, fmt.Errorf("want 5 or 8 args, have %d", len(a))
		}
		n, err1 := ints(a, 4)
		rev, err2 := fixtureBytes(a[0])
		if err := firstErr(err1, err2); err != nil {
			return "", 0, nil, err
		}
		req := SlidingLogRequest{Limit: n[0], Window: time.Duration(n[1]) * time.Millisecond,
			RateOptions: RateOptions{PolicyRevision: string(rev), MaxClockStep: time.Duration(n[2]) * time.Millisecond,
				CleanupGrace: time.Duration(n[3]) * time.Millisecond}}
		dedup := keys.Key{}
		if len(a) == 8 {
			o, err := rateFixtureOptions(a)
			if err != nil {
				return "", 0, nil, err
			}
			req.DedupTTL, req.DedupMaxEntries, req.EvaluationID = o.DedupTTL, o.DedupMaxEntries, o.EvaluationID
			dedup = ks[1]
		}
		r, err := call(e, ctx, ks[0], dedup, req)
		return r.Status.String(), r.Outcome(), rateValues(r), err
	}
}
