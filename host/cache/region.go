package cache

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caphost/caphost/host/cache/envelope"
	"github.com/caphost/caphost/host/cache/expiry"
	"github.com/caphost/caphost/host/cache/flight"
	"github.com/caphost/caphost/host/cache/l1"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// generationBytes is the size of a region generation: random 128 bits.
const generationBytes = 16

// region is one region of a policy set: its frozen policy and everything
// the host runs it with. It is immutable once built, but for the counters
// and caches it owns.
type region struct {
	pol    policy.CacheRegionPolicy
	layout *keys.Sharded
	gens   *generations
	exp    expiry.Policy
	lim    envelope.Limits
	// readBound is what a lookup reads of an entry: the region's largest
	// stored value, but never less than an observation prefix.
	readBound int
	codec     codec
	// guest is the declaring cache-region guest (canonicaliser and
	// admission); zero for a configured region.
	guest  regionGuest
	l1     *l1.Cache[l1Entry] // nil: no L1
	flight *flight.Group[string, loadResult]
	source *flight.Bulkhead
	m      *regionMetrics
	// memo remembers recent key locations and entry keys; it lives as
	// long as this runtime, which a guest swap replaces.
	memo *keyMemo
	// verified remembers the envelopes whose digest a lookup verified, so
	// a hot entry's is not recomputed on every read (envelope.Memo).
	verified *envelope.Memo
}

// l1Entry is what L1 keeps of an L2 entry: the decoded value and its
// envelope's metadata, so an L1 hit is judged like an L2 one.
type l1Entry struct {
	value    []byte
	negative bool
	rev      Revision
	written  time.Time
	soft     time.Time
	hard     time.Time
}

// layoutID identifies a region's key layout: regions of two policy sets
// with the same id, key version and shard count share keys, so they share
// the generation view too.
func layoutID(p policy.CacheRegionPolicy) string {
	return p.ID + "/kv" + strconv.Itoa(p.KeyVersion) + "/s" + strconv.Itoa(p.Ops.Shards)
}

// newRegion builds the runtime of p. gens is the generation view to reuse
// (nil: a new one). The returned region's L1 is open; close it with close.
func newRegion(b *keys.Builder, p policy.CacheRegionPolicy, gens *generations, cd codec, rg regionGuest, clock func() time.Time, m *regionMetrics) (*region, error) {
	layout, err := b.PrepareSharded(keys.ShardSpec{Capability: keys.CapCache, Region: p.ID, KeyVersion: p.KeyVersion,
		Shards: p.Ops.Shards, AnchorKind: "generation", MemberKinds: []string{"entry", "refresh-lease"}})
	if err != nil {
		return nil, fmt.Errorf("cache: region %s: key layout: %w", p.ID, err)
	}
	if gens == nil || len(gens.slots) != p.Ops.Shards {
		gens = &generations{slots: make([]atomic.Pointer[genView], p.Ops.Shards)}
	}
	r := &region{pol: p, layout: layout, gens: gens, codec: cd, guest: rg, m: m, memo: newKeyMemo(),
		verified: envelope.NewMemo(memoBits), exp: expiry.Policy{Revision: p.Revision, Spread: p.Jitter, Min: p.Ops.MinTTL},
		lim: envelope.Limits{MaxEncodedBytes: p.MaxStoredBytes(), MaxCodecIDBytes: 255,
			MaxPayloadBytes: p.MaxBytes, MaxCompressionRatio: p.Ops.MaxCompressionRatio},
	}
	r.readBound = max(r.lim.MaxEncodedBytes, observedPrefix)
	if err := r.exp.Validate(); err != nil {
		return nil, fmt.Errorf("cache: region %s: expiry: %w", p.ID, err)
	}
	if err := r.lim.Validate(); err != nil {
		return nil, fmt.Errorf("cache: region %s: envelope limits: %w", p.ID, err)
	}
	if r.flight, err = flight.New[string, loadResult](flight.Config{MaxKeys: p.Ops.FlightKeys,
		MaxWaiters: p.Ops.FlightWaiters, LoadTimeout: p.Ops.LoadTimeout}); err != nil {
		return nil, fmt.Errorf("cache: region %s: single-flight: %w", p.ID, err)
	}
	if r.source, err = flight.NewBulkhead(p.Ops.SourceLoads, p.Ops.SourceQueued); err != nil {
		return nil, fmt.Errorf("cache: region %s: source bulkhead: %w", p.ID, err)
	}
	if p.L1 {
		r.l1, err = l1.New[l1Entry](l1.Config{MaxEntries: p.Ops.L1.MaxEntries, MaxBytes: p.Ops.L1.MaxBytes,
			MaxAge: p.Ops.L1.MaxAge, Clock: clock, Strict: p.Consistency.Strict()})
		if err != nil {
			return nil, fmt.Errorf("cache: region %s: L1: %w", p.ID, err)
		}
	}
	return r, nil
}

