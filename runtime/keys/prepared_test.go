package keys

import (
	"bytes"
	"math/rand/v2"
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

// One allocation per build (the text of all keys), however many kinds
// (exact without the race detector, which empties pools at random).
func TestPreparedAllocatesOnce(t *testing.T) {
	b := newTestBuilder(t)
	p, err := b.Prepare(Spec{Capability: CapRate, Region: "api--r1", KeyVersion: 2}, "bucket", "dedup")
	require.NoError(t, err)
	parts := [][]byte{[]byte("tenant"), []byte("t-42")}
	var buf [2]Key
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := p.AppendKeys(buf[:0], parts); err != nil {
			t.Fatal(err)
		}
	})
	if raceEnabled {
		assert.LessOrEqual(t, allocs, 4.0)
		return
	}
	assert.Equal(t, 1.0, allocs)
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
				parts := [][]byte{[]byte("tenant"), []byte{byte(w), byte(i)}}
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
