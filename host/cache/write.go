package cache

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/cache/envelope"
	"github.com/caphost/caphost/host/cache/expiry"
	"github.com/caphost/caphost/host/cache/l1"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Record stores value for key in the region's current generation, with the
// region's TTLs, jitter, codec, size bound and compression (there is no
// per-call override).
//
// Record is a blind write, for write-through after the caller changed the
// source: it replaces whatever the entry holds, a tombstone included, and
// follows a generation that moved meanwhile, so value must be what the
// source holds now. It is not for a cache-aside refill after a miss: a
// load that began before an invalidation would store its older result
// after it. Refill with GetOrLoad, or with LookupOrClaim and
// RecordClaimed: their write applies only in the generation and on the
// entry state the lookup observed, so a region invalidation or a per-key
// invalidation in between (on any host) refuses it with
// NotRecordedCondition.
//
// With OnlyIfSourceRevisionNewer it stores only when no stored entry
// carries a revision at least as new. Outcomes say what happened; errors
// are caller mistakes, ErrValueRefused (the codec refused the value), codec
// failures (*CodecError) and ErrCorrupt.
func (r *Region) Record(ctx context.Context, key Key, value []byte, meta RecordMeta) (RecordOutcome, error) {
	return r.write(ctx, key, writeReq{value: value, meta: meta})
}

// RecordAbsent caches an authoritative absence for the region's negative
// TTL. Record it only for a definite "does not exist" from the source,
// never for a timeout or an error. A region with no negative TTL answers
// NotRecordedProviderPolicy. Like Record it is a blind write to the
// current generation, for after the caller deleted the item at the
// source; a refill that found the item absent is a loader's
// AuthoritativeAbsent in GetOrLoad, or RecordClaimed with absent.
func (r *Region) RecordAbsent(ctx context.Context, key Key, meta RecordMeta) (RecordOutcome, error) {
	return r.write(ctx, key, writeReq{negative: true, meta: meta})
}

func (r *Region) write(ctx context.Context, key Key, w writeReq) (RecordOutcome, error) {
	rg, err := r.current()
	if err != nil {
		return 0, err
	}
	loc, err := r.c.locate(ctx, rg, key)
	if err != nil {
		rg.m.record(0, err)
		return 0, err
	}
	o, err := r.c.record(ctx, rg, loc, w)
	rg.m.record(o, err)
	return o, err
}

// writeReq is one entry write.
type writeReq struct {
	value    []byte
	negative bool
	meta     RecordMeta
	// obs, when set, makes the write conditional on the entry still being
	// what a lookup observed, in the generation it observed (the refill
	// after a load); nil writes to the current generation, following a
	// moved generation once (a plain Record).
	obs *observation
	// leased says the write ends a refresh lease: callers waiting for it,
	// here and on other hosts, are told once it is stored.
	leased bool
	// loadLatency is the source load's duration, for admission.
	loadLatency time.Duration
	// keep are the envelope times of a rewrite (nil: planned anew).
	keep *envelope.Envelope
}

