package programs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs/internal/rateref"
)

// rateKeys builds the state and dedup keys of one rate subject: one
// keys.Builder.Group, so both share a hash tag.
func rateKeys(t testing.TB, b *keys.Builder, tag, kind string) (state, dedup keys.Key) {
	t.Helper()
	ks, err := b.Group(keys.Spec{Capability: keys.CapRate, Region: "policy-r1", KeyVersion: 1, Parts: [][]byte{[]byte(tag)}}, kind, "dedup")
	require.NoError(t, err)
	require.Equal(t, ks[0].Slot(), ks[1].Slot())
	return ks[0], ks[1]
}

// rateAlgo adapts one algorithm to the property driver: call runs the Lua
// program, ref the reference on the same server time, stored renders the
// reference state as the hash the program must have written, shift moves
// the last observation forward (a server clock stepping back).
type rateAlgo struct {
	name   string
	kind   string
	call   func(ctx context.Context, e *Executor, st, dd keys.Key, opts RateOptions, r *rand.Rand) (RateResult, func(now int64, c rateref.Common) (rateref.Decision, error), error)
	stored func() map[string]string
	shift  func(ms int64) bool
	// read and redisShift override the hash defaults (the sliding log is a
	// sorted set whose sentinel score is minus the last observation).
	read       func(ctx context.Context, admin redis.UniversalClient, key string) (map[string]string, error)
	redisShift func(ctx context.Context, admin redis.UniversalClient, key string, ms int64) error
	// noDedup marks an algorithm run with dedup off: no replays expected.
	noDedup bool
}

// readString and shiftString are the read/shift of a string state
// '1:<tokens>:<ts>:<rev>' (rate-token-bucket-v2), as a one-entry map.
func readString(ctx context.Context, admin redis.UniversalClient, key string) (map[string]string, error) {
	v, err := admin.Get(ctx, key).Result()
	if err == redis.Nil {
		return map[string]string{}, nil
	}
	return map[string]string{"value": v}, err
}

func shiftString(ctx context.Context, admin redis.UniversalClient, key string, ms int64) error {
	return shiftStringField(ctx, admin, key, 2, ms)
}

// shiftStringField moves the ts field (field index i, counting from 0, of
// a ':'-separated string state) ms ahead.
func shiftStringField(ctx context.Context, admin redis.UniversalClient, key string, i int, ms int64) error {
	v, err := admin.Get(ctx, key).Result()
	if err != nil {
		return err
	}
	parts := strings.SplitN(v, ":", i+2)
	if len(parts) != i+2 {
		return fmt.Errorf("malformed state %q", v)
	}
	ts, err := strconv.ParseInt(parts[i], 10, 64)
	if err != nil {
		return err
	}
	parts[i] = strconv.FormatInt(ts+ms, 10)
	return admin.Set(ctx, key, strings.Join(parts, ":"), redis.KeepTTL).Err()
}

func readHash(ctx context.Context, admin redis.UniversalClient, key string) (map[string]string, error) {
	return admin.HGetAll(ctx, key).Result()
}

func shiftHash(ctx context.Context, admin redis.UniversalClient, key string, ms int64) error {
	ts, err := admin.HGet(ctx, key, "ts").Int64()
	if err != nil {
		return err
	}
	return admin.HSet(ctx, key, "ts", ts+ms).Err()
}

