package programs

import (
	"context"
	"crypto/sha1" //nolint:gosec // the observation digest cache-put-v2 compares
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/envelope"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// cacheFacades adapts the cache programs' typed facades to the vectors.
// cache-put-v2 takes [captured, value, ttl, condition, observation?] and
// yields [pttlMillis, sameValue, previous name, generation].
func cacheFacades() map[string]facadeCall {
	return map[string]facadeCall{
		"cache-put-v2": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			g, err1 := fixtureBytes(a[0])
			v, err2 := fixtureBytes(a[1])
			n, err3 := fixtureInt(a[2])
			c, err4 := fixtureBytes(a[3])
			obs := NoObservation()
			var err5 error
			if len(a) > 4 {
				obs, err5 = fixtureObservation(a[4])
			}
			if err := firstErr(err1, err2, err3, err4, err5); err != nil {
				return "", 0, nil, err
			}
			r, err := e.CachePut(ctx, ks[0], ks[1], CachePutRequest{Captured: g, Value: v,
				TTL: time.Duration(n) * time.Millisecond, Condition: CacheCondition(c), Observation: obs})
			return r.Status.String(), r.Outcome(), []any{ms(r.PTTL), b2i(r.SameValue), r.Previous.String(), string(r.Generation)}, err
		},
	}
}

// fixtureObservation reads an observation fixture: "none", "absent", or
// {"value"|"tombstone": bytes fixture, "length": n (default: the bytes'
// length), "digest": true (pass only the prefix's SHA-1, as a refresh token
// does)}.
func fixtureObservation(v any) (CacheObservation, error) {
	switch x := v.(type) {
	case string:
		switch x {
		case "none":
			return NoObservation(), nil
		case "absent":
			return ObservedAbsent(), nil
		}
	case map[string]any:
		raw, tomb := x["tombstone"]
		if !tomb {
			raw = x["value"]
		}
		b, err := fixtureBytes(raw)
		if err != nil {
			return CacheObservation{}, err
		}
		length := int64(len(b))
		if l, ok := x["length"]; ok {
			if length, err = fixtureInt(l); err != nil {
				return CacheObservation{}, err
			}
		}
		if x["digest"] == true {
			d := sha1.Sum(b[:min(len(b), CacheObservedPrefixBytes)]) //nolint:gosec // see the import
			if tomb {
				return ObservedTombstoneDigest(length, d), nil
			}
			return ObservedValueDigest(length, d), nil
		}
		if tomb {
			return ObservedTombstone(length, b), nil
		}
		return ObservedValue(length, b), nil
	}
	return CacheObservation{}, fmt.Errorf("unsupported observation fixture %#v", v)
}

// fixtureT0 is the written-at time of every fixture envelope, so a fixture
// encodes to the same bytes each time (a repeat sends identical bytes).
var fixtureT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fixtureLimits() envelope.Limits {
	return envelope.Limits{MaxEncodedBytes: MaxCacheValueBytes, MaxCodecIDBytes: 255, MaxPayloadBytes: MaxCacheValueBytes, MaxCompressionRatio: 16}
}

// fixtureEnvelope encodes a v2 envelope with host/cache/envelope:
// {"revision": "<uint64>" (absent: no source revision), "payload": text,
// "codec": id (default "test.item")}.
func fixtureEnvelope(m map[string]any) ([]byte, error) {
	e := envelope.Envelope{
		EnvelopeVersion: envelope.Version, CodecID: "test.item", PayloadVersion: 1,
		WrittenAt: fixtureT0, HardExpiresAt: fixtureT0.Add(time.Hour), Payload: []byte("payload"),
	}
	for k, v := range m {
		switch k {
		case "revision":
			s, ok := v.(string)
			if !ok {
				if n, isNum := v.(json.Number); isNum {
					s, ok = n.String(), true
				}
			}
			if !ok {
				return nil, fmt.Errorf("envelope revision %#v", v)
			}
			rev, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, err
			}
			e.HasSourceRevision, e.SourceRevision = true, rev
		case "payload":
			e.Payload = []byte(fmt.Sprint(v))
		case "codec":
			e.CodecID = fmt.Sprint(v)
		default:
			return nil, fmt.Errorf("unknown envelope fixture field %q", k)
		}
	}
	return envelope.Encode(e, fixtureLimits())
}