// record encodes, admits and writes one entry.
func (c *Cache) record(ctx context.Context, r *region, loc keys.Location, w writeReq) (RecordOutcome, error) {
	if w.meta.Intent == OnlyIfSourceRevisionNewer && !w.meta.Revision.ok {
		return 0, ErrNoRevision
	}
	soft, hard := r.pol.SoftTTL, r.pol.HardTTL
	version, payload := r.pol.CodecWrite, []byte(nil)
	if w.negative {
		if r.pol.NegativeTTL == 0 {
			r.m.notRecorded("negative-off")
			return NotRecordedProviderPolicy, nil
		}
		soft, hard = 0, r.pol.NegativeTTL
	} else {
		var err error
		if version, payload, err = r.codec.encode(ctx, w.value); err != nil {
			return 0, err
		}
		if len(payload) > r.pol.MaxBytes {
			r.m.notRecorded("too-large")
			return NotRecordedProviderPolicy, nil
		}
	}
	if r.pol.Admit && w.keep == nil {
		class := "value"
		if w.negative {
			class = "absent"
		}
		ok, err := r.guest.admit(ctx, &abi.AdmitRequest{SizeBytes: uint64(len(payload)), Class: class,
			LoadLatency: uint64(w.loadLatency / time.Microsecond)})
		if err != nil {
			// A failing predicate never admits; the caller's result stands.
			r.m.guestFailure("admit")
			c.log.Warn("cache admission guest failed; value not stored", "region", r.pol.ID, "error", err)
			r.m.notRecorded("admission-failed")
			return NotRecordedProviderPolicy, nil
		}
		if !ok {
			r.m.notRecorded("not-admitted")
			return NotRecordedProviderPolicy, nil
		}
	}

	var ref entryRef
	if w.obs != nil {
		ref = w.obs.ref
	} else {
		var err error
		if ref, err = c.currentRef(ctx, r, loc); err != nil {
			return outcomeOf(ctx, err)
		}
	}
	cond := programs.CacheConditionAny
	if w.meta.Intent == OnlyIfSourceRevisionNewer {
		cond = programs.CacheConditionNewerSourceRevision
	}
	var ticket l1.Ticket
	if r.l1 != nil {
		ticket = r.l1.Ticket()
	}
	for attempt := 0; ; attempt++ {
		env, err := c.envelopeFor(r, ref, w, version, payload, soft, hard)
		if errors.Is(err, envelope.ErrTooLarge) {
			r.m.notRecorded("too-large")
			return NotRecordedProviderPolicy, nil
		}
		if err != nil {
			return 0, err
		}
		ttl, ok := expiry.PhysicalTTL(env.HardExpiresAt, c.clock())
		if !ok {
			r.m.notRecorded("expired")
			return NotRecordedProviderPolicy, nil
		}
		b, err := envelope.Encode(env, r.lim)
		if errors.Is(err, envelope.ErrTooLarge) {
			r.m.notRecorded("too-large")
			return NotRecordedProviderPolicy, nil
		}
		if err != nil {
			return 0, err
		}
		obs := programs.NoObservation()
		if w.obs != nil {
			obs = w.obs.condition()
		}
		res, err := c.exec.CachePut(ctx, r.layout.Anchor(loc.Shard()), ref.entry, programs.CachePutRequest{
			Captured: ref.gen, Value: b, TTL: ttl, Condition: cond, Observation: obs})
		if err != nil {
			return outcomeOf(ctx, err)
		}
		switch res.Status {
		case programs.CachePutStored:
			r.m.payloadBytes("write", len(payload))
			if r.l1 != nil {
				if env.SoftExpiresAt.IsZero() || c.clock().Before(env.SoftExpiresAt) {
					r.setL1(ticket, ref, l1Entry{value: cloneOrNil(w.value), negative: w.negative,
						rev: revisionOf(env), written: env.WrittenAt, soft: env.SoftExpiresAt, hard: env.HardExpiresAt})
				}
				// Only a plain write may replace an entry other hosts hold
				// fresh in L1. A conditional write replaced what its lookup
				// observed — absent, a tombstone, a stale or unreadable entry
				// (or, for a rewrite, the same value) — which no L1 serves;
				// a hint would only drop other hosts' unrelated fills. (A
				// leased one sends it below anyway, to wake its waiters.)
				if w.obs == nil {
					c.publishKey(r, ref)
				}
			}
			if w.leased {
				c.announceRefresh(r, loc, ref)
			}
			return Recorded, nil
		case programs.CachePutGenerationMoved:
			r.gens.observe(loc.Shard(), ref.gen, res.Generation)
			if w.obs == nil && attempt == 0 && len(res.Generation) > 0 {
				if ref, err = r.members(loc, res.Generation); err != nil {
					return 0, err
				}
				continue
			}
			return NotRecordedCondition, nil
		case programs.CachePutGenerationMissing:
			if w.obs == nil && attempt == 0 {
				gen, err := c.initGeneration(ctx, r, loc.Shard(), ref.gen)
				if err != nil {
					return outcomeOf(ctx, err)
				}
				if ref, err = r.members(loc, gen); err != nil {
					return 0, err
				}
				continue
			}
			return NotRecordedCondition, nil
		case programs.CachePutNotNewer, programs.CachePutObservationChanged:
			return NotRecordedCondition, nil
		case programs.CachePutStoredUnreadable, programs.CachePutWrongType:
			return 0, corrupt("the stored entry is unreadable by cache-put-v2 (" + res.Status.String() + ")")
		default:
			return 0, errors.New("cache: cache-put-v2 refused the write as " + res.Status.String())
		}
	}
}

