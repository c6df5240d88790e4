package cache

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestLookupOutcomesFollowTheEnvelope walks one key through every lookup
// outcome against a real Redis, with the clock moved explicitly: the
// envelope's own expiries judge, whatever the Redis key's TTL says.
func TestLookupOutcomesFollowTheEnvelope(t *testing.T) {
	srv := redistest.StartStandalone(t)
	clk := newClock()
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), clk, nil)
	r := in.region(t, "items")
	ctx, key := ctxT(t), Parts("tenant-1", "item-42")

	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind)
	assert.Equal(t, Absent, lk.MissReason)

	o, err := r.Record(ctx, key, []byte("v1"), RecordMeta{Revision: SourceRevision(7)})
	require.NoError(t, err)
	require.Equal(t, Recorded, o)
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	require.Equal(t, Hit, lk.Kind)
	assert.Equal(t, Fresh, lk.Freshness)
	assert.Equal(t, []byte("v1"), lk.Value)
	rev, ok := lk.SourceRevision.Value()
	assert.True(t, ok)
	assert.Equal(t, uint64(7), rev)
	// Jitter only shortens: soft ≤ 10 s, hard ≤ 60 s, each at least 90 %.
	assert.WithinRange(t, lk.SoftExpiresAt, clk.Now().Add(9*time.Second), clk.Now().Add(10*time.Second))
	assert.WithinRange(t, lk.HardExpiresAt, clk.Now().Add(54*time.Second), clk.Now().Add(time.Minute))

	clk.Advance(lk.SoftExpiresAt.Sub(clk.Now()))
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Hit, lk.Kind)
	assert.Equal(t, Stale, lk.Freshness, "at the soft expiry the entry is stale")

	clk.Advance(lk.HardExpiresAt.Sub(clk.Now()))
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind)
	assert.Equal(t, Expired, lk.MissReason, "the envelope's hard expiry judges, though Redis still holds the key")

	o, err = r.RecordAbsent(ctx, key, RecordMeta{})
	require.NoError(t, err)
	require.Equal(t, Recorded, o)
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, NegativeHit, lk.Kind)

	io, err := r.Invalidate(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, InvalidationDone, io)
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind)
	assert.Equal(t, Invalidated, lk.MissReason, "a per-key invalidation leaves a tombstone")

	io, err = r.Invalidate(ctx, Parts("tenant-1", "never-written"))
	require.NoError(t, err)
	assert.Equal(t, AlreadyAbsent, io)
}

// TestRegionInvalidationReachesEveryInstance is the regression test of the
// reference's "generation read once per instance" defect: two hosts share
// Redis; after one invalidates the region, the other stops serving the old
// generation's entries as soon as the invalidation's hint reaches it (b
// trusts the generation it read until then: TestGenerationTrustIsBounded
// covers a lost hint and the strict regions that never trust), and its
// writes land in the new one.
func TestRegionInvalidationReachesEveryInstance(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	clk := newClock()
	ia, ib := newInstance(t, topo, testConfig(t, nil), clk, nil), newInstance(t, topo, testConfig(t, nil), clk, nil)
	waitHintsUp(t, ia, ib)
	a, b := ia.region(t, "items"), ib.region(t, "items")
	ctx, key := ctxT(t), Parts("k")

	_, err := a.Record(ctx, key, []byte("old"), RecordMeta{})
	require.NoError(t, err)
	for range 2 {
		lk, err := b.Lookup(ctx, key)
		require.NoError(t, err)
		require.Equal(t, Hit, lk.Kind, "b has seen the region's generation")
	}
	require.Equal(t, 1.0, metric(t, ib.reg, "caphost_cache_generation_reads_total", map[string]string{"generation": "trusted"}),
		"b trusts the generation it read: only a hint can end that before the trust does")

	o, err := a.InvalidateRegion(ctx)
	require.NoError(t, err)
	require.Equal(t, InvalidationDone, o)
	// The clock stands still: only the hint can end b's trust.
	var lk Lookup
	require.Eventually(t, func() bool {
		lk, err = b.Lookup(ctx, key)
		return err == nil && lk.Kind == Miss
	}, 10*time.Second, time.Millisecond, "b must stop serving the old generation once the hint arrives")
	assert.Equal(t, Invalidated, lk.MissReason)

	// a's view is current (it bumped); b writes through its now-current
	// view, and a written entry is visible to both.
	rec, err := b.Record(ctx, key, []byte("new"), RecordMeta{})
	require.NoError(t, err)
	require.Equal(t, Recorded, rec)
	for _, r := range []*Region{a, b} {
		lk, err = r.Lookup(ctx, key)
		require.NoError(t, err)
		require.Equal(t, Hit, lk.Kind)
		assert.Equal(t, []byte("new"), lk.Value)
	}

	// A writer whose view is stale follows the moved generation once.
	_, err = b.InvalidateRegion(ctx)
	require.NoError(t, err)
	rec, err = a.Record(ctx, key, []byte("newer"), RecordMeta{})
	require.NoError(t, err)
	require.Equal(t, Recorded, rec)
	lk, err = b.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []byte("newer"), lk.Value)
}