func rateCommon(o RateOptions) rateref.Common {
	return rateref.Common{
		MaxClockStepMillis: o.MaxClockStep.Milliseconds(), CleanupGraceMillis: o.CleanupGrace.Milliseconds(),
		DedupTTLMillis: o.DedupTTL.Milliseconds(), DedupMaxEntries: int64(o.DedupMaxEntries), EvaluationID: string(o.EvaluationID),
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func newRateAlgos(seed uint64) []rateAlgo {
	r := rand.New(rand.NewPCG(seed, 7))
	var (
		fw      rateref.FixedWindowState
		sc      rateref.SlidingCounterState
		tb      rateref.TokenBucketState
		tb2     rateref.TokenBucketState
		tb2n    rateref.TokenBucketState
		dedupT2 = &rateref.Dedup{}
		dedupF  = &rateref.Dedup{}
		dedupS  = &rateref.Dedup{}
		dedupT  = &rateref.Dedup{}
		gc      rateref.GCRAState
		dedupG  = &rateref.Dedup{}
		lg      rateref.SlidingLogState
		dedupL  = &rateref.Dedup{}
	)
	limit := 3 + r.Int64N(18)
	window := 40 + r.Int64N(160)
	capacity := (2 + r.Int64N(18)) * rateref.Scale
	refill := 1 + r.Int64N(capacity)
	period := 50 + r.Int64N(400)
	gcraLimit, gcraPeriod := 2+r.Int64N(12), 60+r.Int64N(300)
	logLimit, logWindow := 2+r.Int64N(15), 40+r.Int64N(160)
	return []rateAlgo{
		{
			name: "sliding-log", kind: "log",
			call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, _ *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
				p := rateref.SlidingLogParams{Limit: logLimit, WindowMillis: logWindow}
				res, err := e.RateSlidingLog(ctx, st, dd, SlidingLogRequest{Limit: p.Limit, Window: time.Duration(p.WindowMillis) * time.Millisecond, RateOptions: o})
				return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
					return rateref.SlidingLog(&lg, dedupL, now, p, c)
				}, err
			},
			stored: func() map[string]string { return slidingLogStored(&lg) },
			shift:  func(ms int64) bool { lg.Observed += ms; return lg.Present },
			read:   readZSet, redisShift: shiftSentinel,
		},
		{
			name: "gcra", kind: "bucket",
			call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, r *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
				p := rateref.GCRAParams{Limit: gcraLimit, PeriodMillis: gcraPeriod, Cost: 1 + r.Int64N(gcraLimit)}
				if r.IntN(3) > 0 {
					p.Cost = 1
				}
				res, err := e.RateGCRA(ctx, st, dd, GCRARequest{Limit: p.Limit, Period: time.Duration(p.PeriodMillis) * time.Millisecond, Cost: p.Cost, RateOptions: o})
				return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
					return rateref.GCRA(&gc, dedupG, now, p, c)
				}, err
			},
			stored: func() map[string]string {
				if !gc.Present {
					return map[string]string{}
				}
				return map[string]string{"v": "1", "rev": "r1", "tat": itoa(gc.TATMicros), "ts": itoa(gc.Observed)}
			},
			shift: func(ms int64) bool { gc.Observed += ms; return gc.Present },
		},
		{
			name: "fixed-window", kind: "window",
			call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, r *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
				p := rateref.FixedWindowParams{Limit: limit, Cost: 1 + r.Int64N(limit), WindowMillis: window}
				if r.IntN(3) > 0 {
					p.Cost = 1
				}
				res, err := e.RateFixedWindow(ctx, st, dd, FixedWindowRequest{Limit: p.Limit, Cost: p.Cost, Window: time.Duration(window) * time.Millisecond, RateOptions: o})
				return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
					return rateref.FixedWindow(&fw, dedupF, now, p, c)
				}, err
			},
			stored: func() map[string]string {
				if !fw.Present {
					return map[string]string{}
				}
				return map[string]string{"v": "1", "rev": "r1", "wid": itoa(fw.WindowID), "used": itoa(fw.Used), "ts": itoa(fw.Observed)}
			},
			shift: func(ms int64) bool { fw.Observed += ms; return fw.Present },
		},
		{
			name: "sliding-counter", kind: "window",
			call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, r *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
				p := rateref.SlidingCounterParams{Limit: limit, Cost: 1 + r.Int64N(limit), WindowMillis: window}
				if r.IntN(3) > 0 {
					p.Cost = 1
				}
				res, err := e.RateSlidingCounter(ctx, st, dd, SlidingCounterRequest{Limit: p.Limit, Cost: p.Cost, Window: time.Duration(window) * time.Millisecond, RateOptions: o})
				return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
					return rateref.SlidingCounter(&sc, dedupS, now, p, c)
				}, err
			},
			stored: func() map[string]string {
				if !sc.Present {
					return map[string]string{}
				}
				return map[string]string{"v": "1", "rev": "r1", "wid": itoa(sc.WindowID), "cur": itoa(sc.Current), "prev": itoa(sc.Previous), "ts": itoa(sc.Observed)}
			},
			shift: func(ms int64) bool { sc.Observed += ms; return sc.Present },
		},
		{
			name: "token-bucket", kind: "bucket",
			call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, r *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
				p := rateref.TokenBucketParams{CapacityScaled: capacity, RefillScaled: refill, PeriodMillis: period, CostScaled: 1 + r.Int64N(capacity/2)}
				res, err := e.RateTokenBucket(ctx, st, dd, TokenBucketRequest{
					CapacityScaled: p.CapacityScaled, RefillScaled: p.RefillScaled, RefillPeriod: time.Duration(period) * time.Millisecond,
					CostScaled: p.CostScaled, RateOptions: o,
				})
				return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
					return rateref.TokenBucket(&tb, dedupT, now, p, c)
				}, err
			},
			stored: func() map[string]string {
				if !tb.Present {
					return map[string]string{}
				}
				return map[string]string{"v": "1", "rev": "r1", "tok": itoa(tb.TokensScaled), "ts": itoa(tb.Observed)}
			},
			shift: func(ms int64) bool { tb.Observed += ms; return tb.Present },
		},
		tokenBucketV2Algo("token-bucket-v2", &tb2, dedupT2, capacity, refill, period, false),
		// The same program with dedup off: one key, seven arguments, no
		// dedup record; every decision and the state still match.
		tokenBucketV2Algo("token-bucket-v2-nodedup", &tb2n, &rateref.Dedup{}, capacity, refill, period, true),
		fixedWindowV2Algo("fixed-window-v2", limit, window, false),
		fixedWindowV2Algo("fixed-window-v2-nodedup", limit, window, true),
		fixedWindowV3Algo("fixed-window-v3", limit, window, false),
		fixedWindowV3Algo("fixed-window-v3-nodedup", limit, window, true),
		// The longest window: every stream stays in one 366-day window, so
		// it pins the reset and retry-after (up to 366 days) of every call.
		fixedWindowV3Algo("fixed-window-v3-366d", limit, rateref.MaxFixedWindowV3Millis, false),
		fixedWindowMixedAlgo("fixed-window-v2-v3", limit, window),
		slidingCounterV2Algo("sliding-counter-v2", limit, window, false),
		slidingCounterV2Algo("sliding-counter-v2-nodedup", limit, window, true),
		gcraV2Algo("gcra-v2", gcraLimit, gcraPeriod, false),
		gcraV2Algo("gcra-v2-nodedup", gcraLimit, gcraPeriod, true),
		slidingLogV2Algo("sliding-log-v2", logLimit, logWindow, false),
		slidingLogV2Algo("sliding-log-v2-nodedup", logLimit, logWindow, true),
		slidingLogV3Algo("sliding-log-v3", logLimit, logWindow, false),
		slidingLogV3Algo("sliding-log-v3-nodedup", logLimit, logWindow, true),
	}
}