// envelopeFor builds the envelope of a write to ref: new expiries, jittered
// on the entry key, or a rewrite's original ones.
func (c *Cache) envelopeFor(r *region, ref entryRef, w writeReq, version uint32, payload []byte, soft, hard time.Duration) (envelope.Envelope, error) {
	env := envelope.Envelope{CodecID: r.pol.Codec, PayloadVersion: version, Negative: w.negative,
		Compressed: envelope.ShouldCompress(len(payload), r.pol.Ops.CompressAbove), Payload: payload}
	if v, ok := w.meta.Revision.Value(); ok {
		env.HasSourceRevision, env.SourceRevision = true, v
	}
	if w.keep != nil {
		env.WrittenAt, env.SoftExpiresAt, env.HardExpiresAt = w.keep.WrittenAt, w.keep.SoftExpiresAt, w.keep.HardExpiresAt
		return env, nil
	}
	plan, err := r.exp.Plan(ref.entry, c.clock(), soft, hard)
	if err != nil {
		return env, err
	}
	env.WrittenAt, env.SoftExpiresAt, env.HardExpiresAt = plan.WrittenAt, plan.SoftExpiresAt, plan.HardExpiresAt
	return env, nil
}

// currentRef returns loc's keys in the shard's generation as this host last
// saw it (creating the generation if there is none yet); the write checks
// it atomically.
func (c *Cache) currentRef(ctx context.Context, r *region, loc keys.Location) (entryRef, error) {
	gen := r.gens.get(loc.Shard())
	if gen == nil {
		var err error
		if gen, err = c.initGeneration(ctx, r, loc.Shard(), nil); err != nil {
			return entryRef{}, err
		}
	}
	return r.members(loc, gen)
}

// outcomeOf maps a failed write to its outcome: a write that may have been
// applied is Indeterminate, one that provably was not is
// DegradedUnavailable; a rejection is an error (a programming or
// configuration problem, never quietly "not recorded").
func outcomeOf(ctx context.Context, err error) (RecordOutcome, error) {
	switch o := certainty.Classify(err, true); {
	case o == certainty.Indeterminate:
		return Indeterminate, nil
	case ctx.Err() != nil && !o.Sent():
		return 0, ctx.Err()
	case o == certainty.UnavailableBeforeSend, o == certainty.OverloadedBeforeSend, o == certainty.NotApplied:
		return DegradedUnavailable, nil
	}
	return 0, err
}

