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
		gens = &generations{slots: make([]atomic.Pointer[[]byte], p.Ops.Shards)}
	}
	r := &region{pol: p, layout: layout, gens: gens, codec: cd, guest: rg, m: m, memo: newKeyMemo(),
		exp: expiry.Policy{Revision: p.Revision, Spread: p.Jitter, Min: p.Ops.MinTTL},
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
// value each shard's generation key was seen to hold. It is only a hint
// for building keys: every read checks it against Redis in the same round
// trip and every write checks it atomically, so a stale view costs a
// second round trip, never a wrong answer.
type generations struct {
	slots []atomic.Pointer[[]byte]
}

// get returns shard i's last seen generation, or nil.
func (g *generations) get(i int) []byte {
	if p := g.slots[i].Load(); p != nil {
		return *p
	}
	return nil
}

// observe records that shard i holds gen, unless another caller already
// recorded a value other than was (the caller's stale view).
func (g *generations) observe(i int, was, gen []byte) {
	cur := g.slots[i].Load()
	if cur != nil && !bytes.Equal(*cur, was) {
		return
	}
	v := append([]byte(nil), gen...)
	g.slots[i].CompareAndSwap(cur, &v)
}

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
