package keys

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

var update = flag.Bool("update", false, "rewrite testdata/golden_keys.json from the current builder")

const goldenPath = "testdata/golden_keys.json"

// goldenFile pins the key format: any change to the canonical encoding,
// digest or layout breaks these vectors, which is the point — existing keys
// in Redis would be orphaned.
type goldenFile struct {
	Comment  string            `json:"comment"`
	App      string            `json:"app"`
	Env      string            `json:"env"`
	Write    int               `json:"write_version"`
	Material map[string]string `json:"material_hex"` // test-only material
	Vectors  []goldenVector    `json:"vectors"`
}

type goldenVector struct {
	Name        string   `json:"name"`
	Capability  string   `json:"capability"`
	Region      string   `json:"region"`
	KeyVersion  int      `json:"key_version"`
	Kinds       []string `json:"kinds"` // more than one: built with Group
	PartsHex    []string `json:"parts_hex"`
	Opaque      bool     `json:"opaque,omitempty"`
	HashVersion int      `json:"hash_version"`
	Keys        []string `json:"keys"`
	Slot        uint16   `json:"slot"`
}

func goldenBuilder(t *testing.T, g goldenFile) *Builder {
	t.Helper()
	versions := map[int]policy.Secret{}
	for v, h := range g.Material {
		raw, err := hex.DecodeString(h)
		require.NoError(t, err)
		var n int
		require.NoError(t, json.Unmarshal([]byte(v), &n))
		versions[n] = policy.NewSecret(raw)
	}
	b, err := NewBuilder(Config{App: g.App, Env: g.Env, Material: policy.KeyMaterial{WriteVersion: g.Write, Versions: versions}})
	require.NoError(t, err)
	return b
}

func (v goldenVector) spec(t *testing.T) Spec {
	parts := make([][]byte, len(v.PartsHex))
	for i, h := range v.PartsHex {
		p, err := hex.DecodeString(h)
		require.NoError(t, err)
		parts[i] = p
	}
	return Spec{Capability: Capability(v.Capability), Region: v.Region, KeyVersion: v.KeyVersion, Kind: v.Kinds[0], Parts: parts, Opaque: v.Opaque}
}

func (v goldenVector) build(t *testing.T, b *Builder) []Key {
	s := v.spec(t)
	if len(v.Kinds) == 1 {
		k, err := b.BuildWith(s, v.HashVersion)
		require.NoError(t, err, v.Name)
		return []Key{k}
	}
	ks, err := b.GroupWith(s, v.HashVersion, v.Kinds...)
	require.NoError(t, err, v.Name)
	return ks
}

func readGolden(t *testing.T) goldenFile {
	t.Helper()
	raw, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	var g goldenFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&g))
	require.NotEmpty(t, g.Vectors)
	return g
}

func TestGoldenVectors(t *testing.T) {
	g := readGolden(t)
	b := goldenBuilder(t, g)
	for i, v := range g.Vectors {
		ks := v.build(t, b)
		if *update {
			g.Vectors[i].Keys = nil
			for _, k := range ks {
				g.Vectors[i].Keys = append(g.Vectors[i].Keys, k.Redis())
			}
			g.Vectors[i].Slot = ks[0].Slot()
			continue
		}
		require.Len(t, ks, len(v.Keys), v.Name)
		for j, k := range ks {
			assert.Equal(t, v.Keys[j], k.Redis(), v.Name)
			assert.Equal(t, v.Slot, k.Slot(), v.Name)
		}
	}
	if *update {
		out, err := json.MarshalIndent(g, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Clean(goldenPath), append(out, '\n'), 0o644))
	}
}

// TestDigestMatchesSpecification recomputes one digest by hand from the
// documented canonical encoding, independently of Builder.digest, so the
// golden file is not merely the builder agreeing with itself.
func TestDigestMatchesSpecification(t *testing.T) {
	secret := bytes.Repeat([]byte{0x42}, 32)
	b, err := NewBuilder(Config{App: "app", Env: "dev", Material: policy.KeyMaterial{WriteVersion: 3, Versions: map[int]policy.Secret{3: policy.NewSecret(secret)}}})
	require.NoError(t, err)
	s := Spec{Capability: CapIdem, Region: "create-worklog", KeyVersion: 2, Kind: "marker", Parts: [][]byte{[]byte("tenant-1"), []byte("op")}}
	k, err := b.Build(s)
	require.NoError(t, err)

	canonical := []byte{}
	field := func(p []byte) {
		canonical = append(canonical, byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p)))
		canonical = append(canonical, p...)
	}
	field([]byte("caphost/keys/digest/v1"))
	field([]byte("app"))
	field([]byte("dev"))
	field([]byte("idem"))
	field([]byte("create-worklog"))
	field([]byte("record")) // the kind group, shared by record and marker
	field([]byte{0, 0, 0, 2})
	field([]byte{0, 0, 0, 2})
	field([]byte("tenant-1"))
	field([]byte("op"))
	m := hmac.New(sha256.New, secret)
	m.Write(canonical)
	d := hex.EncodeToString(m.Sum(nil))
	assert.Equal(t, "ca:app:dev:idem:create-worklog:hv3:kv2:{"+d[:8]+"}:"+d+":marker", k.Redis())

	s.Opaque = true
	ko, err := b.Build(s)
	require.NoError(t, err)
	sum := sha256.Sum256(canonical)
	d = hex.EncodeToString(sum[:])
	assert.Equal(t, "ca:app:dev:idem:create-worklog:hv0:kv2:{"+d[:8]+"}:"+d+":marker", ko.Redis())
}