func cloneOrNil(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// Invalidate removes key's entry: it writes a short-lived tombstone in the
// entry's place (so a load that began before cannot store its older value
// afterwards), drops the local L1 copy and sends an invalidation hint to the
// other hosts' L1. It is idempotent, so a timeout is repeated once.
func (r *Region) Invalidate(ctx context.Context, key Key) (InvalidationOutcome, error) {
	rg, err := r.current()
	if err != nil {
		return 0, err
	}
	loc, err := r.c.locate(ctx, rg, key)
	if err != nil {
		rg.m.invalidation("key", 0, err)
		return 0, err
	}
	o, err := r.c.invalidate(ctx, rg, loc)
	rg.m.invalidation("key", o, err)
	return o, err
}

func (c *Cache) invalidate(ctx context.Context, r *region, loc keys.Location) (InvalidationOutcome, error) {
	ref, err := c.currentRef(ctx, r, loc)
	if err != nil {
		return invalidationOutcomeOf(ctx, err)
	}
	tomb := newTombstone()
	repeated := false
	for attempt := 0; attempt < 3; attempt++ {
		res, err := c.exec.CachePut(ctx, r.layout.Anchor(loc.Shard()), ref.entry, programs.CachePutRequest{
			Captured: ref.gen, Value: tomb, TTL: r.pol.TombstoneTTL(), Condition: programs.CacheConditionAny,
			Observation: programs.NoObservation()})
		if err != nil {
			if certainty.Classify(err, true) == certainty.Indeterminate && !repeated && ctx.Err() == nil {
				// Writing the same tombstone again is harmless: the goal is
				// its presence.
				repeated = true
				continue
			}
			if repeated {
				// The first attempt may have applied: whatever the repeat
				// met, the outcome stays unknown.
				return InvalidationIndeterminate, nil
			}
			return invalidationOutcomeOf(ctx, err)
		}
		switch res.Status {
		case programs.CachePutStored:
			if r.l1 != nil {
				r.deleteL1(ref)
				c.publishKey(r, ref)
			}
			if res.Previous == programs.CachePreviousEnvelope && !repeated {
				return InvalidationDone, nil
			}
			return AlreadyAbsent, nil
		case programs.CachePutGenerationMoved:
			r.gens.observe(loc.Shard(), ref.gen, res.Generation)
			if ref, err = r.members(loc, res.Generation); err != nil {
				return 0, err
			}
		case programs.CachePutGenerationMissing:
			// Every entry of the shard is an orphan already; a fresh
			// generation starts empty.
			if _, err := c.initGeneration(ctx, r, loc.Shard(), ref.gen); err != nil {
				return invalidationOutcomeOf(ctx, err)
			}
			if r.l1 != nil {
				r.deleteL1(ref)
				c.publishKey(r, ref)
			}
			return AlreadyAbsent, nil
		case programs.CachePutWrongType:
			return 0, corrupt("the entry key holds another Redis type")
		default:
			return 0, errors.New("cache: cache-put-v2 refused the tombstone as " + res.Status.String())
		}
	}
	return InvalidationIndeterminate, nil
}

func invalidationOutcomeOf(ctx context.Context, err error) (InvalidationOutcome, error) {
	o, err := outcomeOf(ctx, err)
	switch {
	case err != nil:
		return 0, err
	case o == Indeterminate:
		return InvalidationIndeterminate, nil
	}
	return InvalidationUnavailable, nil
}

// regionBumpParallel bounds the shard bumps of one region invalidation in
// flight at once.
const regionBumpParallel = 8

// InvalidateRegion makes every entry of the region unreachable at once, on
// every host: each shard's generation is replaced by a fresh random one
// (old entries become orphans that expire by TTL; nothing is scanned or
// deleted on the request path). A bump whose reply is lost is repeated once
// with the same generation, which the program recognises as applied. The
// local L1 is flushed and the local generation trust ended; a hint does
// both on the other hosts.
// InvalidationUnavailable or InvalidationIndeterminate means some shards
// may not have moved; repeating the call is safe.
func (r *Region) InvalidateRegion(ctx context.Context) (InvalidationOutcome, error) {
	rg, err := r.current()
	if err != nil {
		return 0, err
	}
	o, err := r.c.invalidateRegion(ctx, rg)
	rg.m.invalidation("region", o, err)
	return o, err
}

func (c *Cache) invalidateRegion(ctx context.Context, r *region) (InvalidationOutcome, error) {
	n := r.layout.Shards()
	outcomes := make([]certainty.Outcome, n)
	errs := make([]error, n)
	sem := make(chan struct{}, regionBumpParallel)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			outcomes[i], errs[i] = c.bump(ctx, r, i)
		}()
	}
	wg.Wait()
	// A bump whose reply was lost left this host's view on the old
	// generation: no read may trust it.
	r.gens.distrust()
	if r.l1 != nil {
		r.l1.Flush()
	}
	c.publishRegion(r)
	result := InvalidationDone
	for i, o := range outcomes {
		switch {
		case o == certainty.Applied:
		case o == certainty.Indeterminate:
			result = InvalidationIndeterminate
		case o == certainty.Rejected || o == certainty.Conflict:
			return 0, errs[i]
		case result == InvalidationDone:
			result = InvalidationUnavailable
		}
	}
	if ctx.Err() != nil && result != InvalidationDone {
		return result, ctx.Err()
	}
	return result, nil
}

