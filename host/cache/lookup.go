package cache

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/caphost/caphost/host/cache/envelope"
	"github.com/caphost/caphost/host/cache/l1"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// observedPrefix is how much of a stored value an observation keeps: every
// envelope header, including its 128-bit digest over the payload, fits,
// so an equal prefix and an equal length mean the same envelope.
const observedPrefix = programs.CacheObservedPrefixBytes

// maxReadAttempts bounds how often one lookup follows a moved generation.
const maxReadAttempts = 3

// entryRef is where an entry lives: its location, the generation its keys
// were built under and the keys.
type entryRef struct {
	loc   keys.Location
	gen   []byte
	entry keys.Key
	lease keys.Key
}

// obsMode is what a lookup found at the entry key.
type obsMode uint8

const (
	obsNone obsMode = iota // nothing observed (no conditional write possible)
	obsAbsent
	obsValue
	obsTombstone
)

// observed is a lookup from Redis with what its read saw. Only the writes
// that follow a lookup (the refill, LookupOrClaim's token, a quarantine)
// need the observation, so the public Lookup does not carry it: it was
// 200 of Lookup's 360 bytes, copied with every result.
type observed struct {
	Lookup
	obs observation
}

// observation is what a lookup saw, so that a later write (the cache-aside
// refill, a quarantine) applies only if the entry is still that: a
// per-key invalidation or another writer in between refuses the write.
type observation struct {
	mode   obsMode
	length int64
	prefix []byte
	// digest, when set, replaces prefix (an observation carried by a
	// refresh token holds only the prefix's digest).
	digest *[20]byte
	ref    entryRef
}

// condition returns the cache-put-v2 observation of o.
func (o observation) condition() programs.CacheObservation {
	switch {
	case o.mode == obsAbsent:
		return programs.ObservedAbsent()
	case o.mode == obsValue && o.digest != nil:
		return programs.ObservedValueDigest(o.length, *o.digest)
	case o.mode == obsValue:
		return programs.ObservedValue(o.length, o.prefix)
	case o.mode == obsTombstone && o.digest != nil:
		return programs.ObservedTombstoneDigest(o.length, *o.digest)
	case o.mode == obsTombstone:
		return programs.ObservedTombstone(o.length, o.prefix)
	}
	return programs.NoObservation()
}

// Lookup reads key's entry: from L1 when the region has one and holds a
// fresh copy, else from Redis in one round trip (the shard's generation
// and at most the region's bound of the entry, or the entry alone under a
// generation the host trusts; see the package doc). Errors are caller mistakes
// (ErrUnknownRegion, ErrInvalidKey), codec and programming errors
// (ErrCorrupt, *CodecError: an entry the guest crashed on is quarantined)
// and ctx's; an
// outage is the Unavailable outcome, never an error and never a miss.
func (r *Region) Lookup(ctx context.Context, key Key) (lk Lookup, err error) {
	return r.lookup(ctx, key, nil, false)
}

// LookupAppend is Lookup with a hit's value appended to dst: lk.Value is
// append(dst, value...), so a caller that passes its buffer again (buf[:0])
// reads L1 hits without allocating; the fresh copy Lookup makes is about
// half of an L1 hit's cost (BenchmarkLookupL1 compares the two). lk.Value
// shares dst's array when dst has the room, so the caller must not reuse
// dst while it needs the value. An outcome without a value (a miss, a
// negative hit, an error) leaves dst alone and lk.Value nil.
func (r *Region) LookupAppend(ctx context.Context, key Key, dst []byte) (Lookup, error) {
	return r.lookup(ctx, key, dst, true)
}

func (r *Region) lookup(ctx context.Context, key Key, dst []byte, appendTo bool) (lk Lookup, err error) {
	rg, err := r.current()
	if err != nil {
		return Lookup{}, err
	}
	// The outcome is filled in place: a Lookup is some 160 bytes, and an
	// L1 hit is cheap enough for copies of it to show.
	err = r.c.lookup(ctx, rg, key, &lk, dst, appendTo)
	rg.m.lookup(&lk, err)
	return lk, err
}

// lookup fills lk with key's outcome. With appendTo, a hit's value is
// appended to dst (see LookupAppend).
func (c *Cache) lookup(ctx context.Context, r *region, key Key, lk *Lookup, dst []byte, appendTo bool) error {
	loc, err := c.locate(ctx, r, key)
	if err != nil {
		return err
	}
	if c.fromL1(r, loc, lk, dst, appendTo) {
		return nil
	}
	// The observation is dropped here: lookupL2's copy of its prefix is not.
	ol, err := c.readL2(ctx, r, loc)
	*lk = ol.Lookup
	if appendTo && lk.Value != nil {
		// An L2 value is the lookup's own already; the copy keeps
		// LookupAppend's promise that Value lives in dst.
		lk.Value = append(dst, lk.Value...)
	}
	return err
}

