package cache

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"time"

	"github.com/caphost/caphost/host/cache/flight"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Loader loads a key's value from the source of truth. It classifies what
// it found with one of the LoadOutcome constructors; an error it returns
// instead is unclassified: it is handed to the caller as it is, nothing is
// cached and no stale value replaces it. ctx carries the region's per-load
// deadline and is cancelled when every caller waiting for the load has
// gone; a loader must stop then. Loads must be read-only or idempotent:
// under failover, a partition or a lease that expired mid-load, two hosts
// may load the same key.
type Loader func(ctx context.Context) (LoadOutcome, error)

// LoadOutcome is a source load's classified result.
type LoadOutcome struct {
	kind  loadKind
	value []byte
	rev   Revision
	code  string
	cause error
}

type loadKind uint8

const (
	loadedKind loadKind = iota + 1
	absentKind
	transientKind
	permanentKind
	cancelledKind
)

// Loaded is a value read from the source, with its source revision (the
// zero Revision when the source has none).
func Loaded(value []byte, rev Revision) LoadOutcome {
	return LoadOutcome{kind: loadedKind, value: value, rev: rev}
}

// AuthoritativeAbsent is a definite "does not exist": the only source
// result the cache stores negatively. code is a bounded reason code.
func AuthoritativeAbsent(code string, rev Revision) LoadOutcome {
	return LoadOutcome{kind: absentKind, code: code, rev: rev}
}

// TransientFailure is a failure that may pass (a timeout, a 503): never
// cached; a stale value may be served instead where the region allows it.
// code is a bounded category; cause never reaches Redis, logs or metrics.
func TransientFailure(code string, cause error) LoadOutcome {
	return LoadOutcome{kind: transientKind, code: code, cause: cause}
}

// PermanentFailure is a failure that will not pass by retrying (a bad
// request to the source): never cached and never answered with stale data.
func PermanentFailure(code string, cause error) LoadOutcome {
	return LoadOutcome{kind: permanentKind, code: code, cause: cause}
}

// Cancelled reports that the load stopped because its context ended.
func Cancelled() LoadOutcome { return LoadOutcome{kind: cancelledKind} }

// ResultKind is the closed set of GetOrLoad results.
type ResultKind uint8

// GetOrLoad results.
const (
	// FreshHit: served from the cache, fresh.
	FreshHit ResultKind = iota + 1
	// StaleHit: served stale from the cache while another caller or host
	// refreshes it (stale-while-revalidate).
	StaleHit
	// LoadedFromSource: loaded, and (Record says whether) stored.
	LoadedFromSource
	// AuthoritativeAbsence: the source says the key does not exist, now or
	// when the negative entry was cached (FromCache).
	AuthoritativeAbsence
	// StaleFallback: the source failed transiently (or the source bulkhead
	// or the single-flight's keys were full) and a stale value before its
	// hard expiry was served (stale-if-error).
	StaleFallback
	// DegradedSource: Redis was unavailable; the value was loaded from the
	// source within the bulkhead and not stored.
	DegradedSource
)

var resultNames = [...]string{FreshHit: "FRESH_HIT", StaleHit: "STALE_HIT", LoadedFromSource: "LOADED_FROM_SOURCE",
	AuthoritativeAbsence: "AUTHORITATIVE_ABSENCE", StaleFallback: "STALE_FALLBACK", DegradedSource: "DEGRADED_SOURCE"}

func (k ResultKind) String() string { return enumName(resultNames[:], int(k)) }

// Result is what GetOrLoad answered.
type Result struct {
	Kind ResultKind
	// Value is the caller's own copy (nil for an absence).
	Value    []byte
	Revision Revision
	// FromCache reports an answer taken from the cache (L1 or Redis).
	FromCache bool
	// FromL1 reports an answer taken from the in-process L1.
	FromL1 bool
	// StaleAge is how far past its soft expiry a stale value was.
	StaleAge time.Duration
	// Record is what happened to the write after a load (0: none made).
	Record RecordOutcome
	// Shared reports that the caller joined a load another caller started.
	Shared bool
	// Lookup is the lookup that started it.
	Lookup LookupKind
	// MissReason is the lookup's miss reason, when it missed.
	MissReason MissReason
}