// slidingLogV3Algo drives rate-sliding-log-v3 against rateref.SlidingLog.
// The reference trims on every admit, v3 on the first admit of a tick: the
// stored log is compared without the events that had expired at the last
// admit (the newest event), and must never hold more than 2 * limit
// events.
func slidingLogV3Algo(name string, limit, window int64, noDedup bool) rateAlgo {
	a := slidingLogLeanAlgo(name, limit, window, noDedup, true, (*Executor).RateSlidingLogV3)
	a.read = func(ctx context.Context, admin redis.UniversalClient, key string) (map[string]string, error) {
		zs, err := admin.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil || len(zs) == 0 {
			return map[string]string{}, err
		}
		if int64(len(zs)) > 2*limit+1 {
			return nil, fmt.Errorf("the log holds %d members, more than 2 * limit (%d) events + the sentinel", len(zs), limit)
		}
		// Ascending scores: the newest event, the last admit, is last.
		out, newest := map[string]string{}, zs[len(zs)-1:]
		for _, z := range zs {
			if z.Score <= 0 || z.Score > newest[0].Score-float64(window) {
				out[fmt.Sprint(z.Member)] = strconv.FormatFloat(z.Score, 'f', -1, 64)
			}
		}
		return out, nil
	}
	return a
}

// slidingLogV2Algo drives rate-sliding-log-v2 against rateref.SlidingLog
// over rate-sliding-log-v1's sorted set (the state both share).
func slidingLogV2Algo(name string, limit, window int64, noDedup bool) rateAlgo {
	return slidingLogLeanAlgo(name, limit, window, noDedup, false, (*Executor).RateSlidingLogV2)
}

// slidingLogLeanAlgo drives a lean sliding-log facade (v2, v3) against
// rateref.SlidingLog. A clock stepping back moves the sentinel ahead; with
// wholeLog it moves every event ahead too, which is what a clock step is
// to a log only its own program writes (the sentinel is the last admit's
// time, never ahead of the newest event).
func slidingLogLeanAlgo(name string, limit, window int64, noDedup, wholeLog bool,
	run func(*Executor, context.Context, keys.Key, keys.Key, SlidingLogRequest) (RateResult, error)) rateAlgo {
	var (
		lg    rateref.SlidingLogState
		dedup = &rateref.Dedup{}
	)
	a := rateAlgo{
		name: name, kind: "log", noDedup: noDedup,
		call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, _ *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
			p := rateref.SlidingLogParams{Limit: limit, WindowMillis: window}
			o, dd = leanOptions(o, dd, noDedup)
			res, err := run(e, ctx, st, dd, SlidingLogRequest{Limit: p.Limit, Window: time.Duration(p.WindowMillis) * time.Millisecond, RateOptions: o})
			return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
				return rateref.SlidingLog(&lg, dedup, now, p, leanCommon(c, noDedup))
			}, err
		},
		stored: func() map[string]string { return slidingLogStored(&lg) },
		shift:  func(ms int64) bool { lg.Observed += ms; return lg.Present },
		read:   readZSet, redisShift: shiftSentinel,
	}
	if wholeLog {
		a.shift = func(ms int64) bool {
			lg.Observed += ms
			for i := range lg.Events {
				lg.Events[i].Score += ms
			}
			return lg.Present
		}
		a.redisShift = shiftLog
	}
	return a
}