// locate canonicalises key (for a guest region) and digests its parts. A
// key the region resolved recently is answered from its memo: the same
// key, already checked, canonicalised and digested.
func (c *Cache) locate(ctx context.Context, r *region, key Key) (keys.Location, error) {
	h1, h2, remember := r.memo.hash(key)
	if remember {
		if loc, ok := r.memo.locs.Lookup(h1, h2); ok {
			return loc, nil
		}
	}
	if err := key.check(r.pol.Canonicalize); err != nil {
		return keys.Location{}, err
	}
	var parts [][]byte
	if r.pol.Canonicalize {
		var err error
		if parts, err = r.guest.canonicalize(ctx, key.attrs); err != nil {
			return keys.Location{}, err
		}
	} else {
		parts = make([][]byte, len(key.parts))
		for i, p := range key.parts {
			parts[i] = []byte(p)
		}
	}
	loc, err := r.layout.Locate(parts)
	if err != nil {
		return keys.Location{}, keyErr("the parts are out of bounds")
	}
	if remember {
		r.memo.locs.Store(h1, h2, loc)
	}
	return loc, nil
}

// members returns the entry and lease keys of loc in generation gen.
func (r *region) members(loc keys.Location, gen []byte) (entryRef, error) {
	h1, h2, remember := r.memo.refHash(loc, gen)
	if remember {
		if ref, ok := r.memo.refs.Lookup(h1, h2); ok {
			return ref, nil
		}
	}
	var buf [2]keys.Key
	ks, err := r.layout.AppendMembers(buf[:0], loc, gen)
	if err != nil {
		return entryRef{}, err
	}
	ref := entryRef{loc: loc, gen: gen, entry: ks[0], lease: ks[1]}
	if remember {
		r.memo.refs.Store(h1, h2, ref)
	}
	return ref, nil
}

// fromL1 serves a fresh L1 copy. L1 is consulted only while the hint
// channel is up: without it an invalidation elsewhere could not reach it.
// A stale copy is not served from L1 (L1 keeps an entry only until its
// soft expiry): the L2 read gives the stale path the observation its
// refresh needs.
//
// On a hit it counts the lookup's outcome, fills lk (which must be the
// zero Lookup) with the value cloned, or appended to dst with appendTo,
// and reports true; otherwise it leaves lk alone.
func (c *Cache) fromL1(r *region, loc keys.Location, lk *Lookup, dst []byte, appendTo bool) bool {
	if r.l1 == nil || !c.hintsUp() {
		return false
	}
	k, ok := l1Key(loc, r.gens.get(loc.Shard()))
	if !ok {
		return false
	}
	e, ok := r.l1.Get(k)
	if !ok {
		return false
	}
	// Counted here, before the value's copy: a locked instruction right
	// after a 1 KiB copy waits for the copy's stores to drain (measured
	// +70 to +100 ns per L1 hit, a sixth of it).
	r.m.l1Hit(e.negative)
	lk.Kind, lk.Freshness, lk.FromL1 = Hit, Fresh, true
	lk.SourceRevision, lk.WrittenAt, lk.SoftExpiresAt, lk.HardExpiresAt = e.rev, e.written, e.soft, e.hard
	if e.negative {
		lk.Kind = NegativeHit
		lk.Freshness = 0
	} else if appendTo {
		lk.Value = append(dst, e.value...)
	} else {
		lk.Value = slices.Clone(e.value)
	}
	return true
}

// The L1 key holds a generation as this package creates it.
var _ = l1.Key{Generation: [generationBytes]byte{}}

// l1Key is the L1 key of loc's entry in generation gen. A generation of
// another size than this package creates (none, or another writer's) has
// no L1 key: its entries are never kept in L1.
func l1Key(loc keys.Location, gen []byte) (l1.Key, bool) {
	if len(gen) != generationBytes {
		return l1.Key{}, false
	}
	k := l1.Key{Location: loc.Digest()}
	copy(k.Generation[:], gen)
	return k, true
}

// setL1 keeps e as ref's entry, taken under ticket, until its soft expiry
// (a stale entry is served from L2) and never past its hard expiry.
func (r *region) setL1(ticket l1.Ticket, ref entryRef, e l1Entry) {
	k, ok := l1Key(ref.loc, ref.gen)
	if !ok {
		return
	}
	until := e.hard
	if !e.soft.IsZero() && e.soft.Before(until) {
		until = e.soft
	}
	r.l1.Set(ticket, k, e, len(e.value), until)
}

