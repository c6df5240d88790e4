package keys

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randParts returns 1..n parts of 0..maxLen bytes drawn from a tiny alphabet
// that includes separators and braces, so collisions would be likely if the
// encoding were a delimiter join.
func randParts(r *rand.Rand, n, maxLen int) [][]byte {
	alphabet := []byte("ab:{}|\x00")
	parts := make([][]byte, 1+r.IntN(n))
	for i := range parts {
		p := make([]byte, r.IntN(maxLen+1))
		for j := range p {
			p[j] = alphabet[r.IntN(len(alphabet))]
		}
		parts[i] = p
	}
	return parts
}

func partsEqual(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestNoAmbiguityKnownPairs(t *testing.T) {
	b := newTestBuilder(t)
	pairs := [][2][]string{
		{{"ab", "c"}, {"a", "bc"}},
		{{"a:b"}, {"a", "b"}},
		{{"a", ""}, {"a"}},
		{{"", "a"}, {"a"}},
		{{""}, {"", ""}},
		{{"\x00\x00\x00\x01a"}, {"a"}},                       // a part that looks like a length prefix
		{{"a", "\x00\x00\x00\x01b"}, {"a\x00\x00\x00\x01b"}}, // shifting a prefix between parts
		{{"tenant|user"}, {"tenant", "user"}},
		// Same part count, delimiter moved across the boundary: defeats any
		// delimiter join, whatever the delimiter.
		{{"a|", "b"}, {"a", "|b"}},
		{{"a:", "b"}, {"a", ":b"}},
		{{"a\x00", "b"}, {"a", "\x00b"}},
	}
	for _, p := range pairs {
		for _, opaque := range []bool{false, true} {
			s1, s2 := spec(CapRate, "bucket", p[0]...), spec(CapRate, "bucket", p[1]...)
			s1.Opaque, s2.Opaque = opaque, opaque
			k1, err := b.Build(s1)
			require.NoError(t, err)
			k2, err := b.Build(s2)
			require.NoError(t, err)
			assert.NotEqual(t, k1.Redis(), k2.Redis(), "%q vs %q (opaque=%v)", p[0], p[1], opaque)
		}
	}

	// Fields are separated too: region, capability, kind group and key
	// version all change the digest.
	base := spec(CapCache, "entry", "x")
	kb, _ := b.Build(base)
	digestOf := func(k Key) string { seg, err := parseKey(k.Redis()); require.NoError(t, err); return seg.Digest }
	variants := []Spec{
		func() Spec { s := base; s.Region = "region-2"; return s }(),
		func() Spec { s := base; s.KeyVersion = 2; return s }(),
		func() Spec { s := base; s.Kind = "generation"; return s }(),
		func() Spec { s := base; s.Capability = CapGen; s.Kind = "generation"; return s }(),
	}
	for _, v := range variants {
		kv, err := b.Build(v)
		require.NoError(t, err)
		assert.NotEqual(t, digestOf(kb), digestOf(kv), "%+v", v)
	}
}

func TestPropertyNoAmbiguityAndDeterminism(t *testing.T) {
	b := newTestBuilder(t)
	r := rand.New(rand.NewPCG(1, 2)) // seeded: failures reproduce
	seen := map[string][][]byte{}
	for i := 0; i < 10000; i++ {
		parts := randParts(r, 4, 4)
		s := spec(CapRate, "bucket", "")
		s.Parts = parts
		k, err := b.Build(s)
		if err != nil {
			t.Fatal(err)
		}
		// Plain checks (not testify) in the hot loop keep -race runs fast;
		// the full structural check runs on a sample.
		if i%100 == 0 {
			requireWellFormed(t, b, s, k)
		}

		// Determinism: rebuilding from copies yields the same key.
		cp := make([][]byte, len(parts))
		for j, p := range parts {
			cp[j] = bytes.Clone(p)
		}
		s.Parts = cp
		again, err := b.Build(s)
		if err != nil || again != k {
			t.Fatalf("not deterministic for %q: %v", parts, err)
		}

		if prev, ok := seen[k.Redis()]; ok && !partsEqual(prev, parts) {
			t.Fatalf("collision: %q vs %q", prev, parts)
		}
		seen[k.Redis()] = parts
	}
	// The small alphabet guarantees many repeated inputs, so the map is
	// checking real equal/unequal pairs, not just distinct random strings.
	assert.Less(t, len(seen), 10000)
	assert.Greater(t, len(seen), 2500)
}

func TestPropertyVersionSeparationAndGroups(t *testing.T) {
	b := newTestBuilder(t)
	r := rand.New(rand.NewPCG(3, 4))
	slots := map[uint16]bool{}
	for i := 0; i < 2000; i++ {
		s := spec(CapIdem, "", "")
		s.Parts = randParts(r, 3, 12)
		g2, err := b.Group(s, "record", "marker")
		require.NoError(t, err)
		g1, err := b.GroupWith(s, 1, "record", "marker")
		require.NoError(t, err)
		for _, g := range [][]Key{g1, g2} {
			require.Equal(t, g[0].Slot(), g[1].Slot())
			if i%20 == 0 {
				s0, s1 := requireWellFormed(t, b, s, g[0]), requireWellFormed(t, b, s, g[1])
				require.Equal(t, s0.Tag, s1.Tag)
			}
		}
		require.NotEqual(t, g1[0].Redis(), g2[0].Redis(), "hv1 and hv2 keys differ")
		slots[g2[0].Slot()] = true
	}
	// Slot tags come from the resource digest, so resources spread over the
	// cluster rather than piling onto one hot slot.
	assert.Greater(t, len(slots), 1500)
}

// TestConcurrentBuild exercises the pooled HMAC states from many goroutines
// (run with -race): results must equal the sequential ones.
func TestConcurrentBuild(t *testing.T) {
	b := newTestBuilder(t)
	r := rand.New(rand.NewPCG(7, 8))
	specs := make([]Spec, 200)
	want := make([]Key, len(specs))
	for i := range specs {
		specs[i] = spec(CapRate, "bucket", "")
		specs[i].Parts = randParts(r, 4, 32)
		var err error
		want[i], err = b.BuildWith(specs[i], 1+i%2)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 5; n++ {
				for i, s := range specs {
					k, err := b.BuildWith(s, 1+i%2)
					if err != nil || k != want[i] {
						errs <- fmt.Sprintf("spec %d: %v", i, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