// SourceError is a classified source failure GetOrLoad passes on (no stale
// value could stand in for it).
type SourceError struct {
	// Kind is "transient", "permanent" or "cancelled".
	Kind string
	// Code is the loader's bounded category.
	Code string
	// Cause is the loader's original error; it never reaches Redis, logs or
	// metrics.
	Cause error
}

func (e *SourceError) Error() string {
	if e.Code == "" {
		return "cache: source load " + e.Kind
	}
	return "cache: source load " + e.Kind + ": " + e.Code
}

func (e *SourceError) Unwrap() error { return e.Cause }

// ErrOverloaded is matched by an *OverloadError.
var ErrOverloaded = errors.New("cache: overloaded")

// OverloadError: a bound refused the load (single-flight keys or waiters,
// the source bulkhead) and no stale value could stand in. A load that
// waits in the bulkhead's queue until its load timeout is not one: it
// ends as that timeout, like a load that ran too long.
type OverloadError struct {
	// Reason is "flight-keys", "flight-waiters" or "source-full".
	Reason string
}

func (e *OverloadError) Error() string        { return "cache: overloaded: " + e.Reason }
func (e *OverloadError) Is(target error) bool { return target == ErrOverloaded }

// SchemaError: GetOrLoad found an entry it cannot read and the region's
// policy is fail-fast, so it neither loads nor overwrites it.
type SchemaError struct {
	Category SchemaCategory
}

func (e *SchemaError) Error() string { return "cache: incompatible schema: " + e.Category.String() }

// ErrIncompatibleSchema is matched by a *SchemaError.
var ErrIncompatibleSchema = errors.New("cache: incompatible schema")

// Is matches ErrIncompatibleSchema.
func (e *SchemaError) Is(target error) bool { return target == ErrIncompatibleSchema }

// GetOrLoad is cache-aside: a fresh hit or a cached absence is answered
// from the cache; a miss or a stale hit loads through the bounded local
// single-flight (one load per key per process) and, for a region with the
// distributed stampede strategy, the refresh soft lease (one load per key
// across hosts while the lease holds; the others serve stale or wait,
// bounded), behind the region's source bulkhead. For a stale hit only the
// caller that starts the refresh waits for it; the others, on this host
// and on hosts that lose the lease, get StaleHit at once. The load's
// result is written to the generation and entry the lookup observed, so
// an invalidation during the load wins. Negative caching only for
// AuthoritativeAbsent; stale-if-error (a TransientFailure, a load past
// its timeout, a full source bulkhead or a single-flight with every key
// loading) only where the region allows it
// and only before the hard expiry. When Redis is unavailable the value is
// loaded within the bulkhead and reported DegradedSource.
//
// Errors: caller mistakes, codec and corrupt-entry errors (fail closed;
// never a silent source load), *SchemaError (fail-fast), *OverloadError,
// *SourceError, the loader's own unclassified error, and ctx's.
func (r *Region) GetOrLoad(ctx context.Context, key Key, load Loader) (Result, error) {
	rg, err := r.current()
	if err != nil {
		return Result{}, err
	}
	res, err := r.c.getOrLoad(ctx, rg, key, load)
	rg.m.result(res, err)
	return res, err
}

func (c *Cache) getOrLoad(ctx context.Context, r *region, key Key, load Loader) (Result, error) {
	loc, err := c.locate(ctx, r, key)
	if err != nil {
		return Result{}, err
	}
	var hit Lookup
	if c.fromL1(r, loc, &hit, nil, false) {
		return cached(hit), nil
	}
	lk, err := c.lookupL2(ctx, r, loc)
	r.m.lookupOutcome(&lk.Lookup, err)
	if err != nil {
		return Result{}, err
	}
	switch lk.Kind {
	case Hit:
		if lk.Freshness == Fresh {
			return cached(lk.Lookup), nil
		}
	case NegativeHit:
		return cached(lk.Lookup), nil
	case IncompatibleSchema:
		if !lk.reloadable() {
			return Result{}, &SchemaError{Category: lk.Schema}
		}
		// quarantine-and-reload: the refill replaces the unreadable entry,
		// only while it is still the one observed.
	case Unavailable:
		return c.degraded(ctx, r, loc, load)
	}
	flightKey := lk.obs.ref.entry.Redis()
	refill := func(fctx context.Context) (loadResult, error) {
		return c.refill(fctx, r, loc, lk, load)
	}
	var (
		res    loadResult
		shared bool
	)
	if lk.Kind == Hit && lk.Freshness == Stale {
		// Stale-while-revalidate within this host too: one caller refreshes
		// and waits; the others answer with the stale value at once.
		res, err = r.flight.Lead(ctx, flightKey, refill)
		if errors.Is(err, flight.ErrRunning) {
			return c.staleResult(lk.Lookup, StaleHit), nil
		}
	} else {
		res, shared, err = r.flight.Do(ctx, flightKey, refill)
	}
	if err != nil {
		return c.flightErr(r, lk.Lookup, err)
	}
	if res.err != nil {
		return Result{}, res.err
	}
	out := res.result
	out.Shared = shared
	if shared && out.Value != nil {
		out.Value = slices.Clone(out.Value)
	}
	return out, nil
}