func revEnvelope(t testing.TB, rev uint64, payload string) []byte {
	t.Helper()
	b, err := envelope.Encode(envelope.Envelope{
		EnvelopeVersion: envelope.Version, CodecID: "test.item", PayloadVersion: 1,
		HasSourceRevision: true, SourceRevision: rev,
		WrittenAt: fixtureT0, HardExpiresAt: fixtureT0.Add(time.Hour), Payload: []byte(payload),
	}, fixtureLimits())
	require.NoError(t, err)
	return b
}

// storedRevision decodes the entry and returns its source revision.
func storedRevision(ctx context.Context, t testing.TB, admin redis.UniversalClient, entry keys.Key) uint64 {
	t.Helper()
	raw, err := admin.Get(ctx, entry.Redis()).Bytes()
	require.NoError(t, err)
	e, err := envelope.Decode(raw, fixtureLimits())
	require.NoError(t, err)
	require.True(t, e.HasSourceRevision)
	return e.SourceRevision
}

func randomGeneration(t testing.TB) []byte {
	t.Helper()
	g := make([]byte, 16)
	for i := range g {
		g[i] = byte(rand.Uint32())
	}
	return g
}

func randomTombstone() []byte {
	var id [16]byte
	for i := range id {
		id[i] = byte(rand.Uint32())
	}
	return envelope.NewTombstone(id)
}

// hostPair is two host instances sharing one Redis: each has its own
// go-redis client (its lookups read through it) and its own executor.
type hostPair struct {
	a, b   *Executor
	ca, cb redis.UniversalClient
	admin  redis.UniversalClient
}

func twoHosts(t *testing.T, mode policy.ProgramMode, admin redis.UniversalClient, newClient func() redis.UniversalClient) hostPair {
	t.Helper()
	cat := mustCatalog(t)
	ctx := context.Background()
	if mode == policy.ProgramsFunctionsProvisioned {
		require.NoError(t, Deploy(ctx, cat, admin))
	}
	h := hostPair{ca: newClient(), cb: newClient(), admin: admin}
	var err error
	h.a, err = NewExecutor(cat, mode, h.ca)
	require.NoError(t, err)
	h.b, err = NewExecutor(cat, mode, h.cb)
	require.NoError(t, err)
	return h
}

// observe is a host's lookup of an entry, reduced to what its later write
// is conditioned on (the cache keeps the length and a 384-byte prefix).
func observe(ctx context.Context, t *testing.T, c redis.UniversalClient, entry keys.Key) CacheObservation {
	t.Helper()
	v, err := c.Get(ctx, entry.Redis()).Bytes()
	if errors.Is(err, redis.Nil) {
		return ObservedAbsent()
	}
	require.NoError(t, err)
	prefix := v[:min(len(v), CacheObservedPrefixBytes)]
	if envelope.IsTombstone(v) {
		return ObservedTombstone(int64(len(v)), prefix)
	}
	return ObservedValue(int64(len(v)), prefix)
}

// shardAt initialises tag's shard generation through host a and returns
// the family and the generation (what a lookup captures).
func shardAt(ctx context.Context, t *testing.T, h hostPair, tag string) (shardFamily, []byte) {
	t.Helper()
	f := shardedEntry(t, testBuilder(t), tag)
	r, err := h.a.RegionGenerationInit(ctx, f.anchor(), randomGeneration(t))
	require.NoError(t, err)
	require.Equal(t, GenerationInitInitialized, r.Status)
	return f, r.Generation
}

