package keys

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A prepared shape renders exactly the keys Group (or Build, for one kind)
// renders for the same spec and parts: same text, slot and kind, for keyed
// and opaque specs, single kinds and co-location groups.
func TestPreparedMatchesGroupAndBuild(t *testing.T) {
	b := newTestBuilder(t)
	r := rand.New(rand.NewPCG(3, 4))
	shapes := []struct {
		s     Spec
		kinds []string
	}{
		{Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2}, []string{"bucket"}},
		{Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 1}, []string{"bucket", "dedup"}},
		{Spec{Capability: CapRate, Region: "login--r7", KeyVersion: 2}, []string{"window", "dedup"}},
		{Spec{Capability: CapIdem, Region: "create-worklog", KeyVersion: 2}, []string{"record", "marker"}},
		{Spec{Capability: CapCache, Region: "region-1", KeyVersion: 1, Opaque: true}, []string{"entry"}},
	}
	for _, sh := range shapes {
		p, err := b.Prepare(sh.s, sh.kinds...)
		require.NoError(t, err)
		assert.Equal(t, sh.kinds, p.Kinds())
		for range 200 {
			parts := randParts(r, 4, 12)
			s := sh.s
			s.Parts = parts
			var want []Key
			if len(sh.kinds) == 1 {
				s.Kind = sh.kinds[0]
				k, err := b.Build(s)
				require.NoError(t, err)
				want = []Key{k}
			} else {
				want, err = b.Group(s, sh.kinds...)
				require.NoError(t, err)
			}
			var buf [2]Key
			got, err := p.AppendKeys(buf[:0], parts)
			require.NoError(t, err)
			assert.Equal(t, want, got, "%v %q", sh.kinds, parts)
		}
	}
}

// The prepared keys are the golden keys: the key format is pinned for this
// path too, not only through Build/Group.
func TestPreparedGoldenVectors(t *testing.T) {
	g := readGolden(t)
	b := goldenBuilder(t, g)
	n := 0
	for _, v := range g.Vectors {
		if v.HashVersion != g.Write && !v.Opaque {
			continue // Prepare renders under the write version only
		}
		s := v.spec(t)
		p, err := b.Prepare(s, v.Kinds...)
		require.NoError(t, err, v.Name)
		ks, err := p.AppendKeys(nil, s.Parts)
		require.NoError(t, err, v.Name)
		require.Len(t, ks, len(v.Keys), v.Name)
		for j, k := range ks {
			assert.Equal(t, v.Keys[j], k.Redis(), v.Name)
			assert.Equal(t, v.Slot, k.Slot(), v.Name)
		}
		n++
	}
	assert.Positive(t, n)
}

func TestPrepareValidates(t *testing.T) {
	b := newTestBuilder(t)
	ok := Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 1}
	bad := map[string]struct {
		s     Spec
		kinds []string
	}{
		"no kind":         {ok, nil},
		"unknown kind":    {ok, []string{"entry"}},
		"duplicate kind":  {ok, []string{"bucket", "bucket"}},
		"bad region":      {Spec{Capability: CapRate, Region: "Bad Region", KeyVersion: 1}, []string{"bucket"}},
		"bad key version": {Spec{Capability: CapRate, Region: "api", KeyVersion: 0}, []string{"bucket"}},
		"bad capability":  {Spec{Capability: "nope", Region: "api", KeyVersion: 1}, []string{"bucket"}},
		"too long":        {Spec{Capability: CapRate, Region: strings.Repeat("r", MaxRegionSlug), KeyVersion: 1}, []string{"bucket", "dedup"}},
	}
	small, err := NewBuilder(Config{App: "a", Env: "b", Material: testConfig().Material, MaxKeyBytes: MinMaxKeyBytes})
	require.NoError(t, err)
	for name, c := range bad {
		bl := b
		if name == "too long" {
			bl = small
		}
		_, err := bl.Prepare(c.s, c.kinds...)
		assert.ErrorIs(t, err, ErrInvalidSpec, name)
	}

	p, err := b.Prepare(ok, "bucket", "dedup")
	require.NoError(t, err)
	secret := []byte("personal-subject-value")
	for name, parts := range map[string][][]byte{
		"no parts":       nil,
		"too many parts": bytes.Fields(bytes.Repeat([]byte("x "), MaxParts+1)),
		"part too long":  {secret, bytes.Repeat([]byte{'x'}, MaxPartBytes+1)},
	} {
		dst := []Key{{s: "kept"}}
		out, err := p.AppendKeys(dst, parts)
		require.ErrorIs(t, err, ErrInvalidSpec, name)
		assert.Equal(t, dst, out, "%s: dst unchanged on error", name)
		assert.NotContains(t, err.Error(), string(secret), "errors never quote parts")
	}
}

