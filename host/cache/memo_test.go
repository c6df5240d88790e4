package cache

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestKeyMemoEncodingIsInjective: keys that differ in kind, in how their
// bytes split into parts, or in an attribute's name and value never share
// memo hashes.
func TestKeyMemoEncodingIsInjective(t *testing.T) {
	m := newKeyMemo()
	keys := []Key{
		Parts("ab", "c"), Parts("a", "bc"), Parts("abc"), Parts("abc", ""), Parts("", "abc"),
		Attrs(Attr{Name: "ab", Value: "c"}), Attrs(Attr{Name: "a", Value: "bc"}),
		Attrs(Attr{Name: "a", Value: "b"}, Attr{Name: "c", Value: "d"}), Attrs(Attr{Name: "c", Value: "d"}, Attr{Name: "a", Value: "b"}),
		Parts("a", "b", "c", "d"),
	}
	seen := map[[2]uint64]int{}
	for i, k := range keys {
		h1, h2, ok := m.hash(k)
		require.True(t, ok)
		if j, dup := seen[[2]uint64{h1, h2}]; dup {
			t.Fatalf("keys %d and %d share memo hashes", j, i)
		}
		seen[[2]uint64{h1, h2}] = i
		again1, again2, _ := m.hash(k)
		assert.Equal(t, [2]uint64{h1, h2}, [2]uint64{again1, again2}, "a key hashes alike every time")
	}
	_, _, ok := m.hash(Parts(strings.Repeat("x", memoMaxInput)))
	assert.False(t, ok, "a key longer than the memo's input bound is not remembered")
	h1, h2, _ := newKeyMemo().hash(keys[0])
	first1, first2, _ := m.hash(keys[0])
	assert.NotEqual(t, [2]uint64{first1, first2}, [2]uint64{h1, h2}, "every memo has its own seeds")
}

// TestKeyMemoAnswersLikeTheKeyBuilder: a lookup through the memo finds the
// same entry keys as a fresh region for many keys (far more than the memo
// holds, so slots are replaced), under two generations; an invalid key is
// refused every time, never remembered.
func TestKeyMemoAnswersLikeTheKeyBuilder(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), newClock(), nil)
	rg := in.c.state.Load().regions["items"]
	ctx := ctxT(t)
	fresh := func() *region {
		r := *rg
		r.memo = newKeyMemo()
		return &r
	}
	gens := [][]byte{[]byte("0123456789abcdef"), []byte("fedcba9876543210")}
	for round := range 3 {
		for i := range 3 << memoBits {
			key := Parts("sku", strings.Repeat("k", i%7), string(rune('a'+i%26)), strings.Repeat("z", i%600)) // some beyond memoMaxInput
			loc, err := in.c.locate(ctx, rg, key)
			require.NoError(t, err)
			want, err := in.c.locate(ctx, fresh(), key)
			require.NoError(t, err)
			require.Equal(t, want.Digest(), loc.Digest(), "round %d key %d", round, i)
			gen := gens[(i+round)%2]
			ref, err := rg.members(loc, gen)
			require.NoError(t, err)
			wantRef, err := fresh().members(want, gen)
			require.NoError(t, err)
			require.Equal(t, wantRef.entry.Redis(), ref.entry.Redis())
			require.Equal(t, wantRef.lease.Redis(), ref.lease.Redis())
		}
	}
	for range 2 {
		for _, bad := range []Key{Parts(), Attrs(Attr{Name: "a", Value: "b"})} {
			_, err := in.c.locate(ctx, rg, bad)
			require.ErrorIs(t, err, ErrInvalidKey)
		}
	}
}
