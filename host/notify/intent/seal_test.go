package intent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/notify/seal"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

func sealRing(t testing.TB, write int, versions ...int) *seal.Ring {
	t.Helper()
	vs := map[int]policy.Secret{}
	for _, v := range versions {
		vs[v] = policy.NewSecret(bytes.Repeat([]byte{byte(v)}, 32))
	}
	r, err := seal.New(seal.Config{WriteVersion: write, Versions: vs})
	require.NoError(t, err)
	return r
}

// redisBytes returns every byte Redis holds under any key: stream entries
// (fields and values) and hash fields and values, concatenated.
func redisBytes(t *testing.T, srv *redistest.Server) []byte {
	t.Helper()
	ctx := ctxT(t)
	c := srv.Admin()
	keys, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	var all bytes.Buffer
	for _, k := range keys {
		switch typ := c.Type(ctx, k).Val(); typ {
		case "stream":
			es, err := c.XRange(ctx, k, "-", "+").Result()
			require.NoError(t, err)
			for _, e := range es {
				for f, v := range e.Values {
					all.WriteString(f)
					all.WriteString(v.(string))
				}
			}
		case "hash":
			for f, v := range c.HGetAll(ctx, k).Val() {
				all.WriteString(f + v)
			}
		case "string":
			all.WriteString(c.Get(ctx, k).Val())
		default:
			t.Fatalf("unexpected key type %s at %s", typ, k)
		}
	}
	return all.Bytes()
}

// TestSealedPlansAtRest: with a seal ring, nothing Redis holds — the
// stream entry, the record, its plan digest — contains the recipient, the
// content or the plain digest of the plan, and the plan is delivered as
// it was submitted. A repeat is still a duplicate (the keyed digest is
// stable) and another plan still a conflict.
func TestSealedPlansAtRest(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{Shards: 1, Seal: sealRing(t, 1, 1)})
	ctx := ctxT(t)
	plan := testPlan(t, "Zq7secret")
	sub, err := s.Submit(ctx, []byte("k"), plan)
	require.NoError(t, err)
	require.False(t, sub.Duplicate)

	enc, err := plan.MarshalBinary()
	require.NoError(t, err)
	plainSum := sha256.Sum256(enc)
	stored := redisBytes(t, srv)
	for _, leak := range [][]byte{[]byte("Zq7secret"), []byte("alice"), []byte("CNIP"), []byte(hex.EncodeToString(plainSum[:]))} {
		assert.False(t, bytes.Contains(stored, leak), "Redis holds %q in plain text", leak)
	}

	again, err := s.Submit(ctx, []byte("k"), plan)
	require.NoError(t, err)
	assert.True(t, again.Duplicate)
	assert.False(t, again.OtherPlan)
	other, err := s.Submit(ctx, []byte("k"), testPlan(t, "other"))
	require.NoError(t, err)
	assert.True(t, other.OtherPlan)
	fp := sha256.Sum256([]byte("request"))
	_, err = s.SubmitRequest(ctx, []byte("r"), plan, fp)
	require.NoError(t, err)
	found, ok, err := s.Existing(ctx, []byte("r"), fp)
	require.NoError(t, err)
	require.True(t, ok)
	assert.False(t, found.OtherPlan, "Existing compares the keyed fingerprint")
	assert.False(t, bytes.Contains(redisBytes(t, srv), []byte(hex.EncodeToString(fp[:]))), "the fingerprint is keyed too")

	_, err = s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	ds, err := s.Read(ctx, 0, "c1", 10, 0)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	for _, d := range ds {
		require.NoError(t, d.Err)
	}
	got, err := ds[0].Plan.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, enc, got, "the plan delivered is the plan submitted")
}

// TestSealedPlanMovedToAnotherEntryIsCorrupt: a sealed plan copied into
// an entry of another intent (by anything that can write the stream) does
// not open there; the consumer gets ErrCorruptPlan, to quarantine.
func TestSealedPlanMovedToAnotherEntryIsCorrupt(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{Shards: 1, Seal: sealRing(t, 1, 1)})
	ctx := ctxT(t)
	a, err := s.Submit(ctx, []byte("a"), testPlan(t, "a"))
	require.NoError(t, err)
	b, err := s.Submit(ctx, []byte("b"), testPlan(t, "b"))
	require.NoError(t, err)
	stream, _, err := s.StreamKeys(0)
	require.NoError(t, err)
	es, err := srv.Admin().XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, string(a.ID), es[0].Values["i"])
	// b's id with a's sealed plan.
	require.NoError(t, srv.Admin().XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"i", string(b.ID), "p", es[0].Values["p"]}}).Err())

	_, err = s.EnsureGroup(ctx, 0)
	require.NoError(t, err)
	ds, err := s.Read(ctx, 0, "c1", 10, 0)
	require.NoError(t, err)
	require.Len(t, ds, 3)
	require.NoError(t, ds[0].Err)
	require.NoError(t, ds[1].Err)
	require.ErrorIs(t, ds[2].Err, ErrCorruptPlan)
	require.ErrorIs(t, ds[2].Err, seal.ErrCorrupt)
	assert.NotContains(t, ds[2].Err.Error(), "alice")
}