// A new build allocates its key text and its memo entry; a remembered one
// allocates nothing (exact without the race detector, which empties pools
// at random).
func TestPreparedAllocations(t *testing.T) {
	b := newTestBuilder(t)
	p, err := b.Prepare(Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2}, "bucket", "dedup")
	require.NoError(t, err)
	var buf [2]Key
	fresh := make([][][]byte, 202) // AllocsPerRun makes one warm-up call
	for i := range fresh {
		fresh[i] = [][]byte{[]byte("tenant"), []byte(strconv.Itoa(i))}
	}
	n := 0
	miss := testing.AllocsPerRun(200, func() {
		n++
		if _, err := p.AppendKeys(buf[:0], fresh[n]); err != nil {
			t.Fatal(err)
		}
	})
	parts := [][]byte{[]byte("tenant"), []byte("t-42")}
	hit := testing.AllocsPerRun(200, func() {
		if _, err := p.AppendKeys(buf[:0], parts); err != nil {
			t.Fatal(err)
		}
	})
	if raceEnabled {
		assert.LessOrEqual(t, miss, 6.0)
		assert.LessOrEqual(t, hit, 2.0)
		return
	}
	assert.Equal(t, 2.0, miss, "key text and memo entry")
	assert.Equal(t, 0.0, hit)
}

// The memo never changes what a build returns: many more distinct subjects
// than slots (so slots are overwritten and shared), each built twice, all
// equal to Group; the memo stays within its slots and holds no part bytes.
func TestPreparedMemo(t *testing.T) {
	b := newTestBuilder(t)
	s := Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2}
	p, err := b.Prepare(s, "bucket", "dedup")
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(5, 6))
	subjects := make([][][]byte, 4*p.memo.builds.Size())
	for i := range subjects {
		subjects[i] = [][]byte{[]byte("tenant"), []byte("personal-" + strconv.Itoa(i))}
	}
	for range 3 * len(subjects) {
		parts := subjects[r.IntN(len(subjects))]
		got, err := p.AppendKeys(nil, parts)
		require.NoError(t, err)
		s.Parts = parts
		want, err := b.Group(s, "bucket", "dedup")
		require.NoError(t, err)
		require.Equal(t, want, got, "%q", parts)
	}
	used, slots := 0, p.memo.builds.Size()
	p.memo.builds.Range(func(e memoEntry) bool {
		used++
		assert.NotContains(t, e.all, "personal-")
		return true
	})
	assert.Equal(t, 512, slots)
	assert.LessOrEqual(t, used, slots)
	assert.Greater(t, used, slots*3/4, "a working set larger than the memo fills most slots")
}