// cached is the Result of a cache answer.
func cached(lk Lookup) Result {
	r := Result{Kind: FreshHit, Value: lk.Value, Revision: lk.SourceRevision, FromCache: true, FromL1: lk.FromL1, Lookup: lk.Kind}
	if lk.Kind == NegativeHit {
		r.Kind = AuthoritativeAbsence
	}
	return r
}

// loadResult is what one load produced for every caller that shared it.
// err is a result that is an error (a classified failure or the loader's
// unclassified error), not a failure of the flight itself.
type loadResult struct {
	result Result
	err    error
}

// flightErr maps a failure of the single-flight itself: a load that ran
// past the region's load timeout is a transient source failure, a refusal
// an overload; a stale value stands in for either where the region allows
// (as for a full source bulkhead). Only the keys bound can refuse a stale
// hit's refresh: Lead never joins, so never meets the waiters bound.
func (c *Cache) flightErr(r *region, lk Lookup, err error) (Result, error) {
	var pe *flight.PanicError
	switch {
	case errors.As(err, &pe):
		return Result{}, err // the loader panicked: unclassified, passed on
	case errors.Is(err, flight.ErrLoadTimeout):
		if lk.Kind == Hit && r.pol.StaleIfError && c.beforeHard(lk) {
			r.m.stale("error", c.staleAge(lk))
			return c.staleResult(lk, StaleFallback), nil
		}
		return Result{}, &SourceError{Kind: "transient", Code: "load-timeout", Cause: err}
	case errors.Is(err, flight.ErrTooManyKeys):
		if lk.Kind == Hit && r.pol.StaleIfError && c.beforeHard(lk) {
			r.m.stale("overload", c.staleAge(lk))
			return c.staleResult(lk, StaleFallback), nil
		}
		return Result{}, &OverloadError{Reason: "flight-keys"}
	case errors.Is(err, flight.ErrTooManyWaiters):
		return Result{}, &OverloadError{Reason: "flight-waiters"}
	}
	return Result{}, err
}

// refill runs once per key per process: the refresh lease (distributed
// regions), the double check, the bulkhead, the load and the write.
func (c *Cache) refill(ctx context.Context, r *region, loc keys.Location, lk observed, load Loader) (loadResult, error) {
	stale := lk.Kind == Hit && lk.Freshness == Stale
	leased := false // this host holds the refresh lease: others may wait for its write
	if r.pol.Stampede == policy.CacheStampedeDistributed {
		var w *refreshWatch // a stale value is served rather than waited on
		if !stale {
			w = c.watchRefresh(r, loc)
			defer w.end()
		}
		owner := c.leaseOwner()
		claim, err := c.exec.CacheRefreshClaim(ctx, lk.obs.ref.lease, owner, r.pol.Ops.LeaseTTL, owner[16:])
		switch {
		case err == nil && (claim.Status == programs.RefreshClaimAcquired || claim.Status == programs.RefreshClaimAlreadyOwned):
			w.end() // this host writes: nothing to wait for
			r.m.lease("acquired")
			leased = true
			defer c.releaseLease(r, lk.obs.ref.lease, owner)
			// Double check: someone may have refreshed it meanwhile.
			again, err := c.lookupL2(ctx, r, loc)
			if err != nil {
				return loadResult{err: err}, nil
			}
			switch {
			case again.Kind == Hit && again.Freshness == Fresh, again.Kind == NegativeHit:
				return loadResult{result: cached(again.Lookup)}, nil
			case again.Kind == Unavailable:
			default:
				lk = again
				stale = lk.Kind == Hit && lk.Freshness == Stale
			}
		case err == nil && claim.Status == programs.RefreshClaimContended:
			r.m.lease("contended")
			if stale {
				return loadResult{result: c.staleResult(lk.Lookup, StaleHit)}, nil
			}
			if got, ok := c.awaitRefresh(ctx, r, loc, r.pol.Ops.LeaseWait, w); ok {
				return loadResult{result: cached(got)}, nil
			}
			// The holder did not fill it in time: load here (a bounded
			// duplicate beats failing the caller).
		case err != nil:
			r.m.lease("unavailable")
			if stale {
				return loadResult{result: c.staleResult(lk.Lookup, StaleHit)}, nil
			}
		default:
			r.m.lease("refused")
		}
	}
	return c.loadAndRecord(ctx, r, loc, lk, stale, leased, load)
}