// bump replaces shard i's generation, repeating a lost reply once.
func (c *Cache) bump(ctx context.Context, r *region, i int) (certainty.Outcome, error) {
	gen, op := newGeneration(), make([]byte, 16)
	_, _ = rand.Read(op)
	was := r.gens.get(i)
	var err error
	sent := false // an attempt may have applied
	for attempt := 0; attempt < 2; attempt++ {
		var res programs.GenerationBumpResult
		res, err = c.exec.RegionGenerationBump(ctx, r.layout.Anchor(i), gen, op)
		if err == nil {
			switch res.Status {
			case programs.GenerationBumpBumped, programs.GenerationBumpAlreadyApplied:
				r.gens.observe(i, was, gen)
				return certainty.Applied, nil
			default:
				return certainty.Rejected, errors.New("cache: region-generation-bump-v1 answered " + res.Status.String())
			}
		}
		if certainty.Classify(err, true) != certainty.Indeterminate || ctx.Err() != nil {
			break
		}
		sent = true
	}
	if sent {
		return certainty.Indeterminate, err
	}
	return certainty.Classify(err, true), err
}

// quarantine replaces an unreadable entry by a tombstone, only if the entry
// is still exactly what was observed (owner-safe: a newer writer's entry
// is never clobbered), so the next lookup misses and reloads instead of
// failing again until the TTL. Best effort: its outcome is counted.
func (c *Cache) quarantine(ctx context.Context, r *region, obs observation, reason string) {
	r.m.quarantine(reason)
	if obs.mode != obsValue {
		return
	}
	res, err := c.exec.CachePut(ctx, r.layout.Anchor(obs.ref.loc.Shard()), obs.ref.entry, programs.CachePutRequest{
		Captured: obs.ref.gen, Value: newTombstone(), TTL: r.pol.TombstoneTTL(), Condition: programs.CacheConditionAny,
		Observation: obs.condition()})
	if err != nil || res.Status != programs.CachePutStored {
		c.log.Warn("cache quarantine not applied", "region", r.pol.ID, "reason", reason, "error", err)
		return
	}
	if r.l1 != nil {
		r.deleteL1(obs.ref)
	}
}

// maxRewrites bounds background N-1 → N rewrites in flight per Cache.
const maxRewrites = 4

// rewrite re-encodes an entry read at an older payload or envelope version
// at the current ones, in the background and only if the entry is still
// what was read, keeping its expiries: the opportunistic migration of the
// N-1 window. A busy rewriter skips it (a later read retries).
func (c *Cache) rewrite(r *region, obs observation, env envelope.Envelope, value []byte) {
	if c.closed.Load() || obs.mode != obsValue {
		return
	}
	select {
	case c.rewrites <- struct{}{}:
	default:
		r.m.rewrite("skipped")
		return
	}
	// The rewrite runs after the lookup returns, while its caller owns the
	// value the observed prefix may share an array with.
	obs.prefix = slices.Clone(obs.prefix)
	c.bg.Add(1)
	go func() {
		defer func() { <-c.rewrites; c.bg.Done() }()
		ctx, cancel := context.WithTimeout(context.Background(), r.pol.Ops.LoadTimeout)
		defer cancel()
		meta := RecordMeta{Revision: revisionOf(env)}
		keep := env
		o, err := c.record(ctx, r, obs.ref.loc, writeReq{value: value, meta: meta, obs: &obs, keep: &keep})
		switch {
		case err != nil:
			r.m.rewrite("failed")
			c.log.Warn("cache rewrite to the current version failed", "region", r.pol.ID, "error", err)
		case o == Recorded:
			r.m.rewrite("rewritten")
		default:
			r.m.rewrite("not-rewritten")
		}
	}()
}