// close releases the region's L1 and cancels its running loads. A region
// replaced by a policy swap is closed only when its policy changed.
func (r *region) close() {
	r.l1.Close()
	r.flight.Close()
}

// generations is a host's view of a region's shard generations: the last
// value each shard's generation key was seen to hold, and when a read last
// confirmed it. A view that is not trusted is only a hint for building
// keys: the read checks it against Redis in the same round trip and every
// write checks it atomically, so a stale view costs a second round trip,
// never a wrong answer. A trusted view (see trusted) is read under without
// that check.
type generations struct {
	slots []atomic.Pointer[genView]
	// epoch moves whenever a trusted view may have gone stale without a
	// read showing it: a region invalidation's hint, and the hints going
	// down or coming up. A confirmation made under an older epoch is not
	// trusted.
	epoch atomic.Uint64
}

// genView is one shard's view. It is immutable once stored.
type genView struct {
	gen []byte
	// confirmed is when the read that saw Redis hold gen was sent (zero:
	// not confirmed); epoch is the generations' epoch read before it.
	confirmed time.Time
	epoch     uint64
}

// get returns shard i's last seen generation, or nil.
func (g *generations) get(i int) []byte {
	if v := g.slots[i].Load(); v != nil {
		return v.gen
	}
	return nil
}

// observe records that shard i holds gen, unless another caller already
// recorded a value other than was (the caller's stale view). A view
// already holding gen is kept, confirmation and all.
func (g *generations) observe(i int, was, gen []byte) {
	cur := g.slots[i].Load()
	switch {
	case cur != nil && bytes.Equal(cur.gen, gen):
		return
	case cur != nil && !bytes.Equal(cur.gen, was):
		return
	}
	g.slots[i].CompareAndSwap(cur, &genView{gen: append([]byte(nil), gen...)})
}

// confirm records that a read sent at sent, under epoch, saw shard i hold
// gen. It is dropped when the view moved to another generation or the
// epoch moved since (a hint may have arrived while the read was out).
func (g *generations) confirm(i int, gen []byte, epoch uint64, sent time.Time) {
	cur := g.slots[i].Load()
	if cur == nil || !bytes.Equal(cur.gen, gen) || epoch != g.epoch.Load() ||
		(cur.epoch == epoch && !cur.confirmed.Before(sent)) {
		return
	}
	g.slots[i].CompareAndSwap(cur, &genView{gen: cur.gen, confirmed: sent, epoch: epoch})
}

// trusted returns shard i's generation when a read confirmed it less than
// trust before now and under the current epoch. The caller checks that
// the hints are up: only they can move the epoch when another host moves
// the generation.
func (g *generations) trusted(i int, now time.Time, trust time.Duration) ([]byte, bool) {
	v := g.slots[i].Load()
	if v == nil || v.confirmed.IsZero() || v.epoch != g.epoch.Load() {
		return nil, false
	}
	if age := now.Sub(v.confirmed); age < 0 || age >= trust {
		return nil, false
	}
	return v.gen, true
}

// distrust makes every confirmation made so far untrusted.
func (g *generations) distrust() { g.epoch.Add(1) }

// newGeneration returns a fresh random generation.
func newGeneration() []byte {
	g := make([]byte, generationBytes)
	_, _ = rand.Read(g) // crypto/rand.Read never fails (Go ≥ 1.24)
	return g
}

// newTombstone returns a fresh tombstone.
func newTombstone() []byte {
	var id [16]byte
	_, _ = rand.Read(id[:])
	return envelope.NewTombstone(id)
}