// awaitRefresh waits, for at most wait, for the value another caller is
// loading under the refresh lease: it reads the entry when the holder's
// write is announced (see waiters) and every LeasePoll in any case. w was
// registered before the claim that found the lease taken and stays
// registered across each read, so no announcement is lost in between.
func (c *Cache) awaitRefresh(ctx context.Context, r *region, loc keys.Location, wait time.Duration, w *refreshWatch) (Lookup, bool) {
	deadline := time.Now().Add(wait)
	t := time.NewTimer(r.pol.Ops.LeasePoll)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return Lookup{}, false
		case <-t.C:
		case <-w.slot.ch:
			w.renew()
		}
		lk, err := c.lookupL2(ctx, r, loc)
		if err == nil && ((lk.Kind == Hit && lk.Freshness == Fresh) || lk.Kind == NegativeHit) {
			r.m.lease("waited")
			return lk.Lookup, true
		}
		t.Reset(r.pol.Ops.LeasePoll)
	}
	r.m.lease("wait-expired")
	return Lookup{}, false
}

// loadAndRecord loads behind the bulkhead and writes the result where lk
// observed the entry; leased says the write ends this host's refresh
// lease.
func (c *Cache) loadAndRecord(ctx context.Context, r *region, loc keys.Location, lk observed, stale, leased bool, load Loader) (loadResult, error) {
	release, err := r.source.Acquire(ctx)
	if err != nil {
		if stale && r.pol.StaleIfError && c.beforeHard(lk.Lookup) {
			r.m.stale("overload", c.staleAge(lk.Lookup))
			return loadResult{result: c.staleResult(lk.Lookup, StaleFallback)}, nil
		}
		return loadResult{err: overloadOf(err)}, nil
	}
	start := time.Now()
	out, lerr := load(ctx)
	latency := time.Since(start)
	release()
	r.m.sourceLoad(out.kind, lerr, latency)
	if lerr != nil {
		return loadResult{err: lerr}, nil
	}
	res := Result{Lookup: lk.Kind, MissReason: lk.MissReason}
	switch out.kind {
	case loadedKind:
		meta := RecordMeta{Revision: out.rev}
		if r.pol.Consistency == policy.CacheSourceRevisionGuarded && out.rev.ok {
			meta.Intent = OnlyIfSourceRevisionNewer
		}
		obs := lk.obs
		o, err := c.record(ctx, r, loc, writeReq{value: out.value, meta: meta, obs: &obs, leased: leased, loadLatency: latency})
		if err != nil {
			return loadResult{err: err}, nil
		}
		res.Kind, res.Value, res.Revision, res.Record = LoadedFromSource, out.value, out.rev, o
		r.m.record(o, nil)
		return loadResult{result: res}, nil
	case absentKind:
		obs := lk.obs
		o, err := c.record(ctx, r, loc, writeReq{negative: true, meta: RecordMeta{Revision: out.rev}, obs: &obs, leased: leased, loadLatency: latency})
		if err != nil {
			return loadResult{err: err}, nil
		}
		res.Kind, res.Revision, res.Record = AuthoritativeAbsence, out.rev, o
		r.m.record(o, nil)
		return loadResult{result: res}, nil
	case transientKind:
		if stale && r.pol.StaleIfError && c.beforeHard(lk.Lookup) {
			r.m.stale("error", c.staleAge(lk.Lookup))
			return loadResult{result: c.staleResult(lk.Lookup, StaleFallback)}, nil
		}
		return loadResult{err: &SourceError{Kind: "transient", Code: out.code, Cause: out.cause}}, nil
	case permanentKind:
		return loadResult{err: &SourceError{Kind: "permanent", Code: out.code, Cause: out.cause}}, nil
	case cancelledKind:
		return loadResult{err: &SourceError{Kind: "cancelled"}}, nil
	}
	return loadResult{err: errors.New("cache: the loader returned a zero LoadOutcome")}, nil
}

