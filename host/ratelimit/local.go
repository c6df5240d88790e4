package ratelimit

import (
	"math"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/caphost/caphost/policy"
)

// localLimiter is the bounded process-local emergency limiter. It exists
// only when degraded-provider is local-emergency. It makes no claim of
// global exactness: each pod enforces perPodLimit = floor(limit ×
// perPodShare), which stays within the global limit only while at most
// assumed-maximum-pods pods share traffic evenly.
//
// It uses simplelru under one mutex rather than golang-lru's expirable
// LRU: that one starts a cleanup goroutine that can never be stopped
// (v2.0.7), and expiry here is checked lazily on use anyway. Entries for
// one (policy revision, subject digest) live at most EntryTTL after their
// last use, and at most MaxEntries exist; so once Redis is back the
// table drains by itself.
type localLimiter struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[string, *localEntry]
	ttl   time.Duration
	sem   chan struct{}
	now   func() time.Time
	scale func(limit int64, share float64) int64
}

// localEntry is one subject's local state.
type localEntry struct {
	lastUse time.Time
	// Window algorithms: the window id and the cost used in it.
	window int64
	used   int64
	// Token bucket: micro-tokens and the time they were computed.
	tokens int64
	refill time.Time
}

func newLocalLimiter(c LocalEmergencyConfig, now func() time.Time) (*localLimiter, error) {
	l, err := simplelru.NewLRU[string, *localEntry](c.MaxEntries, nil)
	if err != nil {
		return nil, err
	}
	return &localLimiter{lru: l, ttl: c.EntryTTL, sem: make(chan struct{}, c.MaxInFlight), now: now, scale: perPodLimit}, nil
}

// perPodLimit is floor(limit × share). The tiny epsilon keeps products such
// as 100 × 0.29 (28.999999999999996 in binary floating point) at the value
// an operator computes by hand.
func perPodLimit(limit int64, share float64) int64 {
	v := math.Floor(float64(limit)*share + 1e-9)
	if v < 0 {
		return 0
	}
	return int64(v)
}

// decide answers for pol and the subject identified by key (the state key's
// wire form: policy revision plus HMAC digest, never logged). ok is false
// when the limiter must fail closed: the per-pod limit is 0 or the
// in-flight bound is full.
func (l *localLimiter) decide(pol policy.RatePolicy, key string, cost int64) (Decision, bool) {
	select {
	case l.sem <- struct{}{}:
		defer func() { <-l.sem }()
	default:
		return Decision{}, false
	}
	now := l.now()
	d := Decision{Policy: pol.ID, Revision: pol.Revision, Source: SourceLocalEmergency, Certainty: ApproximateAlgorithm}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.lru.Get(key)
	if ok && now.Sub(e.lastUse) > l.ttl {
		ok = false
	}
	fresh := !ok
	if fresh {
		e = &localEntry{}
	}
	if pol.Algorithm == policy.RateTokenBucket {
		capacity := l.scale(pol.Parameters.Capacity, pol.PerPodShare)
		refill := l.scale(pol.Parameters.RefillTokens, pol.PerPodShare)
		if capacity == 0 || refill == 0 {
			return Decision{}, false
		}
		capS, refillS, costS := capacity*policy.RateScale, refill*policy.RateScale, cost*policy.RateScale
		periodMs := pol.Parameters.RefillPeriod.Milliseconds()
		horizonMs := ceilDiv(capS*periodMs, refillS) // validated < 2^52 by the compiler
		if fresh {
			e.tokens, e.refill = capS, now
		} else {
			elapsed := min(max(now.Sub(e.refill).Milliseconds(), 0), horizonMs)
			e.tokens = min(capS, e.tokens+elapsed*refillS/periodMs)
			e.refill = now
		}
		d.Limit = capacity
		if costS <= e.tokens {
			e.tokens -= costS
			d.Allowed = true
		} else {
			d.RetryAfter = time.Duration(ceilDiv((costS-e.tokens)*periodMs, refillS)) * time.Millisecond
		}
		d.Remaining = e.tokens / policy.RateScale
		d.ResetAt = now.Add(time.Duration(ceilDiv((capS-e.tokens)*periodMs, refillS)) * time.Millisecond)
	} else {
		limit := l.scale(pol.Parameters.Limit, pol.PerPodShare)
		if limit == 0 {
			return Decision{}, false
		}
		windowMs := pol.Parameters.Window.Milliseconds()
		wid := now.UnixMilli() / windowMs
		if fresh || e.window != wid {
			e.window, e.used = wid, 0
		}
		end := time.UnixMilli((wid + 1) * windowMs)
		d.Limit, d.ResetAt = limit, end
		if e.used+cost <= limit {
			e.used += cost
			d.Allowed = true
		} else {
			d.RetryAfter = max(end.Sub(now), time.Millisecond)
		}
		d.Remaining = max(0, limit-e.used)
	}
	e.lastUse = now
	if fresh {
		l.lru.Add(key, e)
	}
	return d, true
}

// len is the number of live entries (for tests and bounds checks).
func (l *localLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