// shiftLog moves every event of the log and its last observation (minus
// the sentinel's score) ms ahead; members keep their names.
func shiftLog(ctx context.Context, admin redis.UniversalClient, key string, ms int64) error {
	zs, err := admin.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		return err
	}
	for i := range zs {
		if zs[i].Score > 0 {
			zs[i].Score += float64(ms)
		} else {
			zs[i].Score -= float64(ms)
		}
	}
	return admin.ZAdd(ctx, key, zs...).Err()
}

// slidingLogStored renders the reference log as the sorted set (member ->
// score) the programs keep.
func slidingLogStored(lg *rateref.SlidingLogState) map[string]string {
	if !lg.Present {
		return map[string]string{}
	}
	out := map[string]string{"!v1:r1": itoa(-lg.Observed)}
	for _, ev := range lg.Events {
		out[ev.Member] = itoa(ev.Score)
	}
	return out
}

func readZSet(ctx context.Context, admin redis.UniversalClient, key string) (map[string]string, error) {
	zs, err := admin.ZRangeWithScores(ctx, key, 0, -1).Result()
	out := map[string]string{}
	for _, z := range zs {
		out[fmt.Sprint(z.Member)] = strconv.FormatFloat(z.Score, 'f', -1, 64)
	}
	return out, err
}

// shiftSentinel moves the log's last observation (minus the sentinel's
// score) ms ahead.
func shiftSentinel(ctx context.Context, admin redis.UniversalClient, key string, ms int64) error {
	score, err := admin.ZScore(ctx, key, "!v1:r1").Result()
	if err != nil {
		return err
	}
	return admin.ZAdd(ctx, key, redis.Z{Score: score - float64(ms), Member: "!v1:r1"}).Err()
}

// leanOptions drops the dedup options (and key) of a no-dedup stream.
func leanOptions(o RateOptions, dd keys.Key, noDedup bool) (RateOptions, keys.Key) {
	if noDedup {
		return RateOptions{PolicyRevision: o.PolicyRevision, MaxClockStep: o.MaxClockStep, CleanupGrace: o.CleanupGrace}, keys.Key{}
	}
	return o, dd
}

// leanCommon is c for the reference: with dedup off it must not remember
// (it still validates the unused id and bound).
func leanCommon(c rateref.Common, noDedup bool) rateref.Common {
	if noDedup {
		c.DedupTTLMillis = 0
	}
	return c
}

// fixedWindowV2Algo drives rate-fixed-window-v2 against
// rateref.FixedWindow (v1's formulas) over its string state
// 'f1:<used>:<ts>:<rev>'. v2 stores no window id: it is floor(ts/window),
// which the reference keeps as an invariant, so a shifted observation
// moves the reference's window with it, exactly as the stored string does.
func fixedWindowV2Algo(name string, limit, window int64, noDedup bool) rateAlgo {
	return fixedWindowLeanAlgo(name, limit, window, noDedup, func(*rand.Rand) (fixedWindowRun, fixedWindowRef) {
		return (*Executor).RateFixedWindowV2, rateref.FixedWindow
	})
}

// fixedWindowV3Algo drives rate-fixed-window-v3 against
// rateref.FixedWindowV3 (v2's formulas and state, windows up to 366 days).
func fixedWindowV3Algo(name string, limit, window int64, noDedup bool) rateAlgo {
	return fixedWindowLeanAlgo(name, limit, window, noDedup, func(*rand.Rand) (fixedWindowRun, fixedWindowRef) {
		return (*Executor).RateFixedWindowV3, rateref.FixedWindowV3
	})
}

// fixedWindowMixedAlgo is a rolling upgrade from rate-fixed-window-v2 to
// -v3: each call of one stream, on one key, goes to v2 or v3 at random, and
// one reference decides them all. The two share the state string and the
// dedup records, so a v3 call replays a v2 call's decision and the reverse.
func fixedWindowMixedAlgo(name string, limit, window int64) rateAlgo {
	return fixedWindowLeanAlgo(name, limit, window, false, func(r *rand.Rand) (fixedWindowRun, fixedWindowRef) {
		if r.IntN(2) == 0 {
			return (*Executor).RateFixedWindowV2, rateref.FixedWindow
		}
		return (*Executor).RateFixedWindowV3, rateref.FixedWindowV3
	})
}