func (h hostPair) put(ctx context.Context, t *testing.T, e *Executor, f shardFamily, gen, value []byte, cond CacheCondition, obs CacheObservation) CachePutResult {
	t.Helper()
	r, err := e.CachePut(ctx, f.anchor(), f.entry(t, gen), CachePutRequest{Captured: gen, Value: value, TTL: time.Minute, Condition: cond, Observation: obs})
	require.NoError(t, err)
	return r
}

func (h hostPair) stored(ctx context.Context, t *testing.T, k keys.Key) []byte {
	t.Helper()
	v, err := h.admin.Get(ctx, k.Redis()).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	require.NoError(t, err)
	return v
}

// checkPutInterleavings runs the cache protocol's races with two host
// instances on one Redis, each step on the host that takes it in
// production: (a) a load that captured a generation meets a region
// invalidation; (b, c) a load that observed the entry meets a per-key
// invalidation or another writer; (d) an observed tombstone expires;
// (e) writers with revisions race; (f) a put whose reply was lost is
// repeated.
func checkPutInterleavings(t *testing.T, h hostPair, tag string) {
	ctx := context.Background()

	t.Run("a-generation-moved", func(t *testing.T) {
		f, captured := shardAt(ctx, t, h, tag+"/moved")
		// Host B invalidates the region while A loads from the source.
		fresh := randomGeneration(t)
		bump, err := h.b.RegionGenerationBump(ctx, f.anchor(), fresh, []byte("op-1"))
		require.NoError(t, err)
		require.Equal(t, GenerationBumpBumped, bump.Status)
		for _, cond := range []CacheCondition{CacheConditionAny, CacheConditionNewerSourceRevision} {
			r := h.put(ctx, t, h.a, f, captured, revEnvelope(t, 5, "stale"), cond, ObservedAbsent())
			assert.Equal(t, CachePutGenerationMoved, r.Status, cond)
			assert.Equal(t, certainty.Conflict, r.Outcome())
			assert.Equal(t, fresh, r.Generation, "the put reports the generation that replaced the captured one")
			assert.Equal(t, CachePreviousUnknown, r.Previous)
			assert.False(t, r.SameValue)
		}
		assert.Nil(t, h.stored(ctx, t, f.entry(t, captured)), "nothing written under a moved generation")
		// A retries in the generation the put reported, without reading again.
		r := h.put(ctx, t, h.a, f, fresh, revEnvelope(t, 6, "fresh"), CacheConditionNewerSourceRevision, ObservedAbsent())
		assert.Equal(t, CachePutStored, r.Status)
		assert.Equal(t, uint64(6), storedRevision(ctx, t, h.admin, f.entry(t, fresh)))
		// The generation disappears (eviction, a flush): never read as a default.
		require.NoError(t, h.admin.Del(ctx, f.anchor().Redis()).Err())
		r = h.put(ctx, t, h.b, f, fresh, revEnvelope(t, 9, "x"), CacheConditionAny, NoObservation())
		assert.Equal(t, CachePutGenerationMissing, r.Status)
		assert.Equal(t, uint64(6), storedRevision(ctx, t, h.admin, f.entry(t, fresh)), "nothing written without a generation")
	})

	t.Run("b-absent-then-tombstone", func(t *testing.T) {
		f, gen := shardAt(ctx, t, h, tag+"/absent-tombstone")
		entry := f.entry(t, gen)
		seen := observe(ctx, t, h.ca, entry) // A's lookup misses
		require.Equal(t, ObservedAbsent(), seen)
		// B invalidates the key: a tombstone in the entry's place.
		tomb := randomTombstone()
		r := h.put(ctx, t, h.b, f, gen, tomb, CacheConditionAny, NoObservation())
		require.Equal(t, CachePutStored, r.Status)
		assert.Equal(t, CachePreviousAbsent, r.Previous, "an invalidation of an absent entry is ALREADY_ABSENT")
		// A's load, which began before the invalidation, must not land.
		for _, cond := range []CacheCondition{CacheConditionAny, CacheConditionNewerSourceRevision} {
			r = h.put(ctx, t, h.a, f, gen, revEnvelope(t, 5, "loaded"), cond, seen)
			assert.Equal(t, CachePutObservationChanged, r.Status, cond)
			assert.Equal(t, certainty.Conflict, r.Outcome())
			assert.False(t, r.SameValue)
			assert.Equal(t, CachePreviousTombstone, r.Previous)
		}
		assert.Equal(t, tomb, h.stored(ctx, t, entry), "the tombstone stays")
	})

	t.Run("c-value-then-replaced", func(t *testing.T) {
		f, gen := shardAt(ctx, t, h, tag+"/value-replaced")
		entry := f.entry(t, gen)
		require.Equal(t, CachePutStored, h.put(ctx, t, h.b, f, gen, revEnvelope(t, 1, "v1"), CacheConditionAny, NoObservation()).Status)
		seen := observe(ctx, t, h.ca, entry) // A reads v1 (say, to refresh it)
		replacement := revEnvelope(t, 2, "v2")
		r := h.put(ctx, t, h.b, f, gen, replacement, CacheConditionAny, NoObservation())
		require.Equal(t, CachePutStored, r.Status)
		assert.Equal(t, CachePreviousEnvelope, r.Previous)
		r = h.put(ctx, t, h.a, f, gen, revEnvelope(t, 3, "v3"), CacheConditionAny, seen)
		assert.Equal(t, CachePutObservationChanged, r.Status)
		assert.False(t, r.SameValue)
		assert.Equal(t, CachePreviousEnvelope, r.Previous)
		assert.Equal(t, replacement, h.stored(ctx, t, entry))
		// Observing the replacement, A's write applies (quarantine and
		// refresh are owner-safe, not blocked forever).
		r = h.put(ctx, t, h.a, f, gen, randomTombstone(), CacheConditionAny, observe(ctx, t, h.ca, entry))
		assert.Equal(t, CachePutStored, r.Status)
		assert.Equal(t, CachePreviousEnvelope, r.Previous)
	})

	t.Run("d-tombstone-expired", func(t *testing.T) {
		f, gen := shardAt(ctx, t, h, tag+"/tombstone-expired")
		entry := f.entry(t, gen)
		tomb := randomTombstone()
		r, err := h.b.CachePut(ctx, f.anchor(), entry, CachePutRequest{Captured: gen, Value: tomb, TTL: 30 * time.Millisecond,
			Condition: CacheConditionAny})
		require.NoError(t, err)
		require.Equal(t, CachePutStored, r.Status)
		seen := observe(ctx, t, h.ca, entry) // A's lookup meets the tombstone: a miss
		require.Equal(t, ObservedTombstone(int64(len(tomb)), tomb), seen)
		// The tombstone expires (EXISTS expires it lazily once its TTL passed).
		require.Eventually(t, func() bool { return h.admin.Exists(ctx, entry.Redis()).Val() == 0 }, 5*time.Second, 10*time.Millisecond)
		r = h.put(ctx, t, h.a, f, gen, revEnvelope(t, 4, "after"), CacheConditionNewerSourceRevision, seen)
		assert.Equal(t, CachePutStored, r.Status)
		assert.Equal(t, CachePreviousAbsent, r.Previous)
		// A new invalidation (another tombstone) is not the one observed.
		require.Equal(t, CachePutStored, h.put(ctx, t, h.b, f, gen, randomTombstone(), CacheConditionAny, NoObservation()).Status)
		r = h.put(ctx, t, h.a, f, gen, revEnvelope(t, 5, "late"), CacheConditionAny, seen)
		assert.Equal(t, CachePutObservationChanged, r.Status)
		assert.Equal(t, CachePreviousTombstone, r.Previous)
	})

	for _, order := range [][2]uint64{{5, 7}, {7, 5}} {
		t.Run(fmt.Sprintf("e-writers-%d-then-%d", order[0], order[1]), func(t *testing.T) {
			f, gen := shardAt(ctx, t, h, fmt.Sprintf("%s/order-%d-%d", tag, order[0], order[1]))
			r1 := h.put(ctx, t, h.a, f, gen, revEnvelope(t, order[0], "first"), CacheConditionNewerSourceRevision, NoObservation())
			r2 := h.put(ctx, t, h.b, f, gen, revEnvelope(t, order[1], "second"), CacheConditionNewerSourceRevision, NoObservation())
			assert.Equal(t, CachePutStored, r1.Status)
			if order[1] > order[0] {
				assert.Equal(t, CachePutStored, r2.Status)
			} else {
				assert.Equal(t, CachePutNotNewer, r2.Status)
				assert.False(t, r2.SameValue)
			}
			assert.Equal(t, uint64(7), storedRevision(ctx, t, h.admin, f.entry(t, gen)), "7 stays")
		})
	}

	t.Run("e-concurrent-writers", func(t *testing.T) {
		f, gen := shardAt(ctx, t, h, tag+"/concurrent")
		entry := f.entry(t, gen)
		const writers, puts = 8, 40
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			highest uint64
			stored  = map[uint64]int{}
			failure error
		)
		for w := range writers {
			ex := h.a
			if w%2 == 1 {
				ex = h.b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 42))
				for range puts {
					rev := rng.Uint64N(1 << 40) // both 32-bit halves vary
					r, err := ex.CachePut(ctx, f.anchor(), entry, CachePutRequest{Captured: gen,
						Value: revEnvelope(t, rev, "w"+strconv.Itoa(w)), TTL: time.Minute, Condition: CacheConditionNewerSourceRevision})
					mu.Lock()
					if err != nil && failure == nil {
						failure = err
					}
					highest = max(highest, rev)
					if err == nil && r.Status == CachePutStored {
						stored[rev]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.NoError(t, failure)
		assert.Equal(t, highest, storedRevision(ctx, t, h.admin, entry), "the highest revision wins whatever the interleaving")
		assert.Equal(t, 1, stored[highest])
	})

	t.Run("f-repeat-after-timeout", func(t *testing.T) {
		f, gen := shardAt(ctx, t, h, tag+"/repeat")
		env := revEnvelope(t, 11, "once")
		// Each write as the cache sends it; the reply is lost and the
		// caller repeats the same bytes.
		r := h.put(ctx, t, h.a, f, gen, env, CacheConditionNewerSourceRevision, ObservedAbsent())
		require.Equal(t, CachePutStored, r.Status)
		r = h.put(ctx, t, h.a, f, gen, env, CacheConditionNewerSourceRevision, ObservedAbsent())
		assert.Equal(t, CachePutObservationChanged, r.Status)
		assert.True(t, r.SameValue, "OBSERVATION_CHANGED with sameValue: the first attempt applied")
		r = h.put(ctx, t, h.a, f, gen, env, CacheConditionNewerSourceRevision, NoObservation())
		assert.Equal(t, CachePutNotNewer, r.Status)
		assert.True(t, r.SameValue, "NOT_NEWER with sameValue: the first attempt applied")
		// Another writer's equal revision with other bytes is not ours.
		r = h.put(ctx, t, h.b, f, gen, revEnvelope(t, 11, "other"), CacheConditionNewerSourceRevision, NoObservation())
		assert.Equal(t, CachePutNotNewer, r.Status)
		assert.False(t, r.SameValue)
	})
}

func TestCachePutInterleavingsStandalone(t *testing.T) {
	s := redistest.StartStandalone(t)
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			h := twoHosts(t, mode, s.Admin(), func() redis.UniversalClient { return standaloneClient(t, s) })
			checkPutInterleavings(t, h, "standalone-"+string(mode))
		})
	}
}

func TestCachePutInterleavingsCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			h := twoHosts(t, mode, cl.Admin(), func() redis.UniversalClient { return clusterClient(t, cl) })
			checkPutInterleavings(t, h, "cluster-"+string(mode))
		})
	}
}

// TestCachePutRepeatAfterRealTimeout loses a put's reply for real: a proxy
// forwards the call to Redis and holds the answer back until the client
// times out (INDETERMINATE). Repeating the same call then reports the
// first attempt as applied, in both modes.
func TestCachePutRepeatAfterRealTimeout(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	require.NoError(t, LoadScripts(ctx, cat, s.Admin()))
	c, proxy := proxiedClient(t, s)
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := NewExecutor(cat, mode, c)
			require.NoError(t, err)
			f := shardedEntry(t, testBuilder(t), "real-timeout-"+string(mode))
			gen := randomGeneration(t)
			_, err = e.RegionGenerationInit(ctx, f.anchor(), gen)
			require.NoError(t, err)
			req := CachePutRequest{Captured: gen, Value: revEnvelope(t, 3, "lost reply"), TTL: time.Minute,
				Condition: CacheConditionNewerSourceRevision, Observation: ObservedAbsent()}
			proxy.Stall()
			_, err = e.CachePut(ctx, f.anchor(), f.entry(t, gen), req)
			proxy.Passthrough()
			require.Error(t, err)
			assert.Equal(t, certainty.Indeterminate, certainty.Classify(err, true), "%v", err)
			entry := f.entry(t, gen)
			require.Eventually(t, func() bool { return s.Admin().Exists(ctx, entry.Redis()).Val() == 1 }, 5*time.Second, 10*time.Millisecond)
			r, err := e.CachePut(ctx, f.anchor(), f.entry(t, gen), req)
			require.NoError(t, err)
			assert.Equal(t, CachePutObservationChanged, r.Status)
			assert.True(t, r.SameValue, "the repeat finds the first attempt's bytes")
		})
	}
}

// TestCachePutRefusesCrossSlotKeys: generation and entry must share a slot;
// the facade refuses before sending, on standalone too, so a key layout bug
// shows before it meets a Cluster.
func TestCachePutRefusesCrossSlotKeys(t *testing.T) {
	e, rec := recordingExecutor(t, redistest.StartStandalone(t))
	b := testBuilder(t)
	anchor := shardedEntry(t, b, "cross").anchor()
	var other keys.Key
	for i := 0; other.IsZero(); i++ {
		if k := vectorKeys(t, b, "cross-"+strconv.Itoa(i), 1)[0]; k.Slot() != anchor.Slot() {
			other = k
		}
	}
	_, err := e.CachePut(context.Background(), anchor, other, CachePutRequest{Captured: randomGeneration(t),
		Value: revEnvelope(t, 1, "x"), TTL: time.Minute, Condition: CacheConditionAny})
	require.ErrorIs(t, err, ErrCrossSlot)
	assert.Empty(t, rec.take(), "nothing sent")
}

// TestCachePutRefusesInconsistentReplies feeds the decoder replies that
// are well-formed tuples but contradict themselves or the request: each
// is ErrIncompatible, never a success.
func TestCachePutRefusesInconsistentReplies(t *testing.T) {
	captured := []byte("generation-aaaaaaaa")
	req := CachePutRequest{Captured: captured, TTL: time.Minute}
	mk := func(status, pttl, same, prev int64, gen string) *reply {
		r := &reply{status: status, n: 4}
		r.ints[0], r.ints[1], r.ints[2] = pttl, same, prev
		r.raw[3] = []byte(gen)
		return r
	}
	good := map[string]*reply{
		"stored":           mk(1, 60000, 1, 0, ""),
		"moved":            mk(3, 0, 0, 0, "generation-bbbbbbbb"),
		"not-newer-same":   mk(4, 0, 1, 1, ""),
		"changed":          mk(5, 0, 0, 0, ""),
		"changed-same":     mk(5, 0, 1, 2, ""),
		"unreadable-other": mk(6, 0, 0, 3, ""),
		"invalid":          mk(8, 0, 0, 0, ""),
	}
	for name, r := range good {
		_, err := cachePutResult("cache-put-v2", r, req)
		assert.NoError(t, err, name)
	}
	res, err := cachePutResult("cache-put-v2", mk(1, 60000, 1, 2, ""), req)
	require.NoError(t, err)
	assert.Equal(t, CachePreviousTombstone, res.Previous, "wire 2 is a tombstone")
	assert.Equal(t, time.Minute, res.PTTL)
	res, err = cachePutResult("cache-put-v2", mk(3, 0, 0, 0, "generation-bbbbbbbb"), req)
	require.NoError(t, err)
	assert.Equal(t, CachePreviousUnknown, res.Previous)
	assert.Equal(t, []byte("generation-bbbbbbbb"), res.Generation)

	bad := map[string]*reply{
		"stored-other-ttl":         mk(1, 59999, 1, 0, ""),
		"stored-not-same":          mk(1, 60000, 0, 0, ""),
		"stored-with-generation":   mk(1, 60000, 1, 0, "generation-bbbbbbbb"),
		"missing-with-generation":  mk(2, 0, 0, 0, "generation-bbbbbbbb"),
		"missing-with-previous":    mk(2, 0, 0, 1, ""),
		"moved-without-generation": mk(3, 0, 0, 0, ""),
		"moved-to-captured":        mk(3, 0, 0, 0, string(captured)),
		"moved-short-generation":   mk(3, 0, 0, 0, "short"),
		"moved-with-previous":      mk(3, 0, 0, 1, "generation-bbbbbbbb"),
		"not-newer-over-absent":    mk(4, 0, 0, 0, ""),
		"not-newer-with-ttl":       mk(4, 60000, 0, 1, ""),
		"changed-same-absent":      mk(5, 0, 1, 0, ""),
		"unreadable-tombstone":     mk(6, 0, 0, 2, ""),
		"unreadable-same":          mk(6, 0, 1, 1, ""),
		"wrong-type-same":          mk(7, 0, 1, 0, ""),
		"same-not-boolean":         mk(5, 0, 2, 1, ""),
		"previous-out-of-range":    mk(5, 0, 0, 4, ""),
		"previous-negative":        mk(5, 0, 0, -1, ""),
	}
	for name, r := range bad {
		_, err := cachePutResult("cache-put-v2", r, req)
		require.ErrorIs(t, err, ErrIncompatible, name)
		var ce *CompatibilityError
		require.ErrorAs(t, err, &ce, name)
		assert.Equal(t, "cache-put-v2", ce.Program)
	}
}

// TestCacheObservationDigest pins what the facade sends: the lower-hex
// SHA-1 of exactly the first min(length, 384) bytes, whatever else the
// caller passes; a prefix too short for its length sends no digest (the
// program answers INVALID).
func TestCacheObservationDigest(t *testing.T) {
	long := make([]byte, 1000)
	for i := range long {
		long[i] = byte(i)
	}
	want := sha1.Sum(long[:CacheObservedPrefixBytes]) //nolint:gosec // see the import
	assert.Equal(t, ObservedValueDigest(1000, want), ObservedValue(1000, long))
	assert.Equal(t, ObservedValue(1000, long), ObservedValue(1000, long[:CacheObservedPrefixBytes]))
	assert.Empty(t, ObservedValue(1000, long[:CacheObservedPrefixBytes-1]).digest)
	short := sha1.Sum(long[:21]) //nolint:gosec // see the import
	assert.Equal(t, ObservedTombstoneDigest(21, short), ObservedTombstone(21, long))
	assert.Empty(t, ObservedValue(0, long).digest)
	assert.Empty(t, ObservedValue(-1, long).digest)
	assert.Equal(t, CacheObservation{}, NoObservation(), "the zero value observes nothing")
	assert.Equal(t, "none", NoObservation().mode.wire())
	assert.Equal(t, "absent", ObservedAbsent().mode.wire())
	assert.Equal(t, "value", ObservedValue(1, long).mode.wire())
	assert.Equal(t, "tombstone", ObservedTombstone(1, long).mode.wire())
}