// A working set well below the memo's size stays remembered: with two
// candidate slots per subject, 64 recurring subjects nearly always all hit
// (a simulation of this policy leaves one or two out in 0.7% of seeds),
// where a direct-mapped memo would lose about one in nine to shared slots
// (about 150 of the 1280 checked here).
func TestPreparedMemoKeepsSmallWorkingSet(t *testing.T) {
	b := newTestBuilder(t)
	missing := 0
	for seed := range 20 { // fresh hash seeds each round
		p, err := b.Prepare(Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2}, "bucket")
		require.NoError(t, err)
		subjects := make([][][]byte, 64)
		for i := range subjects {
			subjects[i] = [][]byte{[]byte("tenant"), []byte("t-" + strconv.Itoa(seed*100+i))}
		}
		for range 4 {
			for _, parts := range subjects {
				_, err := p.AppendKeys(nil, parts)
				require.NoError(t, err)
			}
		}
		for _, parts := range subjects {
			h1, h2, ok := p.memo.hash(parts)
			require.True(t, ok)
			if _, ok := p.memo.builds.Lookup(h1, h2); !ok {
				missing++
			}
		}
	}
	assert.LessOrEqual(t, missing, 8, "of 20×64 recurring subjects")
}

// A hit needs both hashes: an entry matching only the slot hash is a miss,
// answered by a fresh digest (and replaced).
func TestPreparedMemoNeedsBothHashes(t *testing.T) {
	b := newTestBuilder(t)
	s := Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2, Kind: "bucket"}
	p, err := b.Prepare(s, "bucket")
	require.NoError(t, err)
	parts := [][]byte{[]byte("tenant"), []byte("t-1")}
	h1, h2, ok := p.memo.hash(parts)
	require.True(t, ok)
	bogus := mustBuild(t, b, s, [][]byte{[]byte("tenant"), []byte("t-2")}).Redis()
	p.memo.builds.Store(h1, h2^1, memoEntry{all: bogus})
	p.memo.builds.Store(h1^1, h2, memoEntry{all: bogus})
	got, err := p.AppendKeys(nil, parts)
	require.NoError(t, err)
	assert.Equal(t, mustBuild(t, b, s, parts), got[0])

	// Parts too large to remember are digested every time, never stored.
	big := [][]byte{[]byte("tenant"), bytes.Repeat([]byte{'x'}, memoMaxInput)}
	_, _, ok = p.memo.hash(big)
	assert.False(t, ok)
	got, err = p.AppendKeys(nil, big)
	require.NoError(t, err)
	assert.Equal(t, mustBuild(t, b, s, big), got[0])
}

func mustBuild(t *testing.T, b *Builder, s Spec, parts [][]byte) Key {
	t.Helper()
	s.Parts = parts
	k, err := b.Build(s)
	require.NoError(t, err)
	return k
}

func TestPreparedConcurrent(t *testing.T) {
	b := newTestBuilder(t)
	p, err := b.Prepare(Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2}, "bucket", "dedup")
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				// Workers share subjects, so memo hits, misses and slot
				// overwrites race with each other.
				parts := [][]byte{[]byte("tenant"), []byte{byte((w + i) % 3), byte(i % 40)}}
				got, err := p.AppendKeys(nil, parts)
				if !assert.NoError(t, err) {
					return
				}
				want, err := b.Group(Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2, Parts: parts}, "bucket", "dedup")
				if !assert.NoError(t, err) || !assert.Equal(t, want, got) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkPrepared(b *testing.B) {
	bl := newTestBuilder(b)
	p, err := bl.Prepare(Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2}, "bucket")
	require.NoError(b, err)
	parts := [][]byte{[]byte("tenant"), []byte("tenant-1")}
	var buf [1]Key
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.AppendKeys(buf[:0], parts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPreparedMiss builds a new subject every time: the HMAC path plus
// the memo's hashing and its entry.
func BenchmarkPreparedMiss(b *testing.B) {
	bl := newTestBuilder(b)
	p, err := bl.Prepare(Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2}, "bucket")
	require.NoError(b, err)
	parts := [][]byte{[]byte("tenant"), []byte("tenant-00000000")}
	var buf [1]Key
	n := uint32(0)
	b.ReportAllocs()
	for b.Loop() {
		n++
		binary.BigEndian.PutUint32(parts[1][7:], n)
		if _, err := p.AppendKeys(buf[:0], parts); err != nil {
			b.Fatal(err)
		}
	}
}