type (
	fixedWindowRun func(*Executor, context.Context, keys.Key, keys.Key, FixedWindowRequest) (RateResult, error)
	fixedWindowRef func(*rateref.FixedWindowState, *rateref.Dedup, int64, rateref.FixedWindowParams, rateref.Common) (rateref.Decision, error)
)

// fixedWindowLeanAlgo drives a lean fixed-window facade (v2, v3, chosen
// per call by pick) against its reference over 'f1:<used>:<ts>:<rev>'.
func fixedWindowLeanAlgo(name string, limit, window int64, noDedup bool, pick func(*rand.Rand) (fixedWindowRun, fixedWindowRef)) rateAlgo {
	var (
		fw    rateref.FixedWindowState
		dedup = &rateref.Dedup{}
	)
	return rateAlgo{
		name: name, kind: "window", noDedup: noDedup,
		call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, r *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
			p := rateref.FixedWindowParams{Limit: limit, Cost: 1 + r.Int64N(limit), WindowMillis: window}
			if r.IntN(3) > 0 {
				p.Cost = 1
			}
			run, ref := pick(r)
			o, dd = leanOptions(o, dd, noDedup)
			res, err := run(e, ctx, st, dd, FixedWindowRequest{Limit: p.Limit, Cost: p.Cost, Window: time.Duration(window) * time.Millisecond, RateOptions: o})
			return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
				return ref(&fw, dedup, now, p, leanCommon(c, noDedup))
			}, err
		},
		stored: func() map[string]string {
			if !fw.Present {
				return map[string]string{}
			}
			return map[string]string{"value": "f1:" + itoa(fw.Used) + ":" + itoa(fw.Observed) + ":r1"}
		},
		shift: func(ms int64) bool {
			fw.Observed += ms
			fw.WindowID = fw.Observed / window
			return fw.Present
		},
		read: readString, redisShift: shiftString,
	}
}

// slidingCounterV2Algo drives rate-sliding-counter-v2 against
// rateref.SlidingCounter over 's1:<cur>:<prev>:<ts>:<rev>' (window id as
// for fixedWindowV2Algo).
func slidingCounterV2Algo(name string, limit, window int64, noDedup bool) rateAlgo {
	var (
		sc    rateref.SlidingCounterState
		dedup = &rateref.Dedup{}
	)
	return rateAlgo{
		name: name, kind: "window", noDedup: noDedup,
		call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, r *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
			p := rateref.SlidingCounterParams{Limit: limit, Cost: 1 + r.Int64N(limit), WindowMillis: window}
			if r.IntN(3) > 0 {
				p.Cost = 1
			}
			o, dd = leanOptions(o, dd, noDedup)
			res, err := e.RateSlidingCounterV2(ctx, st, dd, SlidingCounterRequest{Limit: p.Limit, Cost: p.Cost, Window: time.Duration(window) * time.Millisecond, RateOptions: o})
			return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
				return rateref.SlidingCounter(&sc, dedup, now, p, leanCommon(c, noDedup))
			}, err
		},
		stored: func() map[string]string {
			if !sc.Present {
				return map[string]string{}
			}
			return map[string]string{"value": "s1:" + itoa(sc.Current) + ":" + itoa(sc.Previous) + ":" + itoa(sc.Observed) + ":r1"}
		},
		shift: func(ms int64) bool {
			sc.Observed += ms
			sc.WindowID = sc.Observed / window
			return sc.Present
		},
		read: readString,
		redisShift: func(ctx context.Context, admin redis.UniversalClient, key string, ms int64) error {
			return shiftStringField(ctx, admin, key, 3, ms)
		},
	}
}

// gcraV2Algo drives rate-gcra-v2 against rateref.GCRA over
// 'g1:<tat>:<ts>:<rev>'.
func gcraV2Algo(name string, limit, period int64, noDedup bool) rateAlgo {
	var (
		gc    rateref.GCRAState
		dedup = &rateref.Dedup{}
	)
	return rateAlgo{
		name: name, kind: "bucket", noDedup: noDedup,
		call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, r *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
			p := rateref.GCRAParams{Limit: limit, PeriodMillis: period, Cost: 1 + r.Int64N(limit)}
			if r.IntN(3) > 0 {
				p.Cost = 1
			}
			o, dd = leanOptions(o, dd, noDedup)
			res, err := e.RateGCRAV2(ctx, st, dd, GCRARequest{Limit: p.Limit, Period: time.Duration(p.PeriodMillis) * time.Millisecond, Cost: p.Cost, RateOptions: o})
			return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
				return rateref.GCRA(&gc, dedup, now, p, leanCommon(c, noDedup))
			}, err
		},
		stored: func() map[string]string {
			if !gc.Present {
				return map[string]string{}
			}
			return map[string]string{"value": "g1:" + itoa(gc.TATMicros) + ":" + itoa(gc.Observed) + ":r1"}
		},
		shift: func(ms int64) bool { gc.Observed += ms; return gc.Present },
		read:  readString, redisShift: shiftString,
	}
}