// deleteL1 drops ref's entry from L1 (and any fill racing with it).
func (r *region) deleteL1(ref entryRef) {
	if k, ok := l1Key(ref.loc, ref.gen); ok {
		r.l1.Delete(k)
	}
}

// lookupL2 reads loc from Redis and interprets the entry. A fresh hit or a
// negative hit is copied into L1 (when the region has one and the hint
// channel is up), unless an invalidation raced the read. The observation
// is the caller's to keep past handing out lk.Value.
func (c *Cache) lookupL2(ctx context.Context, r *region, loc keys.Location) (observed, error) {
	ol, err := c.readL2(ctx, r, loc)
	// The prefix may share the read's array with lk.Value, which the
	// caller hands out while it keeps the observation for a later write.
	ol.obs.prefix = slices.Clone(ol.obs.prefix)
	return ol, err
}

// readL2 is lookupL2 with an observation whose prefix may share lk.Value's
// array: for a caller that drops the observation before handing out the
// value, so a hit costs no copy of it (384 bytes, an allocation).
func (c *Cache) readL2(ctx context.Context, r *region, loc keys.Location) (observed, error) {
	useL1 := r.l1 != nil && c.hintsUp()
	var ticket l1.Ticket
	if useL1 {
		ticket = r.l1.Ticket()
	}
	rd, ref, moved, err := c.read(ctx, r, loc)
	if err != nil {
		lk, err := c.readFailed(ctx, r, ref, err)
		return observed{Lookup: lk}, err
	}
	lk, entry, err := c.interpret(ctx, r, rd, ref, moved, useL1)
	if err == nil && entry != nil {
		r.setL1(ticket, ref, *entry)
	}
	return lk, err
}

// read reads the shard generation and the entry built under the
// generation this host last saw, in one round trip. When Redis holds
// another generation (a region invalidation, or a first read), the view
// is updated and the entry is read again under it; moved reports that.
// A missing generation is never read as a default: a new random one is
// created (SET NX semantics) and every older entry of the shard becomes
// unreachable.
//
// In a region with generation trust, while the hints are up, a generation
// such a read confirmed less than the trust ago is taken as current and
// only the entry is read (one command instead of two). A region
// invalidation elsewhere reaches this host as a hint, which ends the
// trust; a lost hint leaves this host reading the old generation's entries
// for at most the trust, as a lost hint leaves an L1 copy for at most its
// age cap. Writes still check the generation atomically.
func (c *Cache) read(ctx context.Context, r *region, loc keys.Location) (runtime.ScopedRead, entryRef, bool, error) {
	shard := loc.Shard()
	trust := r.pol.Ops.GenerationTrust > 0 && c.hintsUp()
	if trust {
		if gen, ok := r.gens.trusted(shard, c.clock(), r.pol.Ops.GenerationTrust); ok {
			ref, err := r.members(loc, gen)
			if err != nil {
				return runtime.ScopedRead{}, ref, false, err
			}
			rd, err := c.reads.ReadMember(ctx, ref.entry, r.readBound)
			rd.Anchor, rd.AnchorFound = gen, err == nil
			r.m.generationRead(true)
			return rd, ref, false, err
		}
	}
	anchor := r.layout.Anchor(shard)
	moved := false
	gen := r.gens.get(shard)
	var (
		rd  runtime.ScopedRead
		ref entryRef
	)
	for attempt := 0; attempt < maxReadAttempts; attempt++ {
		if gen == nil {
			g, err := c.initGeneration(ctx, r, shard, nil)
			if err != nil {
				return rd, entryRef{loc: loc}, moved, err
			}
			gen = g
		}
		var err error
		if ref, err = r.members(loc, gen); err != nil {
			return rd, ref, moved, err
		}
		// The epoch and the time are taken before the read is sent: a hint
		// that arrives while it is out, or the trust's age, counts from then.
		var (
			epoch uint64
			sent  time.Time
		)
		if trust {
			epoch, sent = r.gens.epoch.Load(), c.clock()
		}
		rd, err = c.reads.ReadScoped(ctx, anchor, ref.entry, r.readBound)
		if err != nil {
			return rd, ref, moved, err
		}
		if r.pol.Ops.GenerationTrust > 0 {
			r.m.generationRead(false)
		}
		switch {
		case !rd.AnchorFound:
			// Evicted or deleted: the old generation's entries are orphans.
			g, err := c.initGeneration(ctx, r, shard, gen)
			if err != nil {
				return rd, ref, moved, err
			}
			gen, moved = g, true
		case !bytes.Equal(rd.Anchor, gen):
			r.gens.observe(shard, gen, rd.Anchor)
			gen, moved = rd.Anchor, true
		default:
			if trust {
				r.gens.confirm(shard, gen, epoch, sent)
			}
			return rd, ref, moved, nil
		}
	}
	// The generation kept moving under us: whatever the entry holds is not
	// provably current, so this is a miss in the latest generation seen.
	ref, err := r.members(loc, gen)
	return runtime.ScopedRead{AnchorFound: true, Anchor: gen}, ref, true, err
}