// TestSealRotation: the documented rotation order. Readers first learn
// version 2 while still writing 1; then writing switches to 2; entries
// of both versions deliver. A reader that never learnt version 2 cannot
// open the new entries and reports ErrPlanKeyUnavailable (the entry
// waits for another consumer), not corruption; a reader without a ring
// says the same of any sealed entry.
func TestSealRotation(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := ctxT(t)
	v1 := standaloneStore(t, srv.Addr(), Config{Shards: 1, Seal: sealRing(t, 1, 1)})
	_, err := v1.Submit(ctx, []byte("old"), testPlan(t, "old"))
	require.NoError(t, err)
	v2 := standaloneStore(t, srv.Addr(), Config{Shards: 1, Seal: sealRing(t, 2, 1, 2)})
	_, err = v2.Submit(ctx, []byte("new"), testPlan(t, "new"))
	require.NoError(t, err)

	read := func(s *Store, consumer string) []Delivery {
		t.Helper()
		_, err := s.EnsureGroup(ctx, 0)
		require.NoError(t, err)
		// A fresh group per reader: each reads both entries.
		stream, _, err := s.StreamKeys(0)
		require.NoError(t, err)
		require.NoError(t, srv.Admin().XGroupSetID(ctx, stream, s.Group(), "0").Err())
		ds, err := s.Read(ctx, 0, consumer, 10, 0)
		require.NoError(t, err)
		require.Len(t, ds, 2)
		return ds
	}
	ds := read(v2, "rotated")
	require.NoError(t, ds[0].Err)
	require.NoError(t, ds[1].Err)

	ds = read(v1, "stale")
	require.NoError(t, ds[0].Err)
	require.ErrorIs(t, ds[1].Err, ErrPlanKeyUnavailable)
	require.ErrorIs(t, ds[1].Err, seal.ErrUnknownVersion)
	require.NotErrorIs(t, ds[1].Err, ErrCorruptPlan)

	plain := standaloneStore(t, srv.Addr(), Config{Shards: 1})
	ds = read(plain, "no-ring")
	require.ErrorIs(t, ds[0].Err, ErrPlanKeyUnavailable)
	require.ErrorIs(t, ds[1].Err, ErrPlanKeyUnavailable)
}

// TestPlaintextPlansUnderASealRing: plans stored before encryption was
// turned on are refused by a store with a ring (an unsealed entry is what
// a hand-made XADD looks like), unless AcceptPlaintext lets them through
// for the roll-out.
func TestPlaintextPlansUnderASealRing(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := ctxT(t)
	plain := standaloneStore(t, srv.Addr(), Config{Shards: 1})
	_, err := plain.Submit(ctx, []byte("before"), testPlan(t, "before"))
	require.NoError(t, err)

	for _, c := range []struct {
		accept bool
		want   error
	}{{false, ErrCorruptPlan}, {true, nil}} {
		s := standaloneStore(t, srv.Addr(), Config{Shards: 1, Seal: sealRing(t, 1, 1), AcceptPlaintext: c.accept})
		_, err := s.EnsureGroup(ctx, 0)
		require.NoError(t, err)
		stream, _, err := s.StreamKeys(0)
		require.NoError(t, err)
		require.NoError(t, srv.Admin().XGroupSetID(ctx, stream, s.Group(), "0").Err())
		ds, err := s.Read(ctx, 0, "c", 10, 0)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		if c.want == nil {
			require.NoError(t, ds[0].Err)
		} else {
			require.ErrorIs(t, ds[0].Err, c.want)
		}
	}

	_, err = New(newRuntime(t, runtimeConfig(&policy.Standalone{Endpoint: srv.Addr()})), Config{AcceptPlaintext: true})
	require.ErrorIs(t, err, ErrInvalidConfig, "accept-plaintext without a ring does nothing")
}
