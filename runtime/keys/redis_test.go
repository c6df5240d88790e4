package keys

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/runtime/internal/hashslot"
)

// TestClusterAgreesOnSlots checks, against a real Redis Cluster, that the
// slot the builder computes is the slot the server computes, and that a
// Group really is usable in one multi-key command (no CROSSSLOT) while
// unrelated resources are not forced into one slot.
func TestClusterAgreesOnSlots(t *testing.T) {
	cl := redistest.StartCluster(t).Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	b := newTestBuilder(t)
	r := rand.New(rand.NewPCG(5, 6))
	caps := Capabilities()
	for i := 0; i < 300; i++ {
		c := caps[r.IntN(len(caps))]
		kinds := c.Kinds()
		s := spec(c, kinds[r.IntN(len(kinds))], "")
		s.Parts = randParts(r, 4, 16)
		s.Opaque = i%5 == 0
		k, err := b.Build(s)
		require.NoError(t, err)
		slot, err := cl.ClusterKeySlot(ctx, k.Redis()).Result()
		require.NoError(t, err)
		require.Equal(t, int64(k.Slot()), slot, "CLUSTER KEYSLOT disagrees for %s", k)
	}

	// Golden vectors: the pinned slots are the server's slots too.
	g := readGolden(t)
	gb := goldenBuilder(t, g)
	for _, v := range g.Vectors {
		for _, k := range v.build(t, gb) {
			slot, err := cl.ClusterKeySlot(ctx, k.Redis()).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(v.Slot), slot, v.Name)
		}
	}

	groups := []struct {
		c     Capability
		kinds []string
	}{
		{CapIdem, []string{"record", "marker"}},
		{CapFence, []string{"owner", "counter"}},
		{CapRate, []string{"window", "dedup"}},
		{CapSession, []string{"session", "tombstone"}},
	}
	var firstKeys []string
	for i := 0; i < 40; i++ {
		tc := groups[i%len(groups)]
		s := spec(tc.c, "", "")
		s.Parts = randParts(r, 3, 16)
		ks, err := b.Group(s, tc.kinds...)
		require.NoError(t, err)
		wire := make([]string, len(ks))
		for j, k := range ks {
			wire[j] = k.Redis()
			slot, err := cl.ClusterKeySlot(ctx, k.Redis()).Result()
			require.NoError(t, err)
			require.Equal(t, int64(ks[0].Slot()), slot)
		}
		// A multi-key read across the group is accepted by the server:
		// it would fail with CROSSSLOT if the keys hashed apart.
		n, err := cl.Exists(ctx, wire...).Result()
		require.NoError(t, err)
		require.Zero(t, n)
		firstKeys = append(firstKeys, wire[0])
	}

	// Negative control: keys of unrelated resources do land in different
	// slots, and the server refuses them in one command.
	var a, other string
	for _, k := range firstKeys[1:] {
		if hashslot.Of(k) != hashslot.Of(firstKeys[0]) {
			a, other = firstKeys[0], k
			break
		}
	}
	require.NotEmpty(t, other, "40 random resources all hashed to one slot")
	err := cl.Do(ctx, "EXISTS", a, other).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CROSSSLOT")
}

// TestClusterShardedLayout checks on a real Cluster that an anchor and its
// members are usable in one multi-key command (so one program can read a
// shard's generation with an entry), and that a region's anchors spread
// over the primaries rather than one hot slot.
func TestClusterShardedLayout(t *testing.T) {
	c := redistest.StartCluster(t)
	cl := c.Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	p := cacheShards(t, newTestBuilder(t), "products", 16)
	r := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 40; i++ {
		loc, err := p.Locate(randParts(r, 3, 16))
		require.NoError(t, err)
		ks := members(t, p, loc, "0123456789abcdef")
		wire := []string{p.AnchorOf(loc).Redis()}
		for _, k := range ks {
			wire = append(wire, k.Redis())
		}
		for _, w := range wire {
			slot, err := cl.ClusterKeySlot(ctx, w).Result()
			require.NoError(t, err)
			require.Equal(t, int64(p.AnchorOf(loc).Slot()), slot)
		}
		n, err := cl.Exists(ctx, wire...).Result()
		require.NoError(t, err, "anchor and members must share a slot")
		require.Zero(t, n)
	}
	nodes := map[string]bool{}
	for i := 0; i < p.Shards(); i++ {
		addr, err := cl.MasterForKey(ctx, p.Anchor(i).Redis())
		require.NoError(t, err)
		nodes[addr.Options().Addr] = true
	}
	assert.Len(t, nodes, len(c.Primaries()), "16 shards of one region all on a subset of the primaries")
}