// initGeneration makes sure shard's generation key exists, creating a
// random one if not, and records it. was is the view the caller found
// missing in Redis (nil: no view).
func (c *Cache) initGeneration(ctx context.Context, r *region, shard int, was []byte) ([]byte, error) {
	res, err := c.exec.RegionGenerationInit(ctx, r.layout.Anchor(shard), newGeneration())
	if err != nil {
		return nil, err
	}
	switch res.Status {
	case programs.GenerationInitInitialized, programs.GenerationInitExisting:
	default:
		return nil, corrupt("region-generation-init-v1 answered " + res.Status.String())
	}
	r.gens.observe(shard, was, res.Generation)
	if res.Status == programs.GenerationInitInitialized && was != nil {
		// The generation this host saw was evicted or deleted: other hosts
		// may still trust it, with its entries now orphans.
		c.publishRegion(r)
	}
	return res.Generation, nil
}

// readFailed maps a read failure: a wrong Redis type is a corrupt entry;
// anything else the runtime reports is the Unavailable outcome.
func (c *Cache) readFailed(ctx context.Context, r *region, ref entryRef, err error) (Lookup, error) {
	switch {
	case errors.Is(err, runtime.ErrWrongType):
		return Lookup{}, corrupt("an entry or generation key holds another Redis type")
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return Lookup{}, ctx.Err()
	}
	return unavailable(err), nil
}

// unavailable is the Unavailable outcome of a runtime error.
func unavailable(err error) Lookup {
	o := certainty.Classify(err, false)
	cat := Down
	if o == certainty.OverloadedBeforeSend {
		cat = Overloaded
	}
	return Lookup{Kind: Unavailable, Unavailable: cat, Certainty: o}
}