// tokenBucketV2Algo drives rate-token-bucket-v2 against rateref.TokenBucket
// (the same formulas as v1) over its string state.
func tokenBucketV2Algo(name string, tb *rateref.TokenBucketState, dedup *rateref.Dedup, capacity, refill, period int64, noDedup bool) rateAlgo {
	return rateAlgo{
		name: name, kind: "bucket", noDedup: noDedup,
		call: func(ctx context.Context, e *Executor, st, dd keys.Key, o RateOptions, r *rand.Rand) (RateResult, func(int64, rateref.Common) (rateref.Decision, error), error) {
			p := rateref.TokenBucketParams{CapacityScaled: capacity, RefillScaled: refill, PeriodMillis: period, CostScaled: 1 + r.Int64N(capacity/2)}
			if noDedup {
				o.DedupTTL, o.DedupMaxEntries, o.EvaluationID, dd = 0, 0, nil, keys.Key{}
			}
			res, err := e.RateTokenBucketV2(ctx, st, dd, TokenBucketRequest{
				CapacityScaled: p.CapacityScaled, RefillScaled: p.RefillScaled, RefillPeriod: time.Duration(period) * time.Millisecond,
				CostScaled: p.CostScaled, RateOptions: o,
			})
			return res, func(now int64, c rateref.Common) (rateref.Decision, error) {
				if noDedup {
					c.DedupTTLMillis = 0 // the reference validates the (unused) id and bound
				}
				return rateref.TokenBucket(tb, dedup, now, p, c)
			}, err
		},
		stored: func() map[string]string {
			if !tb.Present {
				return map[string]string{}
			}
			return map[string]string{"value": "1:" + itoa(tb.TokensScaled) + ":" + itoa(tb.Observed) + ":r1"}
		},
		shift: func(ms int64) bool { tb.Observed += ms; return tb.Present },
		read:  readString, redisShift: shiftString,
	}
}

// TestRatePropertyLuaMatchesReference drives seeded random request streams
// (random costs, gaps, evaluation-id repeats and a few server-clock steps
// back) through the Lua programs on a real server and through rateref fed
// with the server time each call reported, and compares every decision and
// the stored state after every call. Whether a stream is ever denied
// depends on how many calls fit in a 40..200 ms window, so a stream that
// was not is followed by another one (a fresh key, the random source
// continued), three at most; every call of every stream is compared.
func TestRatePropertyLuaMatchesReference(t *testing.T) {
	s := redistest.StartStandalone(t)
	client := standaloneClient(t, s)
	admin := s.Admin()
	cat := mustCatalog(t)
	b := testBuilder(t)
	ctx := context.Background()
	require.NoError(t, Deploy(ctx, cat, admin))
	const steps = 150
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, client)
		require.NoError(t, err)
		// One seed per mode keeps the suite fast; the streams run in
		// parallel because they mostly sleep.
		seed := map[policy.ProgramMode]uint64{policy.ProgramsEvalshaManaged: 1, policy.ProgramsFunctionsProvisioned: 2}[mode]
		{
			for _, algo := range newRateAlgos(seed) {
				t.Run(fmt.Sprintf("%s/seed-%d/%s", mode, seed, algo.name), func(t *testing.T) {
					t.Parallel()
					r := rand.New(rand.NewPCG(seed, 99))
					read, redisShift := readHash, shiftHash
					if algo.read != nil {
						read, redisShift = algo.read, algo.redisShift
					}
					stream := func(algo rateAlgo, n int) map[rateref.Status]int {
						st, dd := rateKeys(t, b, fmt.Sprintf("prop-%s-%d-%s-%d", mode, seed, algo.name, n), algo.kind)
						var (
							ids  []string
							undo int64
						)
						counts := map[rateref.Status]int{}
						for i := range steps {
							// Gaps: mostly back to back, sometimes up to 40 ms (windows
							// are 40..200 ms, refill periods 50..450 ms).
							if r.IntN(10) >= 7 {
								time.Sleep(time.Duration(r.IntN(40)) * time.Millisecond)
							}
							// A server clock stepping back by X is the stored
							// observation moving X ahead of TIME: mostly within the
							// max step (clamp), sometimes beyond (CLOCK_UNSAFE), in
							// which case the next step corrects the clock again.
							shift := clockStep(r, 20, &undo)
							if shift != 0 && algo.shift(shift) {
								require.NoError(t, redisShift(ctx, admin, st.Redis(), shift))
							}
							id := "ev-" + strconv.Itoa(i)
							if len(ids) > 0 && r.IntN(6) == 0 {
								id = ids[r.IntN(len(ids))] // a retry of an earlier evaluation
							}
							ids = append(ids, id)
							opts := RateOptions{
								PolicyRevision: "r1", MaxClockStep: 200 * time.Millisecond, CleanupGrace: 10 * time.Second,
								DedupTTL: time.Minute, DedupMaxEntries: 4096, EvaluationID: []byte(id),
							}
							res, ref, err := algo.call(ctx, e, st, dd, opts, r)
							require.NoError(t, err, "step %d", i)
							want, err := ref(res.ServerNowMillis, rateCommon(opts))
							require.NoError(t, err, "step %d", i)
							counts[want.Status]++
							got := rateref.Decision{
								Status: rateref.Status(res.Status), Allowed: res.Allowed, Limit: res.Limit, Remaining: res.Remaining,
								RetryAfterMillis: res.RetryAfter.Milliseconds(), ResetAtMillis: res.ResetAtMillis,
							}
							want.StateTTLMillis = 0
							require.Equal(t, want, got, "step %d (id %s, now %d)", i, id, res.ServerNowMillis)
							stored, err := read(ctx, admin, st.Redis())
							require.NoError(t, err)
							require.Equal(t, algo.stored(), stored, "step %d state", i)
						}
						return counts
					}
					counts := stream(algo, 1) // what all streams compared
					for n := 2; counts[rateref.Denied] == 0; n++ {
						require.Less(t, n, 4, "%d streams and none was denied: the machine is too slow for %d calls in a window", n-1, steps)
						t.Logf("stream %d was never denied (%v); another one", n-1, counts)
						for st, c := range stream(freshRateAlgo(t, seed, algo.name), n) {
							counts[st] += c
						}
					}
					// The stream must have exercised the interesting paths.
					assert.Positive(t, counts[rateref.Allowed], "allowed")
					assert.Positive(t, counts[rateref.Denied], "denied")
					if !algo.noDedup {
						assert.Positive(t, counts[rateref.DedupReplay], "replayed")
					} else {
						assert.Zero(t, counts[rateref.DedupReplay], "replayed without dedup")
					}
					assert.Positive(t, counts[rateref.ClockUnsafe], "clock unsafe")
					t.Logf("statuses: %v", counts)
				})
			}
		}
	}
}