// degraded serves a lookup that found Redis unavailable: the source is
// read within the bulkhead (coalesced per key), nothing is written.
func (c *Cache) degraded(ctx context.Context, r *region, loc keys.Location, load Loader) (Result, error) {
	d := loc.Digest()
	res, shared, err := r.flight.Do(ctx, "degraded:"+string(d[:]), func(fctx context.Context) (loadResult, error) {
		release, err := r.source.Acquire(fctx)
		if err != nil {
			return loadResult{err: overloadOf(err)}, nil
		}
		start := time.Now()
		out, lerr := load(fctx)
		release()
		r.m.sourceLoad(out.kind, lerr, time.Since(start))
		switch {
		case lerr != nil:
			return loadResult{err: lerr}, nil
		case out.kind == loadedKind:
			return loadResult{result: Result{Kind: DegradedSource, Value: out.value, Revision: out.rev, Lookup: Unavailable}}, nil
		case out.kind == absentKind:
			return loadResult{result: Result{Kind: AuthoritativeAbsence, Revision: out.rev, Lookup: Unavailable}}, nil
		case out.kind == transientKind:
			return loadResult{err: &SourceError{Kind: "transient", Code: out.code, Cause: out.cause}}, nil
		case out.kind == permanentKind:
			return loadResult{err: &SourceError{Kind: "permanent", Code: out.code, Cause: out.cause}}, nil
		case out.kind == cancelledKind:
			return loadResult{err: &SourceError{Kind: "cancelled"}}, nil
		}
		return loadResult{err: errors.New("cache: the loader returned a zero LoadOutcome")}, nil
	})
	if err != nil {
		return c.flightErr(r, Lookup{}, err)
	}
	if res.err != nil {
		return Result{}, res.err
	}
	out := res.result
	out.Shared = shared
	if shared && out.Value != nil {
		out.Value = slices.Clone(out.Value)
	}
	return out, nil
}

func overloadOf(err error) error {
	if errors.Is(err, flight.ErrBulkheadFull) {
		return &OverloadError{Reason: "source-full"}
	}
	if errors.Is(err, flight.ErrBulkheadTimeout) {
		// The queue's deadline is the load's: the same answer as a load
		// that ran too long, whichever of the two notices first.
		return &SourceError{Kind: "transient", Code: "load-timeout", Cause: err}
	}
	return err
}

func (c *Cache) staleResult(lk Lookup, kind ResultKind) Result {
	return Result{Kind: kind, Value: lk.Value, Revision: lk.SourceRevision, FromCache: true, StaleAge: c.staleAge(lk), Lookup: lk.Kind}
}

func (c *Cache) beforeHard(lk Lookup) bool { return c.clock().Before(lk.HardExpiresAt) }

func (c *Cache) staleAge(lk Lookup) time.Duration {
	if lk.SoftExpiresAt.IsZero() {
		return 0
	}
	return max(c.clock().Sub(lk.SoftExpiresAt), 0)
}

// leaseOwner returns a fresh refresh-lease owner: the instance id and 16
// random bytes (the latter doubles as the claim's operation id).
func (c *Cache) leaseOwner() []byte {
	owner := make([]byte, 32)
	copy(owner, c.instance[:])
	_, _ = rand.Read(owner[16:])
	return owner
}

// releaseLease releases a refresh lease, owner-safe, with a short detached
// deadline so a cancelled load still frees it (the TTL bounds it anyway).
func (c *Cache) releaseLease(r *region, lease keys.Key, owner []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.exec.CacheRefreshRelease(ctx, lease, owner); err != nil {
		r.m.lease("release-failed")
	}
}