// TestRefillLosesToInvalidation is the interleaved loader/invalidator race
// across two hosts: a load that began before an invalidation can never
// store its (older) result after it — the reference's non-atomic
// conditional write. Per-key invalidation, region invalidation and a
// write-through of a newer value each win over the racing refill.
func TestRefillLosesToInvalidation(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	clk := newClock()
	loader := newInstance(t, topo, testConfig(t, nil), clk, nil).region(t, "items")
	writer := newInstance(t, topo, testConfig(t, nil), clk, nil).region(t, "items")

	for name, invalidate := range map[string]func(ctx context.Context, key Key) error{
		"key": func(ctx context.Context, key Key) error {
			o, err := writer.Invalidate(ctx, key)
			if err == nil && o != AlreadyAbsent && o != InvalidationDone {
				t.Errorf("invalidate: %s", o)
			}
			return err
		},
		"region": func(ctx context.Context, _ Key) error {
			o, err := writer.InvalidateRegion(ctx)
			if err == nil && o != InvalidationDone {
				t.Errorf("invalidate region: %s", o)
			}
			return err
		},
		"write-through": func(ctx context.Context, key Key) error {
			o, err := writer.Record(ctx, key, []byte("new"), RecordMeta{Revision: SourceRevision(9)})
			if err == nil && o != Recorded {
				t.Errorf("record: %s", o)
			}
			return err
		},
	} {
		for _, existing := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/existing=%t", name, existing), func(t *testing.T) {
				ctx, key := ctxT(t), Parts(name, strconv.FormatBool(existing))
				if existing {
					// A stale entry: the refill is a stale-while-revalidate.
					_, err := writer.Record(ctx, key, []byte("stale"), RecordMeta{Revision: SourceRevision(1)})
					require.NoError(t, err)
					clk.Advance(11 * time.Second)
					defer clk.Advance(-11 * time.Second)
				}
				started, release := make(chan struct{}), make(chan struct{})
				done := make(chan Result, 1)
				go func() {
					res, err := loader.GetOrLoad(ctx, key, func(ctx context.Context) (LoadOutcome, error) {
						close(started)
						if !await(ctx, release) {
							return Cancelled(), nil
						}
						return Loaded([]byte("old"), SourceRevision(8)), nil
					})
					assert.NoError(t, err)
					done <- res
				}()
				<-started
				require.NoError(t, invalidate(ctx, key))
				close(release)
				res := <-done
				assert.Equal(t, LoadedFromSource, res.Kind)
				assert.Equal(t, []byte("old"), res.Value, "the caller still gets its load")
				assert.Equal(t, NotRecordedCondition, res.Record, "the refill must lose to the invalidation")
				for _, r := range []*Region{loader, writer} {
					lk, err := r.Lookup(ctx, key)
					require.NoError(t, err)
					assert.NotEqual(t, []byte("old"), lk.Value, "nobody may see the refill")
				}
			})
		}
	}
}