// freshRateAlgo returns the algorithm name of newRateAlgos(seed) with
// fresh reference state (the same parameters).
func freshRateAlgo(t *testing.T, seed uint64, name string) rateAlgo {
	t.Helper()
	for _, a := range newRateAlgos(seed) {
		if a.name == name {
			return a
		}
	}
	require.FailNow(t, "no rate algorithm "+name)
	return rateAlgo{}
}

// TestRateConcurrencyExactAdmission hammers one subject from many
// goroutines: the program's atomicity admits exactly the limit, never more
// and never less, for the fixed window, the token buckets and the lean v2
// programs (with and without dedup).
func TestRateConcurrencyExactAdmission(t *testing.T) {
	s := redistest.StartStandalone(t)
	user, pass := s.AdminUser()
	client := redis.NewClient(&redis.Options{
		Addr: s.Addr(), Username: user, Password: pass, DisableIdentity: true, MaxRetries: -1, PoolSize: 8,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
	t.Cleanup(func() { _ = client.Close() })
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, client)
	require.NoError(t, err)
	b := testBuilder(t)
	ctx := context.Background()
	const workers, perWorker, limit = 8, 50, 100
	opts := func(id string) RateOptions {
		return RateOptions{
			PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second,
			DedupTTL: time.Minute, DedupMaxEntries: 4096, EvaluationID: []byte(id),
		}
	}
	cases := map[string]func(st, dd keys.Key, id string) (RateResult, error){
		// A 30-day window: crossing a window boundary during the test is
		// practically impossible.
		"fixed-window": func(st, dd keys.Key, id string) (RateResult, error) {
			return e.RateFixedWindow(ctx, st, dd, FixedWindowRequest{Limit: limit, Cost: 1, Window: 30 * 24 * time.Hour, RateOptions: opts(id)})
		},
		// 100 tokens refilling 2 per 12.5 h: far below one token during the test.
		"token-bucket": func(st, dd keys.Key, id string) (RateResult, error) {
			return e.RateTokenBucket(ctx, st, dd, TokenBucketRequest{
				CapacityScaled: limit * RateScale, RefillScaled: 2 * RateScale, RefillPeriod: 45_000 * time.Second,
				CostScaled: RateScale, RateOptions: opts(id),
			})
		},
		"token-bucket-v2": func(st, dd keys.Key, id string) (RateResult, error) {
			return e.RateTokenBucketV2(ctx, st, dd, TokenBucketRequest{
				CapacityScaled: limit * RateScale, RefillScaled: 2 * RateScale, RefillPeriod: 45_000 * time.Second,
				CostScaled: RateScale, RateOptions: opts(id),
			})
		},
		"fixed-window-v2": func(st, dd keys.Key, id string) (RateResult, error) {
			return e.RateFixedWindowV2(ctx, st, dd, FixedWindowRequest{Limit: limit, Cost: 1, Window: 30 * 24 * time.Hour, RateOptions: opts(id)})
		},
		"fixed-window-v2-nodedup": func(st, _ keys.Key, _ string) (RateResult, error) {
			return e.RateFixedWindowV2(ctx, st, keys.Key{}, FixedWindowRequest{Limit: limit, Cost: 1, Window: 30 * 24 * time.Hour,
				RateOptions: RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second}})
		},
		// The longest window, 366 days.
		"fixed-window-v3": func(st, dd keys.Key, id string) (RateResult, error) {
			return e.RateFixedWindowV3(ctx, st, dd, FixedWindowRequest{Limit: limit, Cost: 1, Window: MaxFixedWindowV3, RateOptions: opts(id)})
		},
		"fixed-window-v3-nodedup": func(st, _ keys.Key, _ string) (RateResult, error) {
			return e.RateFixedWindowV3(ctx, st, keys.Key{}, FixedWindowRequest{Limit: limit, Cost: 1, Window: MaxFixedWindowV3,
				RateOptions: RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second}})
		},
		// A rolling upgrade: v2 and v3 callers (by the id's last digit) race
		// on one key, under one 30-day policy.
		"fixed-window-v2-v3": func(st, dd keys.Key, id string) (RateResult, error) {
			req := FixedWindowRequest{Limit: limit, Cost: 1, Window: 30 * 24 * time.Hour, RateOptions: opts(id)}
			if (id[len(id)-1]-'0')%2 == 0 {
				return e.RateFixedWindowV2(ctx, st, dd, req)
			}
			return e.RateFixedWindowV3(ctx, st, dd, req)
		},
		// A 30-day window: the previous window is empty, so the sliding
		// counter admits exactly the limit too.
		"sliding-counter-v2": func(st, dd keys.Key, id string) (RateResult, error) {
			return e.RateSlidingCounterV2(ctx, st, dd, SlidingCounterRequest{Limit: limit, Cost: 1, Window: 30 * 24 * time.Hour, RateOptions: opts(id)})
		},
		// 100 per 30 days: the burst is the limit, nothing is emitted back
		// during the test.
		"sliding-log-v2": func(st, dd keys.Key, id string) (RateResult, error) {
			return e.RateSlidingLogV2(ctx, st, dd, SlidingLogRequest{Limit: limit, Window: 30 * 24 * time.Hour, RateOptions: opts(id)})
		},
		"sliding-log-v3": func(st, dd keys.Key, id string) (RateResult, error) {
			return e.RateSlidingLogV3(ctx, st, dd, SlidingLogRequest{Limit: limit, Window: 30 * 24 * time.Hour, RateOptions: opts(id)})
		},
		"gcra-v2": func(st, dd keys.Key, id string) (RateResult, error) {
			return e.RateGCRAV2(ctx, st, dd, GCRARequest{Limit: limit, Period: 30 * 24 * time.Hour, Cost: 1, RateOptions: opts(id)})
		},
		"token-bucket-v2-nodedup": func(st, _ keys.Key, _ string) (RateResult, error) {
			return e.RateTokenBucketV2(ctx, st, keys.Key{}, TokenBucketRequest{
				CapacityScaled: limit * RateScale, RefillScaled: 2 * RateScale, RefillPeriod: 45_000 * time.Second,
				CostScaled: RateScale, RateOptions: RateOptions{PolicyRevision: "r1", MaxClockStep: time.Second, CleanupGrace: time.Second},
			})
		},
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			kind := "bucket"
			if strings.HasPrefix(name, "fixed-window") || strings.HasPrefix(name, "sliding-counter") {
				kind = "window"
			}
			st, dd := rateKeys(t, b, "concurrency-"+name, kind)
			var allowed, denied atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWorker {
						res, err := call(st, dd, fmt.Sprintf("w%d-%d", w, i))
						if err != nil {
							errs <- err
							return
						}
						switch res.Status {
						case RateAllowed:
							allowed.Add(1)
						case RateDenied:
							denied.Add(1)
						default:
							errs <- fmt.Errorf("unexpected status %s", res.Status)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			assert.Equal(t, int64(limit), allowed.Load(), "exactly the limit is admitted")
			assert.Equal(t, int64(workers*perWorker-limit), denied.Load())
		})
	}
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }
