package keys

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/internal/hashslot"
)

func cacheShards(t testing.TB, b *Builder, region string, n int) *Sharded {
	t.Helper()
	p, err := b.PrepareSharded(ShardSpec{Capability: CapCache, Region: region, KeyVersion: 1, Shards: n,
		AnchorKind: "generation", MemberKinds: []string{"entry", "refresh-lease"}})
	require.NoError(t, err)
	return p
}

func members(t testing.TB, p *Sharded, loc Location, scope string) []Key {
	t.Helper()
	ks, err := p.AppendMembers(nil, loc, []byte(scope))
	require.NoError(t, err)
	return ks
}

// TestShardedLayout checks the layout's invariants on many random
// resources: every member carries its anchor's one hash tag (so the slot
// Redis computes from the text is the anchor's), the key has the documented
// shape, locating is deterministic, and the anchor is an opaque (hv0) key
// that does not depend on the member's parts.
func TestShardedLayout(t *testing.T) {
	b := newTestBuilder(t)
	p := cacheShards(t, b, "products", 16)
	require.Equal(t, 16, p.Shards())
	require.Equal(t, []string{"entry", "refresh-lease"}, p.MemberKinds())
	for i := 0; i < p.Shards(); i++ {
		a := p.Anchor(i)
		seg := requireWellFormed(t, b, Spec{Capability: CapCache, Region: "products", KeyVersion: 1}, a)
		assert.Equal(t, OpaqueHashVersion, seg.HashVersion)
		assert.Equal(t, "generation", seg.Kind)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		parts := randParts(r, 4, 24)
		loc, err := p.Locate(parts)
		require.NoError(t, err)
		again, err := p.Locate(parts)
		require.NoError(t, err)
		require.Equal(t, loc, again)
		require.Less(t, loc.Shard(), 16)
		anchor := p.AnchorOf(loc)
		require.Equal(t, p.Anchor(loc.Shard()), anchor)
		ks := members(t, p, loc, "gen-0123456789ab")
		require.Len(t, ks, 2)
		for j, k := range ks {
			s := k.Redis()
			require.Equal(t, []string{"entry", "refresh-lease"}[j], k.Kind())
			require.Equal(t, 1, strings.Count(s, "{"))
			require.Equal(t, 1, strings.Count(s, "}"))
			require.True(t, strings.HasPrefix(s, b.Namespace()+"cache:products:hv2:kv1:{"))
			require.Equal(t, hashslot.Tag(anchor.Redis()), hashslot.Tag(s), "member outside its anchor's tag")
			require.Equal(t, anchor.Slot(), k.Slot())
			require.Equal(t, hashslot.Of(s), k.Slot())
			require.LessOrEqual(t, len(s), b.MaxKeyBytes())
			f := strings.Split(s, ":")
			require.Len(t, f, 10)
			require.Regexp(t, `^[0-9a-f]{64}$`, f[8])
		}
		// Both member kinds share one digest: only the kind differs.
		require.Equal(t, strings.TrimSuffix(ks[0].Redis(), ":entry"), strings.TrimSuffix(ks[1].Redis(), ":refresh-lease"))
	}
}

// TestShardedScopesAndLocationsSeparate checks that a scope change (a
// generation swap) moves every member, that two resources never share a
// member, and that a location travels between instances by its digest.
func TestShardedScopesAndLocationsSeparate(t *testing.T) {
	b := newTestBuilder(t)
	p := cacheShards(t, b, "products", 8)
	seen := map[string]string{}
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		parts := randParts(r, 3, 12)
		loc, err := p.Locate(parts)
		require.NoError(t, err)
		for _, scope := range []string{"g1", "g2", "g1\x00"} {
			for _, k := range members(t, p, loc, scope) {
				dg := loc.Digest()
				id := hex.EncodeToString(dg[:]) + "/" + scope
				if prev, dup := seen[k.Redis()]; dup {
					require.Equal(t, prev, id, "two resources or scopes share a member key")
				}
				seen[k.Redis()] = id
			}
		}
		// Another instance with the same material rebuilds the same keys
		// from the digest alone.
		other := cacheShards(t, newTestBuilder(t), "products", 8)
		moved := other.LocationOf(loc.Digest())
		require.Equal(t, loc.Shard(), moved.Shard())
		require.Equal(t, members(t, p, loc, "g1")[0].Redis(), members(t, other, moved, "g1")[0].Redis())
	}
}

// TestShardedLocateMatchesSpecification recomputes a location and a member
// key by hand from the documented encodings, independently of the
// implementation.
func TestShardedLocateMatchesSpecification(t *testing.T) {
	secret := bytes.Repeat([]byte{0x42}, 32)
	b, err := NewBuilder(Config{App: "app", Env: "dev", Material: policy.KeyMaterial{WriteVersion: 3, Versions: map[int]policy.Secret{3: policy.NewSecret(secret)}}})
	require.NoError(t, err)
	p := cacheShards(t, b, "products", 16)
	loc, err := p.Locate([][]byte{[]byte("sku-42"), []byte("en")})
	require.NoError(t, err)

	var canonical []byte
	field := func(v []byte) {
		canonical = binary.BigEndian.AppendUint32(canonical, uint32(len(v)))
		canonical = append(canonical, v...)
	}
	for _, f := range []string{"caphost/keys/digest/v1", "app", "dev", "cache", "products", "entry"} {
		field([]byte(f))
	}
	field([]byte{0, 0, 0, 1}) // key version
	field([]byte{0, 0, 0, 2}) // part count
	field([]byte("sku-42"))
	field([]byte("en"))
	m := hmac.New(sha256.New, secret)
	m.Write(canonical)
	d := m.Sum(nil)
	got := loc.Digest()
	require.Equal(t, d, got[:])
	require.Equal(t, int(binary.BigEndian.Uint64(d[:8])%16), loc.Shard())

	// The anchor is Build of the shard index under the opaque profile.
	anchor, err := b.Build(Spec{Capability: CapCache, Region: "products", KeyVersion: 1, Kind: "generation",
		Parts: [][]byte{{0, byte(loc.Shard())}}, Opaque: true})
	require.NoError(t, err)
	require.Equal(t, anchor, p.AnchorOf(loc))

	var in []byte
	in = binary.BigEndian.AppendUint32(in, uint32(len("caphost/keys/sharded-member/v1")))
	in = append(in, "caphost/keys/sharded-member/v1"...)
	in = binary.BigEndian.AppendUint32(in, 32)
	in = append(in, d...)
	in = binary.BigEndian.AppendUint32(in, 4)
	in = append(in, "gen1"...)
	sum := sha256.Sum256(in)
	tag := hashslot.Tag(anchor.Redis())
	want := "ca:app:dev:cache:products:hv3:kv1:{" + tag + "}:" + hex.EncodeToString(sum[:]) + ":entry"
	require.Equal(t, want, members(t, p, loc, "gen1")[0].Redis())
}

func TestPrepareShardedValidates(t *testing.T) {
	b := newTestBuilder(t)
	good := ShardSpec{Capability: CapCache, Region: "products", KeyVersion: 1, Shards: 4,
		AnchorKind: "generation", MemberKinds: []string{"entry"}}
	for name, mut := range map[string]func(*ShardSpec){
		"no shards":          func(s *ShardSpec) { s.Shards = 0 },
		"too many shards":    func(s *ShardSpec) { s.Shards = MaxShards + 1 },
		"no members":         func(s *ShardSpec) { s.MemberKinds = nil },
		"unknown member":     func(s *ShardSpec) { s.MemberKinds = []string{"bucket"} },
		"members split":      func(s *ShardSpec) { s.MemberKinds = []string{"entry", "generation"} },
		"anchor is a member": func(s *ShardSpec) { s.AnchorKind = "refresh-lease" },
		"unknown anchor":     func(s *ShardSpec) { s.AnchorKind = "bucket" },
		"bad region":         func(s *ShardSpec) { s.Region = "Products" },
		"bad key version":    func(s *ShardSpec) { s.KeyVersion = 0 },
		"unknown capability": func(s *ShardSpec) { s.Capability = "nope" },
		"key too long":       func(s *ShardSpec) { s.Region = strings.Repeat("r", MaxRegionSlug) },
	} {
		s := good
		s.MemberKinds = append([]string(nil), good.MemberKinds...)
		mut(&s)
		bb := b
		if name == "key too long" {
			cfg := testConfig()
			cfg.MaxKeyBytes = MinMaxKeyBytes
			var err error
			bb, err = NewBuilder(cfg)
			require.NoError(t, err)
		}
		_, err := bb.PrepareSharded(s)
		assert.ErrorIs(t, err, ErrInvalidSpec, name)
	}
	_, err := b.PrepareSharded(good)
	require.NoError(t, err)
}

func TestShardedMemberBounds(t *testing.T) {
	b := newTestBuilder(t)
	p := cacheShards(t, b, "products", 4)
	q := cacheShards(t, b, "search", 4)
	loc, err := p.Locate([][]byte{[]byte("k")})
	require.NoError(t, err)
	_, err = p.AppendMembers(nil, loc, nil)
	assert.ErrorIs(t, err, ErrInvalidSpec, "empty scope")
	_, err = p.AppendMembers(nil, loc, make([]byte, MaxScopeBytes+1))
	assert.ErrorIs(t, err, ErrInvalidSpec, "scope too long")
	_, err = q.AppendMembers(nil, loc, []byte("g"))
	assert.ErrorIs(t, err, ErrInvalidSpec, "a location of another layout")
	_, err = p.AppendMembers(nil, Location{}, []byte("g"))
	assert.ErrorIs(t, err, ErrInvalidSpec, "zero location")
	_, err = p.Locate(nil)
	assert.ErrorIs(t, err, ErrInvalidSpec)
	_, err = p.Locate([][]byte{make([]byte, MaxPartBytes+1)})
	assert.ErrorIs(t, err, ErrInvalidSpec)
	_, err = p.AppendMembers(nil, loc, make([]byte, MaxScopeBytes))
	require.NoError(t, err)
}

// TestShardsSpread checks that locations spread evenly over the shards
// (the point of sharding: no region is one hot slot). 16,000 seeded random
// resources over 16 shards: each shard within ±20% of 1,000.
func TestShardsSpread(t *testing.T) {
	p := cacheShards(t, newTestBuilder(t), "products", 16)
	counts := make([]int, 16)
	for i := 0; i < 16000; i++ {
		loc, err := p.Locate([][]byte{[]byte("tenant"), strconv.AppendInt(nil, int64(i), 10)})
		require.NoError(t, err)
		counts[loc.Shard()]++
	}
	for i, n := range counts {
		assert.InDelta(t, 1000, n, 200, "shard %d", i)
	}
}

// goldenSharded pins the sharded layout like golden_keys.json pins Build.
type goldenSharded struct {
	Comment  string                `json:"comment"`
	Region   string                `json:"region"`
	Shards   int                   `json:"shards"`
	Anchors  []string              `json:"anchors"`
	Resource []goldenShardedMember `json:"members"`
}

type goldenShardedMember struct {
	PartsHex []string `json:"parts_hex"`
	Scope    string   `json:"scope"`
	Shard    int      `json:"shard"`
	Keys     []string `json:"keys"`
	Slot     uint16   `json:"slot"`
}

const goldenShardedPath = "testdata/golden_sharded.json"

func TestShardedGoldenVectors(t *testing.T) {
	g := readGolden(t) // same test material as golden_keys.json
	b := goldenBuilder(t, g)
	want := goldenSharded{
		Comment: "Sharded layout golden vectors (material, app and env of golden_keys.json). Regenerate with: go test ./runtime/keys -run TestShardedGoldenVectors -update (only together with a key schema change).",
		Region:  "worklog-summary", Shards: 8,
	}
	if !*update {
		raw, err := os.ReadFile(goldenShardedPath)
		require.NoError(t, err)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&want))
	}
	p := cacheShards(t, b, want.Region, want.Shards)
	got := want
	got.Anchors = nil
	for i := 0; i < p.Shards(); i++ {
		got.Anchors = append(got.Anchors, p.Anchor(i).Redis())
	}
	inputs := want.Resource
	if *update {
		inputs = []goldenShardedMember{
			{PartsHex: []string{hex.EncodeToString([]byte("tenant-1")), hex.EncodeToString([]byte("item-42"))}, Scope: "00112233445566778899aabbccddeeff"},
			{PartsHex: []string{hex.EncodeToString([]byte("tenant-1")), hex.EncodeToString([]byte("item-42"))}, Scope: "ffeeddccbbaa99887766554433221100"},
			{PartsHex: []string{""}, Scope: "01"},
			{PartsHex: []string{hex.EncodeToString([]byte("{tag}")), hex.EncodeToString([]byte("a:b"))}, Scope: "00112233445566778899aabbccddeeff"},
		}
	}
	got.Resource = nil
	for _, in := range inputs {
		parts := make([][]byte, len(in.PartsHex))
		for i, h := range in.PartsHex {
			var err error
			parts[i], err = hex.DecodeString(h)
			require.NoError(t, err)
		}
		scope, err := hex.DecodeString(in.Scope)
		require.NoError(t, err)
		loc, err := p.Locate(parts)
		require.NoError(t, err)
		ks, err := p.AppendMembers(nil, loc, scope)
		require.NoError(t, err)
		out := goldenShardedMember{PartsHex: in.PartsHex, Scope: in.Scope, Shard: loc.Shard(), Slot: ks[0].Slot()}
		for _, k := range ks {
			out.Keys = append(out.Keys, k.Redis())
		}
		got.Resource = append(got.Resource, out)
	}
	if *update {
		out, err := json.MarshalIndent(got, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Clean(goldenShardedPath), append(out, '\n'), 0o644))
		raw, err := os.ReadFile(goldenShardedPath)
		require.NoError(t, err)
		want = goldenSharded{}
		require.NoError(t, json.Unmarshal(raw, &want))
	}
	assert.Equal(t, want, got)
}

func BenchmarkShardedLocateAndMembers(b *testing.B) {
	p := cacheShards(b, newTestBuilder(b), "products", 16)
	parts := [][]byte{[]byte("sku-42"), []byte("en")}
	scope := []byte("0123456789abcdef")
	dst := make([]Key, 0, 2)
	b.ReportAllocs()
	for b.Loop() {
		loc, err := p.Locate(parts)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.AppendMembers(dst[:0], loc, scope); err != nil {
			b.Fatal(err)
		}
	}
}