// TestNewerSourceRevisionWins: ONLY_IF_SOURCE_REVISION_NEWER keeps the
// highest revision whatever the order writes arrive in.
func TestNewerSourceRevisionWins(t *testing.T) {
	srv := redistest.StartStandalone(t)
	r := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), newClock(), nil).region(t, "items")
	ctx, key := ctxT(t), Parts("rev")
	newer := func(v string, rev uint64) RecordOutcome {
		o, err := r.Record(ctx, key, []byte(v), RecordMeta{Revision: SourceRevision(rev), Intent: OnlyIfSourceRevisionNewer})
		require.NoError(t, err)
		return o
	}
	assert.Equal(t, Recorded, newer("seven", 7))
	assert.Equal(t, NotRecordedCondition, newer("five", 5))
	assert.Equal(t, NotRecordedCondition, newer("seven-again", 7))
	assert.Equal(t, Recorded, newer("nine", 9))
	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []byte("nine"), lk.Value)
	_, err = r.Record(ctx, key, []byte("x"), RecordMeta{Intent: OnlyIfSourceRevisionNewer})
	assert.ErrorIs(t, err, ErrNoRevision)
}

// TestMissingGenerationIsNeverZero: a shard generation that vanished
// (evicted, deleted) is replaced by a new random one — never read as a
// default that would revive old entries — and the old entries stay
// unreachable.
func TestMissingGenerationIsNeverZero(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), newClock(), nil)
	r := in.region(t, "items")
	ctx, key := ctxT(t), Parts("gen")
	_, err := r.Record(ctx, key, []byte("v"), RecordMeta{})
	require.NoError(t, err)

	rg := in.c.state.Load().regions["items"]
	loc, err := in.c.locate(ctx, rg, key)
	require.NoError(t, err)
	anchor := rg.layout.AnchorOf(loc).Redis()
	old, err := srv.Admin().Get(ctx, anchor).Bytes()
	require.NoError(t, err)
	require.Len(t, old, generationBytes)
	require.NoError(t, srv.Admin().Del(ctx, anchor).Err())

	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind)
	assert.Equal(t, Invalidated, lk.MissReason)
	now, err := srv.Admin().Get(ctx, anchor).Bytes()
	require.NoError(t, err)
	assert.Len(t, now, generationBytes)
	assert.NotEqual(t, old, now)
	ttl, err := srv.Admin().PTTL(ctx, anchor).Result()
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), ttl, "a generation has no TTL")
}

// TestLargeValuesAndOversizedEntries: a value at the region's bound round
// trips; a stored value over the bound (another writer's) is typed
// IncompatibleSchema TOO_LARGE by its length — never loaded whole, never a
// miss — and a value over the bound is not recorded.
func TestLargeValuesAndOversizedEntries(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg := testConfig(t, func(d *policy.CacheRegionDecl, o *policy.CacheOps) {
		d.MaxBytes = policy.CacheMaxValueBytes - policy.CacheEnvelopeOverhead
		o.CompressAbove = 1 << 10
	})
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, cfg, newClock(), nil)
	r := in.region(t, "items")
	ctx := ctxT(t)
	big := make([]byte, cfg.Regions[0].MaxBytes)
	for i := range big {
		big[i] = byte(i * 7) // poorly compressible
	}
	o, err := r.Record(ctx, Parts("big"), big, RecordMeta{})
	require.NoError(t, err)
	require.Equal(t, Recorded, o)
	lk, err := r.Lookup(ctx, Parts("big"))
	require.NoError(t, err)
	require.Equal(t, Hit, lk.Kind)
	assert.Equal(t, big, lk.Value)

	o, err = r.Record(ctx, Parts("bigger"), append(big, 0), RecordMeta{})
	require.NoError(t, err)
	assert.Equal(t, NotRecordedProviderPolicy, o)

	// Compression: text that compresses within the ratio bound (32) is
	// stored compressed; a run of zeros would exceed it and is stored raw.
	var text []byte
	for i := 0; len(text) < 64<<10; i++ {
		text = fmt.Appendf(text, "item-%d,", i)
	}
	zeros := make([]byte, 64<<10)
	for _, v := range []struct {
		key        string
		value      []byte
		compressed bool
	}{{"text", text, true}, {"zeros", zeros, false}, {"big", big, false}} {
		_, err = r.Record(ctx, Parts(v.key), v.value, RecordMeta{})
		require.NoError(t, err)
		lk, err = r.Lookup(ctx, Parts(v.key))
		require.NoError(t, err)
		assert.Equal(t, v.value, lk.Value)
		assert.Equal(t, v.compressed, rawGet(t, in, "items", Parts(v.key)).Compressed, v.key)
	}

	rg := in.c.state.Load().regions["items"]
	loc, err := in.c.locate(ctx, rg, Parts("huge"))
	require.NoError(t, err)
	ref, err := in.c.currentRef(ctx, rg, loc)
	require.NoError(t, err)
	require.NoError(t, srv.Admin().Set(ctx, ref.entry.Redis(), make([]byte, 4<<20), time.Minute).Err())
	lk, err = r.Lookup(ctx, Parts("huge"))
	require.NoError(t, err)
	assert.Equal(t, IncompatibleSchema, lk.Kind)
	assert.Equal(t, TooLarge, lk.Schema)
}

// TestWriteCertaintyUnderFaults: a write whose reply is lost after it
// reached Redis is INDETERMINATE (and did apply), never "failed" and never
// sent twice; an invalidation (idempotent) is repeated once.
func TestWriteCertaintyUnderFaults(t *testing.T) {
	srv := redistest.StartStandalone(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	rt := newRuntimeTimeouts(t, &policy.Standalone{Endpoint: proxy.Addr()}, 300*time.Millisecond)
	dep, err := rt.Role(policy.RoleCache)
	require.NoError(t, err)
	c, err := New(context.Background(), dep, rt.Keys(), testConfig(t, nil), Options{Clock: newClock().Now})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	r, err := c.Region("items")
	require.NoError(t, err)
	ctx, key := ctxT(t), Parts("faults")
	o, err := r.Record(ctx, key, []byte("v1"), RecordMeta{})
	require.NoError(t, err)
	require.Equal(t, Recorded, o)

	calls := srv.CommandCalls(t, "evalsha")
	proxy.Stall()
	o, err = r.Record(ctx, key, []byte("v2"), RecordMeta{})
	require.NoError(t, err)
	assert.Equal(t, Indeterminate, o, "the reply was lost after the write left")
	assert.Equal(t, calls+1, srv.CommandCalls(t, "evalsha"), "no blind retry of a write")
	proxy.Passthrough()
	lk, err := r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []byte("v2"), lk.Value, "INDETERMINATE is not failed: it applied")

	// The timed-out connection was dropped; open a fresh one first so the
	// stall below holds a reply, not a connection handshake.
	_, err = r.Record(ctx, key, []byte("v3"), RecordMeta{})
	require.NoError(t, err)
	calls = srv.CommandCalls(t, "evalsha")
	proxy.Stall()
	io, err := r.Invalidate(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, InvalidationIndeterminate, io)
	// The repeat may not even reach Redis (its new connection's handshake
	// stalls too); either way the outcome stays INDETERMINATE.
	n := srv.CommandCalls(t, "evalsha")
	assert.True(t, n == calls+1 || n == calls+2, "an invalidation is sent once and repeated at most once (%d calls)", n-calls)
	proxy.Passthrough()
	lk, err = r.Lookup(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind)
	assert.Equal(t, Invalidated, lk.MissReason)
}