// interpret turns a read into an outcome. With keepL1, entry is what L1
// may keep (a fresh hit or a negative hit), else nil; without it entry is
// always nil, so a region without L1 pays for no copy of the value.
//
// rd is interpret's: a hit's Value may alias rd.Value (the caller's copy
// of the reply, which nothing else holds), and so does the observation's
// prefix (see lookupL2).
func (c *Cache) interpret(ctx context.Context, r *region, rd runtime.ScopedRead, ref entryRef, moved, keepL1 bool) (observed, *l1Entry, error) {
	obs := observation{ref: ref, mode: obsAbsent}
	if !rd.Found {
		lk := observed{Lookup{Kind: Miss, MissReason: Absent}, obs}
		if moved {
			lk.MissReason = Invalidated
		}
		return lk, nil, nil
	}
	obs.mode, obs.length = obsValue, rd.Length
	obs.prefix = rd.Value[:min(len(rd.Value), observedPrefix):min(len(rd.Value), observedPrefix)]
	if rd.Length > int64(r.lim.MaxEncodedBytes) {
		if rd.Value == nil {
			// Longer than the read bound: not a byte of it was kept, so it
			// cannot be observed; a reload replaces it unconditionally.
			obs = observation{ref: ref}
		}
		return c.incompatible(r, TooLarge, obs), nil, nil
	}
	raw := rd.Value
	if envelope.IsTombstone(raw) {
		obs.mode = obsTombstone
		return observed{Lookup{Kind: Miss, MissReason: Invalidated}, obs}, nil, nil
	}
	env, err := r.verified.Decode(raw, r.lim)
	switch {
	case errors.Is(err, envelope.FutureVersion):
		return c.incompatible(r, FutureVersion, obs), nil, nil
	case errors.Is(err, envelope.RetiredVersion):
		return c.incompatible(r, RetiredVersion, obs), nil, nil
	case errors.Is(err, envelope.UnknownEnvelope):
		return c.incompatible(r, UnknownEnvelope, obs), nil, nil
	case errors.Is(err, envelope.TooLarge):
		return c.incompatible(r, TooLarge, obs), nil, nil
	case err != nil:
		c.quarantine(ctx, r, obs, "envelope")
		return observed{}, nil, corrupt("the stored envelope fails its checks")
	}
	now := c.clock()
	state := env.State(now)
	if state == envelope.Expired {
		return observed{Lookup{Kind: Miss, MissReason: Expired}, obs}, nil, nil
	}
	if env.CodecID != r.pol.Codec {
		return c.incompatible(r, UnknownEnvelope, obs), nil, nil
	}
	lk := observed{Lookup{SourceRevision: revisionOf(env), WrittenAt: env.WrittenAt, SoftExpiresAt: env.SoftExpiresAt,
		HardExpiresAt: env.HardExpiresAt}, obs}
	if env.Negative {
		lk.Kind = NegativeHit
		if !keepL1 {
			return lk, nil, nil
		}
		return lk, &l1Entry{negative: true, rev: lk.SourceRevision, written: env.WrittenAt, soft: env.SoftExpiresAt, hard: env.HardExpiresAt}, nil
	}
	switch {
	case env.PayloadVersion > r.pol.CodecWrite:
		return c.incompatible(r, FutureVersion, obs), nil, nil
	case !slices.Contains(r.pol.CodecRead, env.PayloadVersion):
		return c.incompatible(r, RetiredVersion, obs), nil, nil
	}
	value, err := r.codec.decode(ctx, env.PayloadVersion, env.Payload)
	switch {
	case errors.Is(err, errSchema):
		return c.incompatible(r, RetiredVersion, obs), nil, nil
	case errors.Is(err, errPayload):
		c.quarantine(ctx, r, obs, "payload")
		return observed{}, nil, corrupt("the region's codec cannot read the payload")
	case err != nil:
		if poisoned(err) && ctx.Err() == nil {
			c.quarantine(ctx, r, obs, "codec-failure")
		} else if overran(err) {
			// Judged off the hot path, on CPU time (verify.go).
			c.verify(r, obs, env.PayloadVersion, env.Payload)
		}
		return observed{}, nil, err
	}
	lk.Kind, lk.Value, lk.Freshness = Hit, value, Fresh
	if state == envelope.Stale {
		lk.Freshness = Stale
		return lk, nil, nil
	}
	if env.PayloadVersion < r.pol.CodecWrite || env.EnvelopeVersion < envelope.Version {
		// The rewrite runs after Lookup returns, while the caller owns
		// lk.Value: it gets a copy of its own.
		c.rewrite(r, obs, env, slices.Clone(value))
	}
	if !keepL1 {
		return lk, nil, nil
	}
	return lk, &l1Entry{value: slices.Clone(value), rev: lk.SourceRevision, written: env.WrittenAt, soft: env.SoftExpiresAt, hard: env.HardExpiresAt}, nil
}

// poisoned reports whether a decode failure is the stored bytes' doing: the
// guest ran on them and trapped, ran out of memory or answered outside the
// ABI, which it will do again on every read. Only those quarantine the
// entry at once. A deadline, a full pool, a cancelled caller or a closed
// module says nothing about the bytes (a loaded host meets them on healthy
// entries), and a status the guest chose is not a verdict on them either:
// quarantining then would turn a slow guest into invalidations of hot
// entries across the fleet. A deadline is handed to the verifier, which
// quarantines only when a second decode spends the guest's call timeout
// on CPU (verify.go).
func poisoned(err error) bool {
	var ce *CodecError
	if !errors.As(err, &ce) {
		return false
	}
	var ge *plugins.GuestError
	if !errors.As(ce.Err, &ge) {
		return false
	}
	switch ge.Class {
	case plugins.ClassTrap, plugins.ClassMemory, plugins.ClassOutputTooLarge, plugins.ClassMalformedOutput,
		plugins.ClassHostCallLimit, plugins.ClassBadHostCall:
		return true
	}
	return false
}

// incompatible is the IncompatibleSchema outcome under r's policy.
func (c *Cache) incompatible(r *region, cat SchemaCategory, obs observation) observed {
	return observed{Lookup{Kind: IncompatibleSchema, Schema: cat, SchemaPolicy: string(r.pol.Ops.SchemaPolicy)}, obs}
}

func revisionOf(e envelope.Envelope) Revision {
	if e.HasSourceRevision {
		return SourceRevision(e.SourceRevision)
	}
	return Revision{}
}

// reloadable reports whether GetOrLoad may replace an unreadable entry.
func (lk Lookup) reloadable() bool {
	return lk.Kind == IncompatibleSchema && lk.SchemaPolicy == string(policy.CacheSchemaQuarantineAndReload)
}

// corruptError is ErrCorrupt with a fixed reason (never a byte of the value).
type corruptError struct{ reason string }

func corrupt(reason string) error            { return &corruptError{reason} }
func (e *corruptError) Error() string        { return ErrCorrupt.Error() + ": " + e.reason }
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }
