package programs

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
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
func cacheFacades() map[string]facadeCall {
	return map[string]facadeCall{
		"cache-read-bounded-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			n, err := fixtureInt(a[0])
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.CacheReadBounded(ctx, ks[0], int(n))
			return r.Status.String(), r.Outcome(), []any{string(r.Value), r.Length}, err
		},
		"cache-put-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			g, err1 := fixtureBytes(a[0])
			v, err2 := fixtureBytes(a[1])
			n, err3 := fixtureInt(a[2])
			c, err4 := fixtureBytes(a[3])
			if err := firstErr(err1, err2, err3, err4); err != nil {
				return "", 0, nil, err
			}
			r, err := e.CachePut(ctx, ks[0], ks[1], g, v, time.Duration(n)*time.Millisecond, CacheCondition(c))
			return r.Status.String(), r.Outcome(), []any{ms(r.PTTL), b2i(r.SameValue)}, err
		},
	}
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

// twoHosts returns executors on two separate go-redis clients (two host
// instances) for one mode, with the library deployed when needed.
type hostPair struct {
	a, b  *Executor
	admin redis.UniversalClient
}

func twoHosts(t *testing.T, mode policy.ProgramMode, admin redis.UniversalClient, newClient func() redis.UniversalClient) hostPair {
	t.Helper()
	cat := mustCatalog(t)
	ctx := context.Background()
	if mode == policy.ProgramsFunctionsProvisioned {
		require.NoError(t, Deploy(ctx, cat, admin))
	}
	a, err := NewExecutor(cat, mode, newClient())
	require.NoError(t, err)
	b, err := NewExecutor(cat, mode, newClient())
	require.NoError(t, err)
	return hostPair{a: a, b: b, admin: admin}
}

// checkPutInterleavings runs the program-level races on two host
// instances sharing one Redis: a loader that captured generation G meets an
// invalidation before its put; two writers with revisions 5 and 7 in either
// order; many concurrent writers with random revisions.
func checkPutInterleavings(t *testing.T, h hostPair, tag string) {
	ctx := context.Background()
	b := testBuilder(t)

	t.Run("loader-vs-invalidation", func(t *testing.T) {
		gk, ek := regionKeys(t, b, tag+"/invalidation")
		first := randomGeneration(t)
		init, err := h.a.RegionGenerationInit(ctx, gk, first)
		require.NoError(t, err)
		require.Equal(t, GenerationInitInitialized, init.Status)
		// Host A's lookup misses and captures the generation (init on an
		// existing region returns it: EXISTING, never a default).
		captured, err := h.a.RegionGenerationInit(ctx, gk, randomGeneration(t))
		require.NoError(t, err)
		require.Equal(t, GenerationInitExisting, captured.Status)
		require.Equal(t, first, captured.Generation)
		// Host B invalidates the region while A loads from the source.
		bump, err := h.b.RegionGenerationBump(ctx, gk, randomGeneration(t), []byte("op-1"))
		require.NoError(t, err)
		require.Equal(t, GenerationBumpBumped, bump.Status)
		// A's put to the captured (now dead) generation writes nothing.
		for _, cond := range []CacheCondition{CacheConditionAny, CacheConditionNewerSourceRevision} {
			r, err := h.a.CachePut(ctx, gk, ek, captured.Generation, revEnvelope(t, 5, "stale"), time.Minute, cond)
			require.NoError(t, err)
			assert.Equal(t, CachePutGenerationMoved, r.Status, cond)
			assert.Equal(t, certainty.Conflict, r.Outcome())
			assert.False(t, r.SameValue)
		}
		n, err := h.admin.Exists(ctx, ek.Redis()).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "nothing written under a moved generation")
		// A load that captured the new generation stores.
		r, err := h.a.CachePut(ctx, gk, ek, bump.Generation, revEnvelope(t, 6, "fresh"), time.Minute, CacheConditionNewerSourceRevision)
		require.NoError(t, err)
		assert.Equal(t, CachePutStored, r.Status)
		assert.Equal(t, uint64(6), storedRevision(ctx, t, h.admin, ek))
		// The generation disappears (eviction, a flush): never read as 0.
		require.NoError(t, h.admin.Del(ctx, gk.Redis()).Err())
		r, err = h.b.CachePut(ctx, gk, ek, bump.Generation, revEnvelope(t, 9, "x"), time.Minute, CacheConditionAny)
		require.NoError(t, err)
		assert.Equal(t, CachePutGenerationMissing, r.Status)
		assert.Equal(t, uint64(6), storedRevision(ctx, t, h.admin, ek), "nothing written without a generation")
	})

	for _, order := range [][2]uint64{{5, 7}, {7, 5}} {
		t.Run(fmt.Sprintf("writers-%d-then-%d", order[0], order[1]), func(t *testing.T) {
			gk, ek := regionKeys(t, b, fmt.Sprintf("%s/order-%d-%d", tag, order[0], order[1]))
			gen := randomGeneration(t)
			_, err := h.a.RegionGenerationInit(ctx, gk, gen)
			require.NoError(t, err)
			r1, err := h.a.CachePut(ctx, gk, ek, gen, revEnvelope(t, order[0], "first"), time.Minute, CacheConditionNewerSourceRevision)
			require.NoError(t, err)
			r2, err := h.b.CachePut(ctx, gk, ek, gen, revEnvelope(t, order[1], "second"), time.Minute, CacheConditionNewerSourceRevision)
			require.NoError(t, err)
			assert.Equal(t, CachePutStored, r1.Status)
			if order[1] > order[0] {
				assert.Equal(t, CachePutStored, r2.Status)
			} else {
				assert.Equal(t, CachePutNotNewer, r2.Status)
				assert.False(t, r2.SameValue)
			}
			assert.Equal(t, uint64(7), storedRevision(ctx, t, h.admin, ek), "7 stays")
		})
	}

	t.Run("concurrent-writers", func(t *testing.T) {
		gk, ek := regionKeys(t, b, tag+"/concurrent")
		gen := randomGeneration(t)
		_, err := h.a.RegionGenerationInit(ctx, gk, gen)
		require.NoError(t, err)
		const writers, puts = 8, 40
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			max     uint64
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
					r, err := ex.CachePut(ctx, gk, ek, gen, revEnvelope(t, rev, "w"+strconv.Itoa(w)), time.Minute, CacheConditionNewerSourceRevision)
					mu.Lock()
					if err != nil && failure == nil {
						failure = err
					}
					if rev > max {
						max = rev
					}
					if err == nil && r.Status == CachePutStored {
						stored[rev]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		require.NoError(t, failure)
		assert.Equal(t, max, storedRevision(ctx, t, h.admin, ek), "the highest revision wins whatever the interleaving")
		assert.Equal(t, 1, stored[max])
	})

	t.Run("repeat-after-timeout", func(t *testing.T) {
		gk, ek := regionKeys(t, b, tag+"/repeat")
		gen := randomGeneration(t)
		_, err := h.a.RegionGenerationInit(ctx, gk, gen)
		require.NoError(t, err)
		env := revEnvelope(t, 11, "once")
		r, err := h.a.CachePut(ctx, gk, ek, gen, env, time.Minute, CacheConditionNewerSourceRevision)
		require.NoError(t, err)
		require.Equal(t, CachePutStored, r.Status)
		// The reply was lost; the caller repeats the same bytes.
		r, err = h.a.CachePut(ctx, gk, ek, gen, env, time.Minute, CacheConditionNewerSourceRevision)
		require.NoError(t, err)
		assert.Equal(t, CachePutNotNewer, r.Status)
		assert.True(t, r.SameValue, "NOT_NEWER with sameValue: the first attempt applied")
		// Another writer's equal revision with other bytes is not ours.
		r, err = h.b.CachePut(ctx, gk, ek, gen, revEnvelope(t, 11, "other"), time.Minute, CacheConditionNewerSourceRevision)
		require.NoError(t, err)
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

// TestCachePutRefusesCrossSlotKeys: generation and entry must share a slot;
// the facade refuses before sending, on standalone too, so a key layout bug
// shows before it meets a Cluster.
func TestCachePutRefusesCrossSlotKeys(t *testing.T) {
	s := redistest.StartStandalone(t)
	rec := &recorder{}
	c := standaloneClient(t, s)
	c.AddHook(rec)
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, c)
	require.NoError(t, err)
	b := testBuilder(t)
	gk, _ := regionKeys(t, b, "cross")
	var other keys.Key
	for i := 0; ; i++ {
		ks := vectorKeys(t, b, "cross-"+strconv.Itoa(i), 1)
		if ks[0].Slot() != gk.Slot() {
			other = ks[0]
			break
		}
	}
	_, err = e.CachePut(context.Background(), gk, other, randomGeneration(t), revEnvelope(t, 1, "x"), time.Minute, CacheConditionAny)
	require.ErrorIs(t, err, ErrCrossSlot)
	assert.Empty(t, rec.take(), "nothing sent")
}

// TestCacheReadBoundedReplyIsBounded stores values far larger than the
// bound and measures, through a byte-counting proxy, what the reads put on
// the wire: TOO_LARGE costs a few dozen bytes whatever the stored size, a
// FOUND at the bound costs the value plus framing, and a plain GET of the
// same key (the control) costs the whole value.
func TestCacheReadBoundedReplyIsBounded(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	proxy := redistest.NewProxy(t, s.Addr())
	user, pass := s.AdminUser()
	c := redis.NewClient(&redis.Options{
		Addr: proxy.Addr(), Username: user, Password: pass, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(ctx).Err())
	k := vectorKeys(t, testBuilder(t), "bounded-read", 1)[0]
	const stored = 8 << 20
	require.NoError(t, s.Admin().Set(ctx, k.Redis(), strings.Repeat("v", stored), time.Minute).Err())
	down := func(f func()) int64 {
		_, before := proxy.Bytes()
		f()
		_, after := proxy.Bytes()
		return after - before
	}
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, c)
		require.NoError(t, err)
		// Warm up (the first evalsha call loads the script).
		_, err = e.CacheReadBounded(ctx, k, MaxCacheValueBytes)
		require.NoError(t, err)
		var r CacheReadResult
		n := down(func() {
			r, err = e.CacheReadBounded(ctx, k, MaxCacheValueBytes)
			require.NoError(t, err)
		})
		assert.Equal(t, CacheReadTooLarge, r.Status, mode)
		assert.True(t, r.TooLarge())
		assert.Equal(t, int64(stored), r.Length)
		assert.Nil(t, r.Value)
		assert.Less(t, n, int64(64), "%s: a TOO_LARGE reply of an 8 MiB value is %d bytes", mode, n)
		t.Logf("%s: TOO_LARGE reply for an %d-byte value: %d bytes on the wire", mode, stored, n)
	}
	// At the bound: FOUND, the reply is the value plus framing.
	require.NoError(t, s.Admin().Set(ctx, k.Redis(), strings.Repeat("w", MaxCacheValueBytes), time.Minute).Err())
	e, err := NewExecutor(cat, policy.ProgramsFunctionsProvisioned, c)
	require.NoError(t, err)
	var r CacheReadResult
	n := down(func() {
		r, err = e.CacheReadBounded(ctx, k, MaxCacheValueBytes)
		require.NoError(t, err)
	})
	assert.Equal(t, CacheReadFound, r.Status)
	assert.Len(t, r.Value, MaxCacheValueBytes)
	assert.LessOrEqual(t, n, int64(MaxCacheValueBytes+64))
	t.Logf("FOUND reply of a %d-byte value: %d bytes on the wire", MaxCacheValueBytes, n)
	// One byte over: TOO_LARGE again.
	require.NoError(t, s.Admin().Append(ctx, k.Redis(), "w").Err())
	r, err = e.CacheReadBounded(ctx, k, MaxCacheValueBytes)
	require.NoError(t, err)
	assert.Equal(t, CacheReadTooLarge, r.Status)
	assert.Equal(t, int64(MaxCacheValueBytes+1), r.Length)
	// Control: a plain GET of an 8 MiB value puts all of it on the wire.
	require.NoError(t, s.Admin().Set(ctx, k.Redis(), strings.Repeat("v", stored), time.Minute).Err())
	n = down(func() { require.NoError(t, c.Get(ctx, k.Redis()).Err()) })
	assert.Greater(t, n, int64(stored))
	t.Logf("control: GET of the %d-byte value: %d bytes on the wire", stored, n)
}

// TestCacheReadBoundedCluster reads on every primary of a Cluster in both
// modes (FCALL_RO needs the no-writes flag the library sets).
func TestCacheReadBoundedCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, cl.Admin()))
	c := clusterClient(t, cl)
	b := testBuilder(t)
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		e, err := NewExecutor(cat, mode, c)
		require.NoError(t, err)
		for i := range 12 {
			k := vectorKeys(t, b, fmt.Sprintf("cluster-read-%s-%d", mode, i), 1)[0]
			require.NoError(t, cl.Admin().Set(ctx, k.Redis(), strings.Repeat("z", 100+i), time.Minute).Err())
			r, err := e.CacheReadBounded(ctx, k, 105)
			require.NoError(t, err)
			if 100+i <= 105 {
				assert.Equal(t, CacheReadFound, r.Status)
				assert.Len(t, r.Value, 100+i)
			} else {
				assert.Equal(t, CacheReadTooLarge, r.Status)
				assert.Empty(t, r.Value)
			}
			assert.Equal(t, int64(100+i), r.Length)
		}
	}
	var fcallRO int64
	for _, p := range cl.Primaries() {
		fcallRO += p.CommandCalls(t, "fcall_ro")
	}
	assert.Equal(t, int64(12), fcallRO, "read-only program runs as FCALL_RO")
}
